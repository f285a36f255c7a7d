#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "framework/util/op_counter.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

TEST(AtenOpCounter, CountsWhatTheHostIssuesAndWhatRunsNestedSeparately) {
  const auto a = at::rand({4, 8}), w = at::rand({3, 8}), b = at::rand({3});
  int64_t top = 0, all = 0;
  {
    AtenOpCounter counter;
    const auto sum = at::add(a, a);
    EXPECT_EQ(counter.top_level(), 1);
    const auto y = at::linear(a, w, b);  // linear dispatches addmm (and a transpose) itself
    const auto again = at::add(sum, a);
    top = counter.top_level();
    all = counter.all();
    // By name: the host's own operators only, each as often as it was issued.
    const std::map<std::string, int64_t> want = {{"aten::add", 2}, {"aten::linear", 1}};
    EXPECT_EQ(counter.top_level_by_name(), want);
  }
  EXPECT_EQ(top, 3);
  EXPECT_GT(all, top);
  {
    AtenOpCounter counter;
    const double first = a[0][0].item<double>();  // one scalar read back
    const auto where = at::nonzero(a.gt(first));  // its size depends on the values
    EXPECT_EQ(counter.host_reads(), 2);
  }
  // Outside a counter nothing is counted, and a second counter starts from zero.
  const auto outside = at::mul(a, a);
  AtenOpCounter again;
  EXPECT_EQ(again.top_level(), 0);
  const auto inside = at::mul(a, a);
  EXPECT_EQ(again.top_level(), 1);
  // One counter per thread at a time.
  EXPECT_NE(testing::error_of([] { AtenOpCounter nested; }).find("already active"),
            std::string::npos);
}

TEST(AtenOpCounter, KernelsAreTheInnermostComputingOperators) {
  const auto a = at::rand({4, 8}), w = at::rand({3, 8}), b = at::rand({3});
  AtenOpCounter counter;
  // Views and reshapes that do not copy compute nothing.
  const auto v = a.view({8, 4}).transpose(0, 1).unsqueeze(0).reshape({4, 8});
  EXPECT_EQ(counter.kernels(), 0);
  EXPECT_GE(counter.top_level(), 4);
  // linear is one GEMM (addmm), whatever views it makes on the way.
  const auto y = at::linear(a, w, b);
  EXPECT_EQ(counter.kernels(), 1);
  // A reshape that must copy counts its copy; a conversion to the same dtype computes nothing.
  const auto copied = a.t().reshape({-1});
  const auto same = a.to(at::kFloat);
  EXPECT_EQ(counter.kernels(), 2);
  // A conversion to another dtype is one copy kernel; an elementwise op one kernel.
  const auto dbl = a.to(at::kDouble);
  const auto sum = a + a;
  EXPECT_EQ(counter.kernels(), 4);
}

}  // namespace
}  // namespace gengraph

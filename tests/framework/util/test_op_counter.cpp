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
    top = counter.top_level();
    all = counter.all();
  }
  EXPECT_EQ(top, 2);
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

}  // namespace
}  // namespace gengraph

// The weight-only products past kWidenRows rows (framework/quant/widened_gemm.cpp): the stored
// weight widened to float32, a panel of output channels at a time below kWholeWidenRows rows and
// whole from it, then LibTorch's GEMM. Each layout's widening must give exactly the values the
// format defines, and the panels must multiply as the whole widened weight does, to the bit.
// And kernels::read_sum, the read stream the bandwidth probe times.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "framework/quant/kernels.h"
#include "framework/quant/kernels_internal.h"

namespace gengraph::kernels {
namespace {

struct Layout {
  std::string name;
  std::function<at::Tensor(const at::Tensor&)> product;  // x -> y by gengraph's operator
  at::Tensor widened;  // the weight as the format defines it, in float32
};

// Each stored layout of an [N, K] weight, with its operator and its exact float32 values.
std::vector<Layout> layouts(int64_t N, int64_t K) {
  std::vector<Layout> out;
  const at::Tensor q = at::randint(-127, 128, {N, K}).to(at::kChar);
  const at::Tensor row_scales = at::rand({N}) * 0.01 + 1e-3;
  out.push_back({"int8 per channel",
                 [=](const at::Tensor& x) { return linear_int8(x, q, row_scales); },
                 q.to(at::kFloat) * row_scales.unsqueeze(1)});
  const at::Tensor block_scales = (at::rand({N, K / 32}) * 0.01 + 1e-3).to(at::kHalf);
  out.push_back(
      {"int8 in blocks of 32", [=](const at::Tensor& x) { return linear_int8(x, q, block_scales); },
       (q.to(at::kFloat).view({N, K / 32, 32}) * block_scales.to(at::kFloat).unsqueeze(-1))
           .view({N, K})});
  const at::Tensor bf16 = (at::randn({N, K}) * 0.05).to(at::kBFloat16);
  out.push_back(
      {"bfloat16", [=](const at::Tensor& x) { return linear_bf16(x, bf16); }, bf16.to(at::kFloat)});
  const int64_t group = 64;
  const at::Tensor levels = at::randint(0, 16, {N, K}).to(at::kInt);
  const at::Tensor packed = pack_int4(levels);
  const at::Tensor scales = (at::rand({N, K / group}) * 0.01 + 1e-3).to(at::kHalf);
  const at::Tensor zeros = (at::randn({N, K / group}) * 0.05).to(at::kHalf);
  out.push_back(
      {"int4 in groups of 64",
       [=](const at::Tensor& x) { return linear_int4(x, packed, scales, zeros, group); },
       (levels.to(at::kFloat).view({N, K / group, group}) * scales.to(at::kFloat).unsqueeze(-1) +
        zeros.to(at::kFloat).unsqueeze(-1))
           .view({N, K})});
  return out;
}

TEST(WidenedGemm, EveryPanelMultipliesAsTheWholeWidenedWeightToTheBit) {
  at::manual_seed(11);
  // K = 2,048: a panel takes 128 output channels, so N = 293 makes two whole panels and a part.
  constexpr int64_t K = 2048, N = 293;
  ASSERT_EQ(detail::panel_rows(N, K), 128);
  for (const bool plain : {false, true}) {
    use_plain_loops(plain);
    SCOPED_TRACE(plain ? "plain loops" : (vectorized() ? "AVX2" : "plain (no AVX2 here)"));
    for (const Layout& l : layouts(N, K)) {
      SCOPED_TRACE(l.name);
      // Panels (kWidenRows and a row count between), then the whole weight.
      for (const int64_t M : {kWidenRows, kWidenRows + 37, detail::kWholeWidenRows}) {
        const at::Tensor x = at::randn({M, K});
        EXPECT_TRUE(at::equal(l.product(x), at::linear(x, l.widened))) << "M " << M;
      }
      // Below kWidenRows the stored weight is streamed: the same product, in its own order.
      const at::Tensor x = at::randn({kWidenRows - 1, K});
      EXPECT_TRUE(at::allclose(l.product(x), at::linear(x, l.widened), 1e-4, 1e-4));
    }
  }
  use_plain_loops(false);
}

// Small integers, so that every partial sum is exact in float32 whatever the order: the sum must
// be the integer sum, on both paths and thread counts, with a length that leaves a vector tail.
TEST(ReadSum, SumsEveryValueOnce) {
  const int64_t n = (int64_t{1} << 20) + 13;
  const at::Tensor ints = at::arange(n, at::kLong).remainder(7);
  const int64_t want = ints.sum().item<int64_t>();
  const at::Tensor t = ints.to(at::kFloat);
  const int threads = at::get_num_threads();
  for (const int use : {1, 2}) {
    at::set_num_threads(use);
    for (const bool plain : {false, true}) {
      use_plain_loops(plain);
      EXPECT_EQ(read_sum(t), static_cast<float>(want)) << use << " thread(s), plain " << plain;
    }
  }
  use_plain_loops(false);
  at::set_num_threads(threads);
  EXPECT_EQ(read_sum(at::ones({5})), 5.f);
  EXPECT_THROW(read_sum(at::ones({4}, at::kDouble)), c10::Error);
}

}  // namespace
}  // namespace gengraph::kernels

// int8 weights with a float16 scale per block of input channels (model.weights int8 with
// group_size; llama.cpp's Q8_0 at 32): the quantizer against its float16 scale, the weight-only
// kernel against the dequantized weight on both paths, the W8A8 product (activation blocks of the
// same size) to the bit on every integer path, the model on eager and trace, and the refusals.
#include <ATen/ATen.h>
#include <gengraph/gengraph.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "backends/register_builtin.h"
#include "framework/backend/backend_registry.h"
#include "framework/decoding/generator.h"
#include "framework/model/loader.h"
#include "framework/quant/kernels.h"
#include "framework/quant/projection.h"
#include "framework/quant/quantize.h"
#include "tests/framework/kernels/integer_rows.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using ::testing::HasSubstr;

// Every integer path allowed again and the plain loops off when a test ends, whatever happens.
struct RestorePaths {
  ~RestorePaths() {
    kernels::use_plain_loops(false);
    kernels::allow_vnni(true);
    kernels::allow_amx(true);
  }
};

std::string integer_path() {
  return kernels::integer_dot_amx()    ? "AMX (blocks go to VNNI)"
         : kernels::integer_dot_vnni() ? "VNNI"
         : kernels::vectorized()       ? "AVX2"
                                       : "plain";
}

// Weights over several magnitudes per row, a block of zeros, and one of a single large weight.
at::Tensor weights(int64_t n, int64_t k) {
  at::Tensor w = at::randn({n, k}) * at::rand({n, 1}) * at::rand({1, k}) * 0.2;
  w[0].narrow(0, 0, 32).zero_();
  w[n - 1].narrow(0, k - 32, 32).zero_();
  w[n - 1][k - 1] = 3.0;
  return w.contiguous();
}

TEST(Int8Blocks, QuantizeAgainstTheirFloat16Scale) {
  at::manual_seed(1);
  for (const int64_t block : {32, 64, 128, 256}) {
    const at::Tensor w = weights(9, 512);
    const Int8Blocks q = quantize_int8_blocks(w, block);
    ASSERT_EQ(q.q.scalar_type(), at::kChar);
    ASSERT_EQ(q.scales.scalar_type(), at::kHalf);
    ASSERT_EQ(q.scales.sizes(), (std::vector<int64_t>{9, 512 / block}));
    const at::Tensor wb = w.view({9, 512 / block, block});
    const at::Tensor absmax = wb.abs().amax(-1);
    // The scale: absmax / 127 in float32, rounded to float16 to nearest (1 for a block of zeros).
    const at::Tensor want = at::where(absmax > 0, absmax / 127.0, at::ones_like(absmax));
    EXPECT_TRUE(at::equal(q.scales, want.to(at::kHalf)));
    if (block == 32) EXPECT_EQ(q.scales[0][0].item<float>(), 1.0f);  // the block of zeros
    // The levels decided against the float16 scale's value: round half to even, clamped.
    const at::Tensor s = q.scales.to(at::kFloat).unsqueeze(-1);
    const at::Tensor levels = at::round(wb / s).clamp(-127, 127).to(at::kChar).reshape({9, 512});
    EXPECT_TRUE(at::equal(q.q, levels));
    // Dequantized = q * float(scale) exactly, within half a step of the weight (or the clamp's
    // step, when the float16 rounding of the scale put the maximum just past 127 steps).
    const at::Tensor deq = dequantize_int8_blocks(q);
    EXPECT_TRUE(
        at::equal(deq, (q.q.to(at::kFloat).view({9, 512 / block, block}) * s).reshape({9, 512})));
    const at::Tensor err = (deq - w).abs().view({9, 512 / block, block}).amax(-1);
    EXPECT_TRUE(err.le(s.squeeze(-1) * 0.5 + absmax * 2e-3).all().item<bool>()) << block;
  }
  // A block whose scale float16 cannot hold is refused, naming it.
  at::Tensor big = at::zeros({2, 64});
  big[1][40] = 1e7;
  EXPECT_THAT(testing::error_of([&] { quantize_int8_blocks(big, 32); }),
              HasSubstr("output channel 1's block 1 holds a weight of magnitude"));
}

// |got - want| within a few float32 roundings of the sum of |x_k w_k|.
void expect_close(const at::Tensor& got, const at::Tensor& x, const at::Tensor& w) {
  const at::Tensor want = at::linear(x.to(at::kDouble), w.to(at::kDouble));
  const at::Tensor bound =
      at::linear(x.abs().to(at::kDouble), w.abs().to(at::kDouble)) * 1e-5 + 1e-6;
  ASSERT_EQ(got.sizes(), want.sizes());
  const at::Tensor err = (got.to(at::kDouble) - want).abs();
  EXPECT_TRUE(err.le(bound).all().item<bool>()) << "worst error " << err.max().item<double>()
                                                << " at shape " << x.sizes() << " x " << w.sizes();
}

// Weight-only: the plain loops and AVX2, at row counts on both sides of each tile and of the
// switch to the widened weight's GEMM (kWidenRows), and under BatchInvariant (streamed at any row
// count).
TEST(Int8Blocks, WeightOnlyMatchesTheDequantizedWeightOnBothPaths) {
  RestorePaths restore;
  at::manual_seed(2);
  for (const auto& [K, block] : std::vector<std::pair<int64_t, int64_t>>{
           {32, 32}, {96, 32}, {576, 32}, {256, 64}, {384, 128}, {512, 256}}) {
    for (const int64_t N : {1, 5, 17, 40}) {
      const Int8Blocks q = quantize_int8_blocks(weights(N, K), block);
      const at::Tensor deq = dequantize_int8_blocks(q);
      for (const bool plain : {false, true}) {
        kernels::use_plain_loops(plain);
        SCOPED_TRACE(std::string(plain ? "plain" : "vectorized") + " K " + std::to_string(K) +
                     " block " + std::to_string(block) + " N " + std::to_string(N));
        for (const int64_t M :
             {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{5}, int64_t{9}, int64_t{31},
              int64_t{40}, kernels::kWidenRows - 1, kernels::kWidenRows}) {
          const at::Tensor x = at::randn({M, K});
          expect_close(kernels::linear_int8(x, q.q, q.scales), x, deq);
        }
        kernels::BatchInvariant invariant;
        const at::Tensor x = at::randn({40, K});
        expect_close(kernels::linear_int8(x, q.q, q.scales), x, deq);
      }
    }
  }
}

// W8A8 (activation blocks of the weight's block size): per block the exact integer dot times
// the activation block's scale times the weight block's, summed in float32 in block order. The
// plain loops against that arithmetic written out here, then VNNI (also where AMX is allowed,
// which sends these weights to the VNNI tile) and AVX2 against the plain loops with at::equal,
// at every row count.
TEST(Int8Blocks, W8A8GivesTheSameFloatsOnEveryPath) {
  RestorePaths restore;
  at::manual_seed(3);
  // M: past kIntegerGemmRows, where outside BatchInvariant the float GEMM may take them.
  constexpr int64_t N = 37, M = kernels::kIntegerGemmRows + 2;
  for (const auto& [K, block] : std::vector<std::pair<int64_t, int64_t>>{
           {32, 32}, {96, 32}, {576, 32}, {1536, 32}, {256, 64}, {640, 128}}) {
    SCOPED_TRACE("K " + std::to_string(K) + " block " + std::to_string(block));
    const Int8Blocks q = quantize_int8_blocks(weights(N, K), block);
    at::Tensor x = at::randn({M, K}) * at::rand({1, K}) * 4;
    x[3].narrow(0, 0, block).zero_();  // an activation block of zeros: scale 1
    kernels::use_plain_loops(true);
    const at::Tensor want = kernels::linear_w8a8(x, q.q, q.scales, block);
    kernels::use_plain_loops(false);
    const int64_t nb = K / block;
    const at::Tensor xb = x.view({M, nb, block});
    const at::Tensor absmax = xb.abs().amax(2, true);
    const at::Tensor s = at::where(absmax > 0, absmax / 127.0f, at::ones_like(absmax));
    const at::Tensor xq = at::round(xb / s).to(at::kDouble);
    const at::Tensor sums =
        at::einsum("mbk,nbk->mbn", {xq, q.q.to(at::kDouble).view({N, nb, block})})
            .to(at::kFloat)  // exact: |sum| < 2^24
            .contiguous();
    const at::Tensor sc = s.view({M, nb}).contiguous();
    const at::Tensor ws = q.scales.to(at::kFloat).contiguous();
    const auto S = sums.accessor<float, 3>();
    const auto bs = sc.accessor<float, 2>();
    const auto wsc = ws.accessor<float, 2>();
    const auto got = want.accessor<float, 2>();
    int64_t mismatches = 0;
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n = 0; n < N; ++n) {
        float acc = 0.f;
        for (int64_t b = 0; b < nb; ++b) {
          const float d = bs[m][b] * wsc[n][b];
          acc = std::fma(S[m][b][n], d, acc);
        }
        mismatches += acc != got[m][n];
      }
    }
    EXPECT_EQ(mismatches, 0) << "the plain loops differ from the arithmetic written out";
    // Within the activations' half step of the product by the dequantized weight.
    const at::Tensor deq = dequantize_int8_blocks(q).to(at::kDouble);
    const at::Tensor exact = at::linear(x.to(at::kDouble), deq);
    const at::Tensor half_step = (s.expand({M, nb, block}).reshape({M, K}) * 0.5).to(at::kDouble);
    EXPECT_TRUE((want.to(at::kDouble) - exact)
                    .abs()
                    .le(at::linear(half_step, deq.abs()) + 1e-5)
                    .all()
                    .item<bool>());
    for (const int path : {0, 1, 2}) {
      kernels::allow_amx(path == 0);
      kernels::allow_vnni(path <= 1);
      SCOPED_TRACE(integer_path() + " path " + std::to_string(path));
      {
        kernels::BatchInvariant invariant;  // the integer kernels at every row count
        for (const int64_t rows : {1, 2, 3, 4, 5, 8, 16, 17, 40}) {
          EXPECT_TRUE(at::equal(kernels::linear_w8a8(x.narrow(0, 0, rows), q.q, q.scales, block),
                                want.narrow(0, 0, rows)))
              << rows << " rows";
        }
      }
      EXPECT_TRUE(at::equal(kernels::linear_w8a8(x.narrow(0, 29, 1), q.q, q.scales, block),
                            want.narrow(0, 29, 1)));
      // Outside it, M rows (kernels::integer_rows_by_float_gemm): the integer kernels' floats, or
      // LibTorch's GEMM of the same levels times their scales by the weight widened per block.
      const at::Tensor dequantized = (xq.to(at::kFloat) * s).view({M, K});
      const at::Tensor widened =
          (q.q.to(at::kFloat).view({N, nb, block}) * ws.unsqueeze(-1)).view({N, K});
      kernels::checks::expect_integer_rows(kernels::linear_w8a8(x, q.q, q.scales, block), want,
                                           dequantized, widened);
    }
  }
}

TEST(Int8Blocks, KernelsRefuseOtherBlocksByName) {
  const Int8Blocks q = quantize_int8_blocks(weights(4, 128), 32);
  const at::Tensor x = at::randn({2, 128});
  EXPECT_THAT(testing::error_of([&] { kernels::linear_w8a8(x, q.q, q.scales, 64); }),
              HasSubstr("int8 weights in blocks of 32 take activation blocks of 32 "
                        "(model.int8_activation_block = model.group_size), got 64"));
  EXPECT_THAT(testing::error_of([&] { kernels::linear_w8a8(x, q.q, q.scales, 0); }),
              HasSubstr("take activation blocks of 32"));
  EXPECT_THAT(testing::error_of([&] { kernels::linear_int8(x, q.q, q.scales.to(at::kFloat)); }),
              HasSubstr("scales per block must be contiguous float16"));
  EXPECT_THAT(
      testing::error_of([&] { kernels::linear_int8(x, q.q, q.scales.narrow(1, 0, 3).clone()); }),
      HasSubstr("3 scales a row do not make blocks of a multiple of 32 of the 128 input channels"));
}

// The model: int8 in blocks of 32 (weight-only, and W8A8 with activation blocks of 32) runs on
// eager and trace with the same tokens (QuantizedBackends covers every strategy and the static
// cache); its projections hold float16 scales per block.
TEST(Int8Blocks, ModelGeneratesOnEagerAndTrace) {
  register_builtin_backends();
  for (const int64_t rows : {0, 1}) {
    LoadOptions o;
    o.weights.kind = WeightFormat::Kind::kInt8;
    o.weights.group_size = 32;
    o.weights.int8_activation_rows = rows;
    o.weights.int8_activation_block = rows > 0 ? 32 : 0;
    const auto model = testing::test_model("preset:llama-tiny", 5, o);
    EXPECT_EQ(model->config().weights.describe(),
              rows > 0 ? "int8 (blocks of 32) (int8 activations from 1 row, blocks of 32)"
                       : "int8 (blocks of 32)");
    auto eager = BackendRegistry::instance().create("eager", model, BackendOptions("eager", {}));
    auto trace = BackendRegistry::instance().create("trace", model, BackendOptions("trace", {}));
    ResolvedSettings g;
    g.max_new_tokens = 8;
    const std::vector<std::vector<int64_t>> prompts = {{3, 4, 5, 6}, {9}};
    const auto a = Generator(g).generate(*eager, prompts);
    const auto b = Generator(g).generate(*trace, prompts);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(a.outputs[i].at(0).tokens, b.outputs[i].at(0).tokens) << rows << " " << i;
    }
  }
  // A Projection's weight: the dequantized blocks' product, float16 scales [out, in / 32].
  at::manual_seed(4);
  const at::Tensor w = weights(6, 96), x = at::randn({3, 96});
  WeightFormat f;
  f.kind = WeightFormat::Kind::kInt8;
  f.group_size = 32;
  const Projection p(w.clone(), at::Tensor(), f);
  EXPECT_EQ(p.scales.scalar_type(), at::kHalf);
  EXPECT_EQ(p.scales.sizes(), (std::vector<int64_t>{6, 3}));
  expect_close(p(x), x, dequantize_int8_blocks(quantize_int8_blocks(w, 32)));
}

// How the blocks are asked for and refused: group_size with int8 (absent: a scale per output
// channel), activation blocks of the same size, input widths it divides, CUDA refused by name.
TEST(Int8Blocks, GroupSizeAsksForThemAndRefusalsNameTheKey) {
  EngineOptions e;
  e.weights = "int8";
  e.weights_seed = 2;
  Engine per_channel("gpt2-tiny", e);
  EXPECT_EQ(per_channel.model().describe()["weights"], "int8");
  e.group_size = 32;
  Engine blocks("gpt2-tiny", e);
  EXPECT_EQ(blocks.model().describe()["weights"], "int8 (blocks of 32)");
  EXPECT_EQ(blocks.generate({{1, 2, 3}}, {{"max_new_tokens", 4}}).outputs.size(), 1u);
  e.int8_activation_rows = 1;
  EXPECT_THAT(testing::error_of([&] { Engine("gpt2-tiny", e); }),
              HasSubstr("EngineOptions::int8_activation_block: expected group_size (32) with "
                        "weights int8 in blocks and int8_activation_rows"));
  e.int8_activation_block = 64;
  EXPECT_THAT(testing::error_of([&] { Engine("gpt2-tiny", e); }), HasSubstr("found 64"));
  e.int8_activation_block = 32;
  Engine w8a8("gpt2-tiny", e);
  EXPECT_EQ(w8a8.generate({{1, 2, 3}}, {{"max_new_tokens", 4}}).outputs.size(), 1u);
  e.int8_activation_rows = 0;
  e.int8_activation_block = 0;
  e.group_size = 48;
  EXPECT_THAT(testing::error_of([&] { Engine("gpt2-tiny", e); }),
              HasSubstr("EngineOptions::group_size: expected 32, 64, 128 or 256, found 48"));
  // A width the blocks do not divide is named (llama-a is 48 wide).
  LoadOptions o;
  o.weights.kind = WeightFormat::Kind::kInt8;
  o.weights.group_size = 32;
  EXPECT_THAT(testing::error_of([&] { testing::test_model("llama-a", 1, o); }),
              HasSubstr("not a multiple of group_size 32"));
  WeightFormat f = o.weights;
  EXPECT_THAT(testing::error_of([&] {
                Projection(at::randn({4, 48}), at::Tensor(), f);
              }),
              HasSubstr("model.weights int8: a projection's 48 input channels are not a multiple "
                        "of group_size 32"));
}

}  // namespace
}  // namespace gengraph

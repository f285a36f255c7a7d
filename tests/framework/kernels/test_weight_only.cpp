// gengraph's weight-only CPU kernels against the product by the widened weight in float64, on
// both paths (AVX2 + FMA where this CPU has them, and the plain loops), over the shapes that
// exercise every block size, the K tails and the switch to LibTorch's GEMM.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "framework/quant/kernels.h"
#include "tests/framework/kernels/integer_rows.h"
#include "tests/support/test_util.h"

namespace gengraph::kernels {
namespace {

using checks::expect_integer_rows;
using ::testing::HasSubstr;

// Both paths in turn; the plain loops are restored whatever happens.
struct Paths {
  ~Paths() { use_plain_loops(false); }
  template <typename F>
  void each(F&& f) {
    for (const bool plain : {false, true}) {
      use_plain_loops(plain);
      SCOPED_TRACE(plain ? "plain loops" : (vectorized() ? "AVX2" : "plain (no AVX2 here)"));
      f();
    }
  }
};

// The integer products' path now taken (allow_amx / allow_vnni / use_plain_loops and the CPU).
std::string integer_path() {
  return integer_dot_amx() ? "AMX" : integer_dot_vnni() ? "VNNI" : vectorized() ? "AVX2" : "plain";
}

// Every integer path allowed again and the plain loops off when a test ends, whatever happens.
struct RestorePaths {
  ~RestorePaths() {
    use_plain_loops(false);
    allow_vnni(true);
    allow_amx(true);
  }
};

// x's rows [M, K] quantized per block of `block` channels as the kernels do it: the blocks
// [M, K / block, block], each block's scale (its absolute maximum / 127, 1 for a block of zeros)
// and the levels in float64.
struct BlockLevels {
  at::Tensor blocks, scales, levels;
};
BlockLevels block_levels(const at::Tensor& x, int64_t block) {
  BlockLevels b;
  b.blocks = x.view({x.size(0), x.size(1) / block, block});
  const at::Tensor absmax = b.blocks.abs().amax(2, true);
  b.scales = at::where(absmax > 0, absmax / 127.0f, at::ones_like(absmax));
  b.levels = at::round(b.blocks / b.scales).to(at::kDouble);
  return b;
}

// |got - want| within a few float32 roundings of the sum of |x_k w_k|.
void expect_close(const at::Tensor& got, const at::Tensor& x, const at::Tensor& w) {
  const at::Tensor want = at::linear(x.to(at::kDouble), w.to(at::kDouble));
  const at::Tensor bound =
      at::linear(x.abs().to(at::kDouble), w.abs().to(at::kDouble)) * 1e-5 + 1e-6;
  ASSERT_EQ(got.sizes(), want.sizes());
  EXPECT_EQ(got.scalar_type(), at::kFloat);
  const at::Tensor err = (got.to(at::kDouble) - want).abs();
  EXPECT_TRUE(err.le(bound).all().item<bool>()) << "worst error " << err.max().item<double>()
                                                << " at shape " << x.sizes() << " x " << w.sizes();
}

TEST(WeightOnlyKernels, Int8MatchesTheWidenedWeight) {
  Paths paths;
  paths.each([] {
    at::manual_seed(1);
    for (const int64_t K : {8, 29, 64, 576}) {
      for (const int64_t N : {1, 5, 17, 64}) {
        const at::Tensor q = at::randint(-127, 128, {N, K}).to(at::kChar);
        const at::Tensor scales = at::rand({N}) * 0.01 + 1e-3;
        // Both sides of each tile and of the switch to the widened weight's GEMM.
        for (const int64_t M : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{5},
                                int64_t{9}, int64_t{31}, int64_t{40}, kWidenRows - 1, kWidenRows}) {
          const at::Tensor x = at::randn({M, K});
          expect_close(linear_int8(x, q, scales), x, q.to(at::kFloat) * scales.unsqueeze(1));
        }
      }
    }
  });
}

// W8A8: each activation row quantized to int8 with its own scale, integer sums, both scales
// after. Checked against the same quantization with the sums in float64 (exact for these sizes),
// and against the float product within the activations' quantization error.
TEST(WeightOnlyKernels, W8A8QuantizesEachRowAndSumsExactly) {
  at::manual_seed(2);
  for (const int64_t K : {8, 29, 576}) {
    const at::Tensor q = at::randint(-127, 128, {17, K}).to(at::kChar);
    const at::Tensor scales = at::rand({17}) * 0.01 + 1e-3;
    for (const int64_t M : {1, 3, 32, 40}) {
      at::Tensor x = at::randn({M, K});
      x[0].zero_();  // a row of zeros: scale 1, a product of zeros
      const at::Tensor got = linear_w8a8(x, q, scales);
      const at::Tensor absmax = x.abs().amax(1, true);
      const at::Tensor s = at::where(absmax > 0, absmax / 127.0f, at::ones_like(absmax));
      const at::Tensor xq = at::round(x / s);
      EXPECT_LE(xq.abs().max().item<float>(), 127);
      const at::Tensor sums = at::linear(xq.to(at::kDouble), q.to(at::kDouble));
      const at::Tensor want = sums * s.to(at::kDouble) * scales.to(at::kDouble);
      ASSERT_EQ(got.sizes(), want.sizes());
      // The integer sums at every row count (gengraph's tiles where K % 32 == 0, _int_mm else).
      EXPECT_TRUE(at::allclose(got.to(at::kDouble), want, 1e-6, 1e-9)) << M << " x " << K;
      EXPECT_TRUE(got[0].eq(0).all().item<bool>());
      // Within half a step of each activation row times the weights' absolute sums.
      const at::Tensor w = q.to(at::kDouble) * scales.to(at::kDouble).unsqueeze(1);
      const at::Tensor exact = at::linear(x.to(at::kDouble), w);
      const at::Tensor bound = at::linear(s.to(at::kDouble).expand({M, K}) * 0.5, w.abs()) + 1e-6;
      EXPECT_TRUE((got.to(at::kDouble) - exact).abs().le(bound).all().item<bool>());
    }
  }
}

// W8A8 with block scales (model.int8_activation_block): each block of B channels of a row
// quantized with its own scale, the integer sums per block, then the scales. Checked on every
// path this CPU has (AVX-512 VNNI, AVX2, the plain loops) against the same quantization done here
// with ATen ops and the sums in float64, over weights that use the whole int8 range (-128 too),
// K with a tail of 32 after the 64-channel steps, and row counts on both sides of every tile.
TEST(WeightOnlyKernels, W8A8BlocksQuantizeEachBlockOnEveryPath) {
  RestorePaths restore;
  at::manual_seed(3);
  for (const auto& [K, block] : std::vector<std::pair<int64_t, int64_t>>{
           {32, 32}, {96, 32}, {96, 96}, {576, 64}, {768, 32}}) {
    const at::Tensor q = at::randint(-128, 128, {19, K}).to(at::kChar);
    const at::Tensor scales = at::rand({19}) * 0.01 + 1e-3;
    // 700 rows: a prefill's, quantized by several threads at once (rows split in chunks).
    for (const int64_t M : {1, 2, 3, 4, 5, 9, 33, 700}) {
      at::Tensor x = at::randn({M, K}) * at::rand({1, K}) * 4;  // channels of unequal range
      x[0].narrow(0, 0, block).zero_();                         // a block of zeros: scale 1
      const auto [xb, s, xq] = block_levels(x, block);
      ASSERT_LE(xq.abs().max().item<float>(), 127);
      // [M, blocks, N]: each block's integer sum, exact in float64.
      const at::Tensor sums = at::einsum(
          "mbk,nbk->mbn", {xq.to(at::kDouble), q.to(at::kDouble).view({19, K / block, block})});
      const at::Tensor want = (sums * s.to(at::kDouble)).sum(1) * scales.to(at::kDouble);
      // Float32 roundings of the partial sums: relative to the sum of the products' magnitudes.
      const at::Tensor magnitudes = at::einsum(
          "mbk,nbk->mbn",
          {xq.abs().to(at::kDouble), q.to(at::kDouble).abs().view({19, K / block, block})});
      const at::Tensor tol = (magnitudes * s.to(at::kDouble)).sum(1) * scales.to(at::kDouble);
      for (const int path : {0, 1, 2}) {
        use_plain_loops(path == 2);
        allow_vnni(path == 0);
        SCOPED_TRACE(std::string(path == 0   ? (integer_dot_vnni() ? "VNNI" : "no VNNI here")
                                 : path == 1 ? (vectorized() ? "AVX2" : "no AVX2 here")
                                             : "plain loops") +
                     " K " + std::to_string(K) + " block " + std::to_string(block) + " M " +
                     std::to_string(M));
        const at::Tensor got = linear_w8a8(x, q, scales, block);
        ASSERT_EQ(got.sizes(), want.sizes());
        const at::Tensor err = (got.to(at::kDouble) - want).abs();
        EXPECT_TRUE(err.le(tol * 1e-5 + 1e-9).all().item<bool>())
            << "worst error " << err.max().item<double>();
      }
      use_plain_loops(false);
      allow_vnni(true);
      // One block per row is the per-row scheme: the same levels, so the same values up to float
      // rounding, which is relative to the products' magnitudes (the per-row scheme's float
      // product of the row and channel scales; blocks' integer_rows_by_float_gemm sums in a float
      // GEMM).
      if (block == K) {
        const at::Tensor per_row = linear_w8a8(x, q, scales).to(at::kDouble);
        EXPECT_TRUE((linear_w8a8(x, q, scales, block).to(at::kDouble) - per_row)
                        .abs()
                        .le(tol * 1e-5 + 1e-9)
                        .all()
                        .item<bool>());
      }
    }
  }
}

// With blocks every integer path gives the same floats, to the bit, at any number of rows (under
// BatchInvariant; outside it integer_rows_by_float_gemm may take a float GEMM from kIntegerGemmRows
// rows): a row's outputs do not depend on the rows beside it, so a batch's tokens are each row's
// alone. The
// plain loops are checked here against the arithmetic written out (levels and block scales from
// ATen ops, exact integer sums, acc = fma(float(S_b), s_b, acc) in block order, times the
// channel's scale); AMX (from 4 rows), AVX-512 VNNI and AVX2 against the plain loops, for leading
// runs of rows and a row alone. Blocks of 32 (two to a 64-channel step), 64, 96 (a block ending
// mid-step) and 128; groups of 16 blocks with and without a partial last group; 37 weight rows
// (AMX takes 32, the VNNI tile 16 and 5); 40 activation rows (AMX tiles of 16, 16 and 8).
TEST(WeightOnlyKernels, W8A8BlocksGiveTheSameFloatsOnEveryPathAtAnyRowCount) {
  RestorePaths restore;
  at::manual_seed(5);
  // M: past kIntegerGemmRows, where outside BatchInvariant the float GEMM may take them.
  constexpr int64_t N = 37, M = kIntegerGemmRows + 2;
  for (const auto& [K, block] : std::vector<std::pair<int64_t, int64_t>>{{64, 32},
                                                                         {96, 32},
                                                                         {576, 32},
                                                                         {768, 32},
                                                                         {3072, 32},
                                                                         {1152, 96},
                                                                         {2048, 64},
                                                                         {640, 128}}) {
    SCOPED_TRACE("K " + std::to_string(K) + " block " + std::to_string(block));
    const at::Tensor q = at::randint(-128, 128, {N, K}).to(at::kChar);
    const at::Tensor scales = at::rand({N}) * 0.01 + 1e-3;
    at::Tensor x = at::randn({M, K}) * at::rand({1, K}) * 4;
    x[3].narrow(0, block, block).zero_();  // a block of zeros: scale 1
    use_plain_loops(true);
    const at::Tensor want = linear_w8a8(x, q, scales, block);
    use_plain_loops(false);
    // The arithmetic written out.
    const int64_t nb = K / block;
    const auto [xb, s, xq] = block_levels(x, block);
    const at::Tensor sums = at::einsum("mbk,nbk->mbn", {xq, q.to(at::kDouble).view({N, nb, block})})
                                .to(at::kFloat)  // exact: |sum| < 2^24
                                .contiguous();
    const at::Tensor sc = s.view({M, nb}).contiguous();
    const auto S = sums.accessor<float, 3>();
    const auto bs = sc.accessor<float, 2>();
    const auto got_plain = want.accessor<float, 2>();
    const auto channel = scales.accessor<float, 1>();
    int64_t mismatches = 0;
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n = 0; n < N; ++n) {
        float acc = 0.f;
        for (int64_t b = 0; b < nb; ++b) acc = std::fma(S[m][b][n], bs[m][b], acc);
        const float y = acc * channel[n];
        mismatches += y != got_plain[m][n];
      }
    }
    EXPECT_EQ(mismatches, 0) << "the plain loops differ from the arithmetic written out";
    for (const int path : {0, 1, 2}) {
      allow_amx(path == 0);
      allow_vnni(path <= 1);
      SCOPED_TRACE(integer_path() + " path " + std::to_string(path));
      {
        BatchInvariant invariant;  // the integer kernels at every row count
        for (const int64_t rows : {1, 2, 3, 4, 5, 8, 16, 17, 40}) {
          EXPECT_TRUE(at::equal(linear_w8a8(x.narrow(0, 0, rows), q, scales, block),
                                want.narrow(0, 0, rows)))
              << rows << " rows";
        }
      }
      EXPECT_TRUE(
          at::equal(linear_w8a8(x.narrow(0, 29, 1), q, scales, block), want.narrow(0, 29, 1)));
      // Outside it, M rows: the integer kernels' floats, or on a CPU with AVX2 and without AMX
      // LibTorch's GEMM of the same levels times their scales by the widened weight.
      const at::Tensor dequantized = (xq.to(at::kFloat) * s).view({M, K});
      expect_integer_rows(linear_w8a8(x, q, scales, block), want, dequantized,
                          q.to(at::kFloat) * scales.unsqueeze(1));
    }
  }
}

// A scale per row at any row count, inside BatchInvariant and outside it: gengraph's kernels with
// one block a row give LibTorch's _int_mm path's floats to the bit (int32 sums, then the row's and
// the channel's scales), on the AMX, the VNNI and the AVX2 path, K with and without a 32-channel
// tail after the 64-channel steps, weights over the whole int8 range. 85 weight rows: AMX (from 4
// activation rows) takes 64 of them four tiles at a time, 16 in one tile, and leaves 5 to the VNNI
// tile; 16 and 31 activation rows are one tile, full and partial, 40 and 70 several (a prefill's
// rows: no float GEMM takes them, unlike integer_rows_by_float_gemm's blocks).
TEST(WeightOnlyKernels, W8A8PerRowEqualsTheIntegerGemmToTheBitAtAnyRowCount) {
  RestorePaths restore;
  at::manual_seed(4);
  for (const int64_t K : {32, 96, 768, 3072}) {
    const at::Tensor q = at::randint(-128, 128, {85, K}).to(at::kChar);
    const at::Tensor scales = at::rand({85}) * 0.01 + 1e-3;
    for (const int64_t M : {1, 2, 5, 8, 16, 31, 40, 70}) {
      const at::Tensor x = at::randn({M, K}) * at::rand({1, K}) * 4;
      const at::Tensor absmax = x.abs().amax(1, true);
      const at::Tensor s = at::where(absmax > 0, absmax / 127.0f, at::ones_like(absmax));
      const at::Tensor xq = at::round(x / s).to(at::kChar);
      const at::Tensor want = at::_int_mm(xq, q.t()).to(at::kFloat).mul_(s).mul_(scales);
      for (const int path : {0, 1, 2}) {
        allow_amx(path == 0);
        allow_vnni(path <= 1);
        SCOPED_TRACE(integer_path() + " path " + std::to_string(path) + " K " + std::to_string(K) +
                     " M " + std::to_string(M));
        {
          BatchInvariant invariant;
          EXPECT_TRUE(at::equal(linear_w8a8(x, q, scales), want)) << "under BatchInvariant";
        }
        EXPECT_TRUE(at::equal(linear_w8a8(x, q, scales), want)) << "outside BatchInvariant";
      }
    }
  }
}

// A NaN or an infinity among a row's activations makes that row's outputs NaN (as the float
// product's would be), on every path and with a scale per row or per block; the other rows keep
// their values.
TEST(WeightOnlyKernels, W8A8NonFiniteActivationsGiveNaNRows) {
  RestorePaths restore;
  // 20 weight rows and 4 activation rows: the AMX path (where the CPU has it) takes 16 of them.
  const at::Tensor q = at::randint(-127, 128, {20, 64}).to(at::kChar);
  const at::Tensor scales = at::rand({20}) + 0.1;
  at::Tensor x = at::randn({4, 64});
  x[0][7] = std::numeric_limits<float>::quiet_NaN();
  x[2][40] = std::numeric_limits<float>::infinity();
  for (const int path : {0, 1, 2}) {
    use_plain_loops(path == 2);
    allow_vnni(path == 0);
    for (const int64_t block : {0, 32}) {
      SCOPED_TRACE("path " + std::to_string(path) + " block " + std::to_string(block));
      const at::Tensor y = linear_w8a8(x, q, scales, block);
      if (path == 2 && block == 0) continue;  // the plain loops leave a row scale to _int_mm
      EXPECT_TRUE(y[0].isnan().all().item<bool>());
      EXPECT_TRUE(y[2].isnan().all().item<bool>());
      EXPECT_TRUE(y[1].isfinite().all().item<bool>());
      EXPECT_TRUE(y[3].isfinite().all().item<bool>());
    }
  }
}

TEST(WeightOnlyKernels, W8A8BlocksRefuseABlockThatDoesNotDivideTheRow) {
  const at::Tensor q = at::zeros({4, 96}, at::kChar);
  const at::Tensor scales = at::ones({4});
  const at::Tensor x = at::randn({2, 96});
  for (const int64_t block : {64, 48}) {
    try {
      linear_w8a8(x, q, scales, block);
      ADD_FAILURE() << "block " << block << " was taken";
    } catch (const c10::Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("block " + std::to_string(block) +
                                      " must be a multiple of 32 dividing the 96 input channels"));
    }
  }
}

TEST(WeightOnlyKernels, BFloat16MatchesTheWidenedWeight) {
  Paths paths;
  paths.each([] {
    at::manual_seed(2);
    for (const int64_t K : {8, 13, 576}) {
      for (const int64_t N : {3, 64}) {
        const at::Tensor w = (at::randn({N, K}) * 0.05).to(at::kBFloat16);
        for (const int64_t M : {1, 4, 7, 33}) {
          const at::Tensor x = at::randn({M, K});
          expect_close(linear_bf16(x, w), x, w.to(at::kFloat));
        }
      }
    }
  });
}

TEST(WeightOnlyKernels, Float32StreamsTheWeightAsIs) {
  Paths paths;
  paths.each([] {
    at::manual_seed(5);
    for (const int64_t K : {8, 21, 576}) {
      const at::Tensor w = at::randn({37, K});
      for (const int64_t M : {1, 2, 4, 8, 32}) {
        const at::Tensor x = at::randn({M, K});
        expect_close(linear_f32(x, w), x, w);
      }
    }
  });
}

TEST(WeightOnlyKernels, Int4PacksLosslesslyAndMatchesTheWidenedWeight) {
  Paths paths;
  paths.each([] {
    at::manual_seed(3);
    for (const int64_t group : {32, 64, 128}) {
      for (const int64_t K : {128, 384}) {
        if (K % group != 0) continue;
        for (const int64_t N : {1, 7, 40}) {
          const at::Tensor levels = at::randint(0, 16, {N, K}).to(at::kInt);
          const at::Tensor packed = pack_int4(levels);
          ASSERT_EQ(packed.sizes(), at::IntArrayRef({N, K / 2}));
          ASSERT_TRUE(at::equal(unpack_int4(packed), levels));
          // float16 scales and zeros, multiplied as the float32 they are.
          const at::Tensor scales = (at::rand({N, K / group}) * 0.01 + 1e-3).to(at::kHalf);
          const at::Tensor zeros = (at::randn({N, K / group}) * 0.05).to(at::kHalf);
          const at::Tensor w = (levels.to(at::kFloat).view({N, K / group, group}) *
                                    scales.to(at::kFloat).unsqueeze(-1) +
                                zeros.to(at::kFloat).unsqueeze(-1))
                                   .view({N, K});
          for (const int64_t M : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{6},
                                  int64_t{32}, kWidenRows, int64_t{256}}) {
            const at::Tensor x = at::randn({M, K});
            const at::Tensor y = linear_int4(x, packed, scales, zeros, group);
            expect_close(y, x, w);
            // From kWidenRows rows on, the weight is widened to exactly the values of level *
            // scale + zero (each product rounded before the sum), then multiplied by the GEMM.
            if (M >= kWidenRows) EXPECT_TRUE(at::equal(y, at::linear(x, w))) << "M " << M;
          }
        }
      }
    }
  });
}

// Element k of a row sits where the layout says: a single level set at each position.
TEST(WeightOnlyKernels, Int4LayoutPutsEachElementInItsNibble) {
  const int64_t K = 64;
  for (const int64_t k : {0, 1, 15, 16, 17, 31, 32, 47, 48, 63}) {
    at::Tensor levels = at::zeros({1, K}, at::kInt);
    levels[0][k] = 9;
    const at::Tensor packed = pack_int4(levels);
    const int64_t byte = (k / 32) * 16 + k % 16;
    const int expect = (k % 32) < 16 ? 9 : 9 << 4;
    EXPECT_EQ(packed[0][byte].item<int>(), expect) << "element " << k;
  }
}

// W4A8 (int4 weights by activations in blocks of 32): the plain loops against the arithmetic
// written out here (levels and scales from ATen ops, exact sums, std::fma in the kernels' order),
// the AMX (from 16 rows), VNNI and AVX2 paths against the plain loops to the bit at every row
// count, and the result against the float64 product within what the activations' rounding allows. K
// from one block to 96, whole and partial runs of four blocks and groups of 16 blocks; every group
// size.
TEST(WeightOnlyKernels, W4A8GivesTheSameFloatsOnEveryPathAtAnyRowCount) {
  RestorePaths restore;
  at::manual_seed(11);
  // M: past kIntegerGemmRows, where outside BatchInvariant the float GEMM may take them.
  constexpr int64_t N = 37, M = kIntegerGemmRows + 2;
  for (const auto& [K, group] : std::vector<std::pair<int64_t, int64_t>>{{32, 32},
                                                                         {96, 32},
                                                                         {576, 32},
                                                                         {576, 64},
                                                                         {768, 32},
                                                                         {768, 256},
                                                                         {1536, 128},
                                                                         {3072, 32}}) {
    SCOPED_TRACE("K " + std::to_string(K) + " group " + std::to_string(group));
    const int64_t nb = K / 32, groups = K / group, per = group / 32;
    const at::Tensor levels = at::randint(0, 16, {N, K}).to(at::kInt);
    const at::Tensor packed = pack_int4(levels);
    const at::Tensor scales = (at::rand({N, groups}) * 0.01 + 1e-3).to(at::kHalf);
    const at::Tensor zeros = (at::randn({N, groups}) * 0.05).to(at::kHalf);
    const at::Tensor scales_f = scales.to(at::kFloat), zeros_f = zeros.to(at::kFloat);
    at::Tensor x = at::randn({M, K}) * at::rand({1, K}) * 4;
    x[3].narrow(0, 0, 32).zero_();  // a block of zeros: scale 1
    use_plain_loops(true);
    const at::Tensor want = linear_w4a8(x, packed, scales, zeros, group);
    use_plain_loops(false);
    // The arithmetic written out.
    const auto [xb, s, xq] = block_levels(x, 32);
    const at::Tensor sums =
        at::einsum("mbk,nbk->mbn", {xq, levels.to(at::kDouble).view({N, nb, 32})})
            .to(at::kFloat)  // exact: |sum| < 2^24
            .contiguous();
    const at::Tensor asum = xq.sum(2).to(at::kFloat).contiguous();
    const at::Tensor sc = s.view({M, nb}).contiguous();
    const auto S = sums.accessor<float, 3>();
    const auto A = asum.accessor<float, 2>();
    const auto bs = sc.accessor<float, 2>();
    const auto ws = scales_f.accessor<float, 2>();
    const auto wz = zeros_f.accessor<float, 2>();
    const auto got_plain = want.accessor<float, 2>();
    int64_t mismatches = 0;
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n = 0; n < N; ++n) {
        float acc[16] = {};
        for (int64_t b = 0; b < nb; ++b) {
          const float t = std::fma(S[m][b][n], ws[n][b / per], A[m][b] * wz[n][b / per]);
          acc[b % 16] = std::fma(t, bs[m][b], acc[b % 16]);
        }
        for (int w = 8; w >= 1; w /= 2) {
          for (int i = 0; i < w; ++i) acc[i] += acc[i + w];
        }
        mismatches += acc[0] != got_plain[m][n];
      }
    }
    EXPECT_EQ(mismatches, 0) << "the plain loops differ from the arithmetic written out";
    // Against the float64 product: each activation is off by at most half its block's step.
    const at::Tensor w = (levels.to(at::kFloat).view({N, groups, group}) * scales_f.unsqueeze(-1) +
                          zeros_f.unsqueeze(-1))
                             .view({N, K})
                             .to(at::kDouble);
    const at::Tensor exact = at::linear(x.to(at::kDouble), w);
    const at::Tensor half_steps = (s / 2).expand({M, nb, 32}).reshape({M, K}).to(at::kDouble);
    const at::Tensor bound = at::linear(half_steps, w.abs()) * 1.001 +
                             at::linear(x.abs().to(at::kDouble), w.abs()) * 1e-5 + 1e-6;
    EXPECT_TRUE((want.to(at::kDouble) - exact).abs().le(bound).all().item<bool>());
    for (const int path : {0, 1, 2}) {
      allow_amx(path == 0);
      allow_vnni(path <= 1);
      SCOPED_TRACE(integer_path() + " path " + std::to_string(path));
      {
        BatchInvariant invariant;  // the integer kernels at every row count
        for (const int64_t rows : {1, 2, 3, 4, 5, 8, 16, 17, 40}) {
          EXPECT_TRUE(at::equal(linear_w4a8(x.narrow(0, 0, rows), packed, scales, zeros, group),
                                want.narrow(0, 0, rows)))
              << rows << " rows";
        }
      }
      EXPECT_TRUE(at::equal(linear_w4a8(x.narrow(0, 29, 1), packed, scales, zeros, group),
                            want.narrow(0, 29, 1)));
      // Outside it, M rows: as in W8A8BlocksGiveTheSameFloatsOnEveryPathAtAnyRowCount, the
      // weight widened as level * scale + zero, each step rounded.
      const at::Tensor dequantized = (xq.to(at::kFloat) * s).view({M, K});
      const at::Tensor widened =
          (levels.to(at::kFloat).view({N, groups, group}) * scales_f.unsqueeze(-1) +
           zeros_f.unsqueeze(-1))
              .view({N, K});
      expect_integer_rows(linear_w4a8(x, packed, scales, zeros, group), want, dequantized, widened);
    }
  }
}

TEST(WeightOnlyKernels, W4A8NonFiniteActivationsGiveNaNRowsAndRefusesByName) {
  at::manual_seed(2);
  const int64_t N = 5, K = 128;
  const at::Tensor packed = pack_int4(at::randint(0, 16, {N, K}).to(at::kInt));
  const at::Tensor scales = (at::rand({N, 4}) * 0.01).to(at::kHalf);
  const at::Tensor zeros = (at::randn({N, 4}) * 0.05).to(at::kHalf);
  at::Tensor x = at::randn({3, K});
  x[1][70] = std::numeric_limits<float>::infinity();
  for (const bool plain : {false, true}) {
    use_plain_loops(plain);
    const at::Tensor y = linear_w4a8(x, packed, scales, zeros, 32);
    EXPECT_TRUE(y[1].isnan().all().item<bool>());
    EXPECT_FALSE(y[0].isnan().any().item<bool>() || y[2].isnan().any().item<bool>());
  }
  use_plain_loops(false);
  EXPECT_THAT(testing::error_of([&] {
                linear_w4a8(at::zeros({1, 64}), packed, scales, zeros, 32);
              }),
              HasSubstr("gengraph::linear_w4a8: activations have 64 channels, the weight 128"));
  const at::Tensor wide = pack_int4(at::zeros({2, 512}, at::kInt));
  EXPECT_THAT(testing::error_of([&] {
                linear_w4a8(at::zeros({1, 512}), wide, at::ones({2, 1}, at::kHalf),
                            at::ones({2, 1}, at::kHalf), 512);
              }),
              HasSubstr("group 512 is over 256"));
}

TEST(WeightOnlyKernels, RefuseWrongInputsByName) {
  const at::Tensor q = at::zeros({4, 16}, at::kChar), s = at::ones({4});
  EXPECT_THAT(testing::error_of([&] {
                linear_int8(at::zeros({1, 8}), q, s);
              }),
              HasSubstr("activations have 8 channels, the weight 16"));
  EXPECT_THAT(testing::error_of([&] {
                linear_int8(at::zeros({1, 16}, at::kDouble), q, s);
              }),
              HasSubstr("contiguous 2-D float32"));
  EXPECT_THAT(testing::error_of([&] {
                linear_int8(at::zeros({1, 16}), q, at::ones({3}));
              }),
              HasSubstr("one float32 scale per output channel"));
  const at::Tensor p = at::zeros({4, 32}, at::kByte);
  EXPECT_THAT(testing::error_of([&] {
                linear_int4(at::zeros({1, 64}), p, at::ones({4, 2}, at::kHalf),
                            at::ones({4, 2}, at::kHalf), 48);
              }),
              HasSubstr("group 48 must be a multiple of 32"));
  EXPECT_THAT(testing::error_of([&] {
                linear_int4(at::zeros({1, 64}), p, at::ones({4, 3}, at::kHalf),
                            at::ones({4, 2}, at::kHalf), 32);
              }),
              HasSubstr("scales and zeros must be float16 [4, 2]"));
  // float32 scales (the format before float16) are refused, not read as halves.
  EXPECT_THAT(
      testing::error_of([&] {
        linear_w4a8(at::zeros({1, 64}), p, at::ones({4, 2}), at::ones({4, 2}), 32);
      }),
      HasSubstr("gengraph::linear_w4a8: scales and zeros must be float16 [4, 2], got [4, 2] "
                "Float"));
}

}  // namespace
}  // namespace gengraph::kernels

// gengraph's rotary and SwiGLU kernels against the op-by-op forms they replace: the rotary kernel's
// values equal rotate_fused's bit for bit (same products, same sums), with the heads split and,
// in the cache form, k and v written at the slots; silu_mul equals at::silu(g) * u bit for bit
// over whole vectors where LibTorch runs its AVX2 kernels and this CPU runs gengraph's AVX2 form,
// and within a float32 rounding elsewhere. RMSNorm in one pass against transformers' formula.
#include <ATen/ATen.h>
#include <ATen/Version.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "framework/kernels/layer_ops.h"
#include "framework/kernels/rms_norm.h"
#include "framework/model/architectures/layer_functions.h"
#include "framework/quant/kernels.h"
#include "tests/support/test_util.h"

namespace gengraph::kernels {
namespace {

using ::testing::HasSubstr;

struct Case {
  int64_t rows, t, heads, kv, hd;
  RotaryLayout layout;
};

// Tables as the models make them: cos and signed sin [rows, T, hd] of real angles.
std::pair<at::Tensor, at::Tensor> tables(const Case& c) {
  const at::Tensor angles = at::rand({c.rows, c.t, c.hd}) * 50;
  at::Tensor sign = at::ones({c.hd});
  if (c.layout == RotaryLayout::kHalves) {
    sign.slice(0, 0, c.hd / 2).fill_(-1.0);
  } else {
    sign.slice(0, 0, c.hd, 2).fill_(-1.0);
  }
  return {angles.cos(), angles.sin() * sign};
}

// rotate_fused and the splits, op by op, as the fused models computed them before these kernels.
std::tuple<at::Tensor, at::Tensor, at::Tensor> reference(const at::Tensor& y, const at::Tensor& cos,
                                                         const at::Tensor& sin, const Case& c) {
  const at::Tensor qk = rotate_fused(
      y.narrow(-1, 0, (c.heads + c.kv) * c.hd).view({c.rows, c.t, c.heads + c.kv, c.hd}),
      cos.unsqueeze(2), sin.unsqueeze(2),
      c.layout == RotaryLayout::kHalves ? RotaryPairs::kHalves : RotaryPairs::kNeighbours);
  return {qk.narrow(2, 0, c.heads).transpose(1, 2), qk.narrow(2, c.heads, c.kv).transpose(1, 2),
          y.narrow(-1, (c.heads + c.kv) * c.hd, c.kv * c.hd)
              .view({c.rows, c.t, c.kv, c.hd})
              .transpose(1, 2)};
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {1, 1, 9, 3, 64, RotaryLayout::kHalves},      // SmolLM2's decode step
      {2, 5, 4, 2, 8, RotaryLayout::kHalves},       // a prefill with grouped-query heads
      {3, 2, 4, 4, 16, RotaryLayout::kNeighbours},  // GPT-J's pairs
      {2, 40, 6, 1, 2, RotaryLayout::kNeighbours},  // many positions, the smallest head
  };
  return all;
}

TEST(LayerOpsKernels, RotaryEqualsTheOpByOpFormBitForBit) {
  at::manual_seed(3);
  for (const Case& c : cases()) {
    SCOPED_TRACE("rows " + std::to_string(c.rows) + " T " + std::to_string(c.t) + " hd " +
                 std::to_string(c.hd));
    const auto [cos, sin] = tables(c);
    // y as a view with extra columns after v (GPT-J's fc_in shares the projection)
    const at::Tensor wide = at::randn({c.rows, c.t, (c.heads + 2 * c.kv) * c.hd + 7});
    const at::Tensor y = wide.narrow(-1, 0, (c.heads + 2 * c.kv) * c.hd);
    ASSERT_TRUE(rotary_qkv_applies(y, cos, c.heads, c.kv));
    const auto [q, k, v] = rotary_qkv(y, cos, sin, c.heads, c.kv, c.layout);
    const auto [rq, rk, rv] = reference(y, cos, sin, c);
    EXPECT_TRUE(q.is_contiguous() && k.is_contiguous() && v.is_contiguous());
    EXPECT_TRUE(at::equal(q, rq));
    EXPECT_TRUE(at::equal(k, rk));
    EXPECT_TRUE(at::equal(v, rv));
  }
}

TEST(LayerOpsKernels, RotaryIntoWritesKeysAndValuesAtTheSlotsOnly) {
  at::manual_seed(4);
  const Case c{2, 3, 4, 2, 8, RotaryLayout::kHalves};
  const auto [cos, sin] = tables(c);
  const at::Tensor y = at::randn({c.rows, c.t, (c.heads + 2 * c.kv) * c.hd});
  // A static cache's stacked buffers [layers, rows, kv, L, hd]; layer 1 written through a view.
  const at::Tensor keys = at::full({2, c.rows, c.kv, 10, c.hd}, 7.0);
  const at::Tensor values = at::full({2, c.rows, c.kv, 10, c.hd}, 7.0);
  const at::Tensor slots = at::tensor({5, 2, 9}, at::kLong);
  const at::Tensor q = rotary_qkv_into(y, cos, sin, c.heads, c.kv, c.layout, keys.select(0, 1),
                                       values.select(0, 1), slots);
  const auto [rq, rk, rv] = reference(y, cos, sin, c);
  EXPECT_TRUE(at::equal(q, rq));
  EXPECT_TRUE(at::equal(keys.select(0, 1).index_select(2, slots), rk));
  EXPECT_TRUE(at::equal(values.select(0, 1).index_select(2, slots), rv));
  // Everything else untouched: the other layer, and the slots not written.
  EXPECT_TRUE(keys.select(0, 0).eq(7.0).all().item<bool>());
  EXPECT_TRUE(values.select(0, 0).eq(7.0).all().item<bool>());
  const at::Tensor others = at::tensor({0, 1, 3, 4, 6, 7, 8}, at::kLong);
  EXPECT_TRUE(keys.select(0, 1).index_select(2, others).eq(7.0).all().item<bool>());
  EXPECT_TRUE(values.select(0, 1).index_select(2, others).eq(7.0).all().item<bool>());
}

TEST(LayerOpsKernels, RotaryRefusesBadInputsNamingTheOperator) {
  const Case c{1, 2, 2, 1, 4, RotaryLayout::kHalves};
  const auto [cos, sin] = tables(c);
  const at::Tensor y = at::randn({1, 2, 16});
  const at::Tensor keys = at::zeros({1, 1, 4, 4}), values = at::zeros({1, 1, 4, 4});
  EXPECT_THAT(
      testing::error_of([&] {
        rotary_qkv_into(y, cos, sin, 2, 1, c.layout, keys, values, at::tensor({1, 4}, at::kLong));
      }),
      HasSubstr("gengraph::rotary_qkv_into: slot 4 outside the cache's 4 positions"));
  EXPECT_THAT(testing::error_of([&] {
                rotary_qkv_into(y, cos, sin, 2, 1, c.layout, keys, values,
                                at::tensor({1}, at::kLong));
              }),
              HasSubstr("slots [2] int64"));
  EXPECT_THAT(
      testing::error_of([&] { rotary_qkv(y, cos, sin, 3, 1, c.layout); }),
      HasSubstr("gengraph::rotary_qkv: float32 CPU y [rows, T, (heads + 2 kv_heads) * hd]"));
  EXPECT_FALSE(rotary_qkv_applies(y.to(at::kDouble), cos, 2, 1));
  EXPECT_FALSE(rotary_qkv_applies(y, cos, 3, 1));
}

// LibTorch's own CPU kernels run at this capability (DEFAULT, AVX2 or AVX512).
bool torch_runs_avx2() { return at::get_cpu_capability() == "AVX2"; }

TEST(LayerOpsKernels, SiluMulMatchesSiluTimesUp) {
  at::manual_seed(5);
  for (const bool plain : {false, true}) {
    use_plain_loops(plain);
    SCOPED_TRACE(silu_mul_vectorized() ? "AVX2" : "plain loop");
    // 1536: SmolLM2's width (whole vectors); 13: a tail only; 37: vectors and a tail. A view with
    // padding between rows, as a wider projection's output would be.
    for (const int64_t inner : {1536, 13, 37}) {
      const at::Tensor wide = at::randn({3, 2, 2 * inner + 5}) * 4;
      const at::Tensor gu = wide.narrow(-1, 0, 2 * inner);
      ASSERT_TRUE(silu_mul_applies(gu));
      const at::Tensor got = silu_mul(gu);
      const at::Tensor want = at::silu(gu.narrow(-1, 0, inner)) * gu.narrow(-1, inner, inner);
      ASSERT_EQ(got.sizes(), want.sizes());
      EXPECT_TRUE(at::allclose(got, want, 1e-6, 1e-7)) << "inner " << inner;
      // Bit for bit over whole vectors (a width of a multiple of 8, as every real model's); a
      // row's tail may round differently from LibTorch's (measured: width 13 differs).
      if (silu_mul_vectorized() && torch_runs_avx2() && inner % 8 == 0) {
        EXPECT_TRUE(at::equal(got, want)) << "inner " << inner << ": not bit for bit";
      }
    }
  }
  use_plain_loops(false);
  EXPECT_FALSE(silu_mul_applies(at::zeros({2, 3})));  // odd width: no gate/up halves
  EXPECT_FALSE(silu_mul_applies(at::zeros({2, 4}, at::kDouble)));
  EXPECT_THAT(testing::error_of([] {
                silu_mul(at::zeros({2, 3}));
              }),
              HasSubstr("gengraph::silu_mul: float32 CPU [..., 2 * inner]"));
}

// The decode step's attention kernel against LibTorch's scaled_dot_product_attention: grouped
// heads, cache views (narrowed from longer buffers), a boolean mask, an additive one (with -inf), a
// mask shared by every row, none; head sizes with and without a tail past the vector width; the
// AVX2 and the plain path. Then attend() takes it for a decode step and leaves a prefill to SDPA.
TEST(LayerOpsKernels, DecodeAttentionMatchesScaledDotProductAttention) {
  struct Restore {
    ~Restore() { use_plain_loops(false); }
  } restore;
  at::manual_seed(9);
  for (const int64_t hd : {64, 20, 72, 136}) {
    for (const int64_t L : {1, 7, 33}) {
      const int64_t rows = 3, heads = 4, kv_heads = 2;
      const at::Tensor q = at::randn({rows, 1, heads, hd}).transpose(1, 2);  // as the models' view
      const at::Tensor kbuf = at::randn({rows, kv_heads, L + 5, hd});
      const at::Tensor vbuf = at::randn({rows, kv_heads, L + 5, hd});
      const at::Tensor k = kbuf.narrow(2, 0, L), v = vbuf.narrow(2, 0, L);
      at::Tensor allowed = at::rand({rows, 1, 1, L}).gt(0.3);
      allowed.select(3, L - 1).fill_(true);  // every row reads at least itself
      const at::Tensor additive =
          at::zeros({rows, 1, 1, L}).masked_fill_(allowed.logical_not(), -INFINITY);
      const at::Tensor shared = allowed.narrow(0, 0, 1);
      for (const int path : {0, 1}) {
        use_plain_loops(path == 1);
        for (const auto& [what, mask] : std::vector<std::pair<std::string, at::Tensor>>{
                 {"bool", allowed}, {"additive", additive}, {"shared", shared}, {"none", {}}}) {
          SCOPED_TRACE(what + " hd " + std::to_string(hd) + " L " + std::to_string(L) +
                       (path == 0 ? " vectorized" : " plain"));
          ASSERT_TRUE(decode_attention_applies(q, k, v, mask));
          const at::Tensor got = decode_attention(q, k, v, mask, 0.125);
          const at::Tensor want =
              at::scaled_dot_product_attention(
                  q, k, v, mask.defined() ? std::optional<at::Tensor>(mask) : std::nullopt, 0.0,
                  false, 0.125, true)
                  .transpose(1, 2)
                  .reshape({rows, 1, heads * hd});
          EXPECT_TRUE(at::allclose(got, want, 1e-5, 1e-6)) << (got - want).abs().max();
        }
      }
    }
  }
  use_plain_loops(false);
  // attend(): a decode step through the kernel (the same values), a prefill through SDPA.
  const at::Tensor q1 = at::randn({2, 4, 1, 16}), k1 = at::randn({2, 4, 9, 16}),
                   v1 = at::randn({2, 4, 9, 16});
  const at::Tensor m1 = at::ones({2, 1, 1, 9}, at::kBool);
  EXPECT_TRUE(at::equal(attend(q1, k1, v1, m1, 0.25), decode_attention(q1, k1, v1, m1, 0.25)));
  const at::Tensor q3 = at::randn({2, 4, 3, 16});
  EXPECT_FALSE(decode_attention_applies(q3, k1, v1, at::ones({2, 1, 3, 9}, at::kBool)));
  EXPECT_FALSE(decode_attention_applies(q1.to(at::kDouble), k1, v1, m1));
  EXPECT_FALSE(decode_attention_applies(q1, k1.narrow(1, 0, 3), v1.narrow(1, 0, 3), m1));
}

// argmax_rows gives at::argmax's index on both paths: the first of tied maxima (across a vector's
// lanes, across vectors and in the tail), the first NaN where a row has any, +0 and -0 as equals.
TEST(LayerOpsKernels, ArgmaxRowsIsTheFirstMaximumAsAtArgmax) {
  struct Restore {
    ~Restore() { use_plain_loops(false); }
  } restore;
  at::manual_seed(4);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  for (const int64_t n : {1, 7, 8, 9, 37, 50257}) {
    std::vector<at::Tensor> rows;
    const at::Tensor base = at::randn({n});
    rows.push_back(base);
    for (const auto& places : std::vector<std::vector<int64_t>>{
             {n - 1}, {0, n - 1}, {n / 2, n / 3, n - 1}, {std::min<int64_t>(n - 1, 8), n - 1}}) {
      at::Tensor r = base.clone();
      for (const int64_t i : places) r[i] = 9.0f;  // tied maxima
      rows.push_back(r);
      at::Tensor withnan = r.clone();
      for (const int64_t i : places) withnan[i] = nan;
      rows.push_back(withnan);
    }
    rows.push_back(at::full({n}, -inf));
    at::Tensor zeros = at::zeros({n});
    zeros[0] = -0.0f;
    rows.push_back(zeros);
    at::Tensor big = base.clone();
    big[n - 1] = inf;
    rows.push_back(big);
    const at::Tensor x = at::stack(rows);
    for (const int path : {0, 1}) {
      use_plain_loops(path == 1);
      SCOPED_TRACE("n " + std::to_string(n) + (path == 0 ? " vectorized" : " plain"));
      const at::Tensor got = argmax_rows(x);
      ASSERT_EQ(got.scalar_type(), at::kLong);
      EXPECT_TRUE(at::equal(got, x.argmax(-1))) << got << x.argmax(-1);
    }
  }
  use_plain_loops(false);
  // Other layouts and types go to at::argmax.
  const at::Tensor t = at::randn({5, 9}).t();
  EXPECT_TRUE(at::equal(argmax_rows(t), t.argmax(-1)));
  const at::Tensor d = at::randn({3, 11}, at::kDouble);
  EXPECT_TRUE(at::equal(argmax_rows(d), d.argmax(-1)));
}

// RMSNorm in one pass against transformers' formula op by op: equal but for the last bit of the
// sum of squares' rounding, on row counts that take one thread and several.
TEST(RmsNormKernel, MatchesTheOpByOpFormula) {
  at::manual_seed(4);
  for (const int64_t rows : {1, 3, 200}) {
    for (const int64_t d : {1, 7, 64, 576}) {
      const at::Tensor x = at::randn({rows, 2, d}) * 3.0;
      const at::Tensor w = at::randn({d});
      const at::Tensor want = w * (x * at::rsqrt(x.pow(2).mean(-1, true) + 1e-5));
      const at::Tensor got = rms_norm(x, w, 1e-5);
      ASSERT_EQ(got.sizes(), x.sizes());
      EXPECT_TRUE(at::allclose(got, want, 1e-6, 1e-6))
          << rows << " x " << d << ": " << (got - want).abs().max().item<float>();
    }
  }
  // A non-contiguous input is read as its values.
  const at::Tensor x = at::randn({8, 16}).t();
  const at::Tensor w = at::randn({8});
  EXPECT_TRUE(at::allclose(rms_norm(x, w, 1e-6),
                           w * (x * at::rsqrt(x.pow(2).mean(-1, true) + 1e-6)), 1e-6, 1e-6));
}

TEST(RmsNormKernel, TakesFloat32CpuOnly) {
  EXPECT_TRUE(rms_norm_applies(at::zeros({2, 4}), at::ones({4})));
  EXPECT_FALSE(rms_norm_applies(at::zeros({2, 4}, at::kBFloat16), at::ones({4})));
  EXPECT_FALSE(rms_norm_applies(at::zeros({2, 4}), at::ones({5})));
  EXPECT_THAT(testing::error_of([] {
                rms_norm(at::zeros({2, 4}), at::ones({5}), 1e-6);
              }),
              HasSubstr("gengraph::rms_norm: float32 CPU activations"));
}

}  // namespace
}  // namespace gengraph::kernels

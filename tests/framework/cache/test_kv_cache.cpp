#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "framework/cache/kv_cache.h"
#include "framework/model/loader.h"

namespace gengraph {
namespace {

TEST(AttentionMask, CausalOverValidSlotsAndAlwaysSelf) {
  // Row 0: slot 0 is padding. Queries at slots 1 and 2.
  const auto valid = at::tensor({0, 1, 1, 0}).to(at::kBool).reshape({1, 4});
  const auto slots = at::tensor({1, 2}, at::kLong);
  const auto m = attention_mask(valid, slots);
  ASSERT_EQ(m.sizes(), (at::IntArrayRef{1, 1, 2, 4}));
  const auto expected = at::tensor({0, 1, 0, 0, 0, 1, 1, 0}).to(at::kBool).reshape({1, 1, 2, 4});
  EXPECT_TRUE(at::equal(m, expected));
  // A pure-padding query still reads itself, so attention stays finite.
  const auto pad_only = attention_mask(at::zeros({1, 3}, at::kBool), at::tensor({0}, at::kLong));
  EXPECT_TRUE(pad_only[0][0][0][0].item<bool>());
}

TEST(StaticCache, ReorderMovesRowsInPlace) {
  StaticCache c(CacheShape{1, 3, 1, 4, 2}, at::TensorOptions().dtype(at::kFloat));
  const auto k = at::arange(3, at::kFloat).reshape({3, 1, 1, 1}).expand({3, 1, 1, 2}).contiguous();
  c.write_validity(at::tensor({0}, at::kLong), at::ones({3, 1}, at::kBool));
  c.update(0, k, k, at::tensor({0}, at::kLong));
  const void* before = c.keys()[0].data_ptr();
  c.reorder(at::tensor({2, 2, 0}, at::kLong));
  EXPECT_EQ(c.keys()[0].data_ptr(), before);
  EXPECT_FLOAT_EQ(c.keys()[0][0][0][0][0].item<float>(), 2.0f);
  EXPECT_FLOAT_EQ(c.keys()[0][1][0][0][0].item<float>(), 2.0f);
  EXPECT_FLOAT_EQ(c.keys()[0][2][0][0][0].item<float>(), 0.0f);
}

// The two cache kinds must give the same logits step after step on a ragged batch.
TEST(CacheKinds, StaticAndGrowingAgreeOverManySteps) {
  ModelSource s;
  s.preset = "gpt2-tiny";
  s.seed = 1;
  const auto m = load_model(s).model;
  const int64_t rows = 2, t = 4, steps = 6, max_len = t + steps;
  const auto ids = at::tensor({0, 0, 5, 6, 7, 8, 9, 10}, at::kLong).reshape({rows, t});
  const auto valid = at::tensor({0, 0, 1, 1, 1, 1, 1, 1}).to(at::kBool).reshape({rows, t});
  const auto pos = valid.to(at::kLong).cumsum(1).sub(1).clamp_min(0);
  GrowingCache g(m->config().num_layers);
  StaticCache st(m->cache_shape(rows, max_len), at::TensorOptions().dtype(at::kFloat));
  const auto slots = at::arange(t, at::kLong);
  at::Tensor lg = run_forward_step(*m, g, ids, pos, slots, valid);
  at::Tensor ls = run_forward_step(*m, st, ids, pos, slots, valid);
  EXPECT_TRUE(at::allclose(lg, ls, 1e-5, 1e-5));
  at::Tensor last = pos.select(1, t - 1).unsqueeze(1);
  for (int64_t i = 0; i < steps; ++i) {
    const auto next = lg.argmax(-1).unsqueeze(1);
    last = last + 1;
    const auto slot = at::tensor({t + i}, at::kLong);
    lg = run_forward_step(*m, g, next, last, slot, at::ones({rows, 1}, at::kBool));
    ls = run_forward_step(*m, st, next, last, slot, at::ones({rows, 1}, at::kBool));
    EXPECT_TRUE(at::allclose(lg, ls, 1e-5, 1e-5)) << "step " << i;
  }
}

}  // namespace
}  // namespace gengraph

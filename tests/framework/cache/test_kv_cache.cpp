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

// Both reorder modes over the written slots only: the same rows afterwards, the bytes each moved
// counted (a swap reads and writes each byte once; in place goes through a temporary, twice).
TEST(StaticCache, ReorderModesAgreeAndCountTheBytesTheyMove) {
  const CacheShape shape{2, 3, 1, 8, 2};  // 2 layers, 3 rows, 8 slots of 2 floats
  StaticCache swap(shape, at::TensorOptions().dtype(at::kFloat), Reorder::kSwap);
  StaticCache in_place(shape, at::TensorOptions().dtype(at::kFloat), Reorder::kInPlace);
  EXPECT_EQ(swap.reorder_bytes_per_step(), 0.0);
  for (StaticCache* c : {&swap, &in_place}) {
    for (int64_t slot = 0; slot < 3; ++slot) {  // 3 written slots, values row * 10 + slot
      const auto s = at::tensor({slot}, at::kLong);
      const auto k =
          (at::arange(3, at::kFloat) * 10 + slot).reshape({3, 1, 1, 1}).expand({3, 1, 1, 2});
      c->write_validity(s, at::ones({3, 1}, at::kBool));
      for (int64_t l = 0; l < 2; ++l) c->update(l, k, -k, s);
    }
  }
  const void* swap_before = swap.keys().data_ptr();
  const void* in_place_before = in_place.keys().data_ptr();
  for (StaticCache* c : {&swap, &in_place}) c->reorder(at::tensor({2, 0, 0}, at::kLong), 3);
  EXPECT_NE(swap.keys().data_ptr(), swap_before);  // swapped to the second buffer
  EXPECT_EQ(in_place.keys().data_ptr(), in_place_before);
  for (const StaticCache* c : {&swap, &in_place}) {
    const auto k = c->keys().narrow(3, 0, 3), v = c->values().narrow(3, 0, 3);
    EXPECT_FLOAT_EQ(k[1][0][0][2][0].item<float>(), 22.0f);  // layer 1, row 0 <- row 2, slot 2
    EXPECT_FLOAT_EQ(k[0][1][0][1][1].item<float>(), 1.0f);   // row 1 <- row 0, slot 1
    EXPECT_FLOAT_EQ(v[0][2][0][0][0].item<float>(), -0.0f);
    EXPECT_TRUE(c->validity().narrow(1, 0, 3).all().item<bool>());
  }
  EXPECT_TRUE(at::equal(swap.keys().narrow(3, 0, 3), in_place.keys().narrow(3, 0, 3)));
  EXPECT_TRUE(at::equal(swap.values().narrow(3, 0, 3), in_place.values().narrow(3, 0, 3)));
  // Written slots only: keys + values of 2 layers x 3 rows x 3 slots x 2 floats = 288 bytes.
  const double kv = 2 * 2 * 3 * 3 * 2 * 4, valid = 3 * 8;
  EXPECT_EQ(swap.reorder_bytes_per_step(), 2 * kv + 4 * valid);
  EXPECT_EQ(in_place.reorder_bytes_per_step(), 4 * kv + 4 * valid);
  // A reorder that cannot know the length moves every slot.
  in_place.reorder(at::tensor({0, 1, 2}, at::kLong));
  EXPECT_EQ(in_place.reorder_bytes_per_step(),
            ((4 * kv + 4 * valid) + (4 * kv * 8 / 3 + 4 * valid)) / 2);
  in_place.reset();
  EXPECT_EQ(in_place.reorder_bytes_per_step(), 0.0);
  // Buffers that require grad (a Python trace's step, run with autograd on, leaves its cache
  // so): the reorder is no part of any graph and still runs.
  const auto grad_keys = at::arange(3, at::kFloat).reshape({1, 3, 1, 1, 1}).repeat({1, 1, 1, 2, 2});
  StaticCache wrapped(grad_keys.clone().requires_grad_(), grad_keys.clone().requires_grad_(),
                      at::ones({3, 2}, at::kBool));
  wrapped.reorder(at::tensor({2, 2, 0}, at::kLong), 2);
  EXPECT_FLOAT_EQ(wrapped.keys()[0][0][0][1][0].item<float>(), 2.0f);
  EXPECT_FLOAT_EQ(wrapped.values()[0][2][0][0][1].item<float>(), 0.0f);
}

// The two cache kinds must give the same logits step after step on a ragged batch, to the bit, in
// decode steps: a static cache's masked positions past the step add nothing (decode_attention sums
// the exponentials in lanes whatever the length), so trace, cuda_graph and aoti (static caches)
// decode as eager's growing cache does even where int8 activations turn a last-bit difference into
// a level step. The prompt goes in one token per step here, so that every step is a decode step.
// A prefill (several tokens per step) runs LibTorch's SDPA over the cache's length, max_len slots
// against the prompt's: on a host whose SDPA kernel sums the masked keys in vector lanes (AVX2
// without AVX-512, seen 2026-12-07: 8.9e-8 apart) it differs in the last bits, so it is compared
// within float32 rounding.
TEST(CacheKinds, StaticAndGrowingAgreeOverManySteps) {
  ModelSource s;
  s.preset = "gpt2-tiny";
  s.seed = 1;
  const auto m = load_model(s).model;
  const int64_t rows = 2, t = 4, steps = 6, max_len = t + steps;
  const auto ids = at::tensor({0, 0, 5, 6, 7, 8, 9, 10}, at::kLong).reshape({rows, t});
  const auto valid = at::tensor({0, 0, 1, 1, 1, 1, 1, 1}).to(at::kBool).reshape({rows, t});
  const auto pos = valid.to(at::kLong).cumsum(1).sub(1).clamp_min(0);
  const auto options = at::TensorOptions().dtype(at::kFloat);
  {
    GrowingCache g(m->config().num_layers);
    StaticCache st(m->cache_shape(rows, max_len), options);
    const auto slots = at::arange(t, at::kLong);
    const at::Tensor lg = run_forward_step(*m, g, ids, pos, slots, valid);
    const at::Tensor ls = run_forward_step(*m, st, ids, pos, slots, valid);
    EXPECT_TRUE(at::allclose(lg, ls, 1e-5, 1e-6)) << (lg - ls).abs().max().item<float>();
  }
  GrowingCache g(m->config().num_layers);
  StaticCache st(m->cache_shape(rows, max_len), options);
  at::Tensor lg, ls;
  for (int64_t i = 0; i < t; ++i) {  // the prompt, a token per step
    const auto one = [&](const at::Tensor& x) { return x.narrow(1, i, 1); };
    const auto slot = at::tensor({i}, at::kLong);
    lg = run_forward_step(*m, g, one(ids), one(pos), slot, one(valid));
    ls = run_forward_step(*m, st, one(ids), one(pos), slot, one(valid));
    EXPECT_TRUE(at::equal(lg, ls))
        << "prompt token " << i << ": " << (lg - ls).abs().max().item<float>();
  }
  at::Tensor last = pos.select(1, t - 1).unsqueeze(1);
  for (int64_t i = 0; i < steps; ++i) {
    const auto next = lg.argmax(-1).unsqueeze(1);
    last = last + 1;
    const auto slot = at::tensor({t + i}, at::kLong);
    lg = run_forward_step(*m, g, next, last, slot, at::ones({rows, 1}, at::kBool));
    ls = run_forward_step(*m, st, next, last, slot, at::ones({rows, 1}, at::kBool));
    EXPECT_TRUE(at::equal(lg, ls)) << "step " << i << ": " << (lg - ls).abs().max().item<float>();
  }
}

}  // namespace
}  // namespace gengraph

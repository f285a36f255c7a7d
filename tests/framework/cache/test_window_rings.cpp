// Sliding-window layers held in rings (WindowRings, WindowLayout): attention over a ring with its
// mask equals attention over the whole cache narrowed to the window, step after step (prompts
// longer and shorter than the window, left padding, a beam reorder, a speculative rewind); the
// bytes held; a rewind the ring cannot serve is refused by name. End-to-end equality with
// transformers is in the parity and conformance suites (their ring variants).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "backends/register_builtin.h"
#include "framework/backend/backend_registry.h"
#include "framework/cache/kv_cache.h"
#include "framework/model/architectures/layer_functions.h"
#include "framework/model/causal_lm.h"
#include "framework/model/loader.h"
#include "framework/model/memory.h"
#include "framework/util/error.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

constexpr int64_t kRows = 3, kHeads = 2, kDim = 4, kMaxLen = 40;

// Layer 0 windowed, layer 1 not.
CacheShape shape_with(int64_t window, int64_t spare) {
  CacheShape s{2, kRows, kHeads, kMaxLen, kDim};
  if (window > 0) s.windows = WindowLayout{window, spare, {true, false}};
  return s;
}

// One step on both caches: the same keys, values and queries; the windowed layer's attention
// through the ring and through the whole cache with the window's mask must agree.
struct Pair {
  StaticCache ring, full;
  int64_t window;
  Pair(int64_t window, int64_t spare)
      : ring(shape_with(window, spare), at::TensorOptions().dtype(at::kDouble)),
        full(shape_with(0, 0), at::TensorOptions().dtype(at::kDouble)),
        window(window) {}

  void step(const at::Tensor& slots, const at::Tensor& token_valid, const std::string& what) {
    const int64_t t = slots.size(0);
    for (StaticCache* c : {&ring, &full}) c->write_validity(slots, token_valid);
    const at::Tensor full_mask =
        sliding_window_mask(attention_mask(full.validity(), slots), slots, window);
    ASSERT_TRUE(ring.window_mask().defined()) << what;
    ASSERT_FALSE(full.window_mask().defined()) << what;
    for (int64_t layer = 0; layer < 2; ++layer) {
      const at::Tensor k = at::randn({kRows, kHeads, t, kDim}, at::kDouble);
      const at::Tensor v = at::randn({kRows, kHeads, t, kDim}, at::kDouble);
      const at::Tensor q = at::randn({kRows, kHeads, t, kDim}, at::kDouble);
      const auto [rk, rv] = ring.update(layer, k, v, slots);
      const auto [fk, fv] = full.update(layer, k, v, slots);
      const at::Tensor rm =
          layer == 0 ? ring.window_mask() : attention_mask(ring.validity(), slots);
      const at::Tensor fm = layer == 0 ? full_mask : attention_mask(full.validity(), slots);
      const at::Tensor a = at::scaled_dot_product_attention(q, rk, rv, rm);
      const at::Tensor b = at::scaled_dot_product_attention(q, fk, fv, fm);
      ASSERT_TRUE(at::allclose(a, b, 1e-12, 1e-12))
          << what << ", layer " << layer << ": " << (a - b).abs().max().item<double>();
    }
  }
};

at::Tensor arange_slots(int64_t from, int64_t to) { return at::arange(from, to, at::kLong); }
at::Tensor all_valid(int64_t t) { return at::ones({kRows, t}, at::kBool); }

TEST(WindowRings, AttentionEqualsTheWholeCacheNarrowedToTheWindow) {
  at::manual_seed(3);
  for (const int64_t spare : {0, 1, 4}) {
    Pair p(/*window=*/5, spare);
    // A prompt longer than the ring, row 0 left-padded by 3, row 2 by 9 (past the window).
    at::Tensor valid = all_valid(12);
    valid[0].narrow(0, 0, 3).fill_(false);
    valid[2].narrow(0, 0, 9).fill_(false);
    p.step(arange_slots(0, 12), valid, "prompt, spare " + std::to_string(spare));
    int64_t at = 12;
    for (int64_t i = 0; i < 8; ++i, ++at) {
      p.step(arange_slots(at, at + 1), all_valid(1), "decode " + std::to_string(at));
    }
    // A beam reorder: rows continue rows 2, 0, 0.
    const at::Tensor parents = at::tensor({2, 0, 0}, at::kLong);
    p.ring.reorder(parents, at);
    p.full.reorder(parents, at);
    for (int64_t i = 0; i < 3; ++i, ++at) p.step(arange_slots(at, at + 1), all_valid(1), "beam");
    // A verify of spare + 1 tokens, two of them taken back, then decoding on.
    const int64_t t = spare + 1;
    p.step(arange_slots(at, at + t), all_valid(t), "verify");
    const int64_t kept = std::max<int64_t>(1, t - 2);
    p.ring.truncate(at + kept);
    p.full.truncate(at + kept);
    at += kept;
    for (int64_t i = 0; i < 3; ++i, ++at) p.step(arange_slots(at, at + 1), all_valid(1), "after");
  }
}

TEST(WindowRings, PromptsShorterThanTheRingAndChunkedPrompts) {
  at::manual_seed(4);
  Pair p(/*window=*/6, /*spare=*/2);
  p.step(arange_slots(0, 2), all_valid(2), "short prompt (in place)");
  p.step(arange_slots(2, 7), all_valid(5), "a chunk beside the ring");
  p.step(arange_slots(7, 19), all_valid(12), "a chunk longer than the ring");
  for (int64_t at = 19; at < 30; ++at) p.step(arange_slots(at, at + 1), all_valid(1), "decode");
  // Reset: a new batch over the same buffers.
  p.ring.reset();
  p.full.reset();
  p.step(arange_slots(0, 3), all_valid(3), "after reset");
  p.step(arange_slots(3, 4), all_valid(1), "after reset, decode");
}

TEST(WindowRings, SharedPrefillInTheFirstRows) {
  at::manual_seed(5);
  Pair p(/*window=*/4, /*spare=*/1);
  // One input's prompt in row 0, then copied to every row, as a shared prefill does.
  StaticCache first_ring = p.ring.first_rows(1), first_full = p.full.first_rows(1);
  const at::Tensor slots = arange_slots(0, 9), valid = at::ones({1, 9}, at::kBool);
  for (StaticCache* c : {&first_ring, &first_full}) {
    c->write_validity(slots, valid);
    for (int64_t layer = 0; layer < 2; ++layer) {
      const at::Tensor k = at::full({1, kHeads, 9, kDim}, 0.5 + layer, at::kDouble);
      c->update(layer, k, k, slots);
    }
  }
  const at::Tensor logits = at::zeros({1, 7}, at::kDouble);
  p.ring.expand_prefill(logits, kRows, 9, kRows);
  p.full.expand_prefill(logits, kRows, 9, kRows);
  for (int64_t at = 9; at < 15; ++at) p.step(arange_slots(at, at + 1), all_valid(1), "decode");
}

TEST(WindowRings, RefusesARewindItsRingCannotServe) {
  // A step of 4 tokens with no spare overwrites slots the next query reads once two are taken
  // back.
  StaticCache c(shape_with(/*window=*/3, /*spare=*/0), at::TensorOptions().dtype(at::kFloat));
  const at::Tensor k = at::zeros({kRows, kHeads, 6, kDim});
  c.write_validity(arange_slots(0, 6), all_valid(6));
  c.update(0, k, k, arange_slots(0, 6));
  c.write_validity(arange_slots(6, 10), all_valid(4));
  c.update(0, k.narrow(2, 0, 4), k.narrow(2, 0, 4), arange_slots(6, 10));
  try {
    c.truncate(8);
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("rewinding to 8"), std::string::npos) << m;
    EXPECT_NE(m.find("ring_spare"), std::string::npos) << m;
  }
}

TEST(WindowRings, BytesHeldAndTheEstimateAgree) {
  // A Gemma-3-like layout: 6 layers, 5 of them windowed.
  CacheShape s{6, 2, 1, 256, 8};
  s.windows = WindowLayout{16, 4, {true, true, true, true, true, false}};
  const StaticCache ring(s, at::TensorOptions().dtype(at::kFloat));
  const StaticCache full(CacheShape{6, 2, 1, 256, 8}, at::TensorOptions().dtype(at::kFloat));
  const int64_t kv = [&](int64_t slots) { return 2 * 2 * 1 * slots * 8 * 4; }(1);
  EXPECT_EQ(full.bytes(), 6 * 256 * kv + 2 * 256);
  // 1 layer of 256 slots, 5 of 20, the validity of both, and the ring's slot table.
  EXPECT_EQ(ring.bytes(), 256 * kv + 5 * 20 * kv + 2 * 256 + 2 * 20 + 20 * 8);
  ModelConfig c;
  c.num_layers = 6;
  c.num_kv_heads = 1;
  c.head_dim = 8;
  c.sliding_window = 16;
  c.sliding_layers = {true, true, true, true, true, false};
  EXPECT_DOUBLE_EQ(kv_cache_bytes(c, at::kFloat, 2, 256, 4), 256.0 * kv + 5 * 20.0 * kv);
  EXPECT_DOUBLE_EQ(kv_cache_bytes(c, at::kFloat, 2, 256), 6 * 256.0 * kv);
  // A ring no smaller than the cache: none.
  EXPECT_DOUBLE_EQ(kv_cache_bytes(c, at::kFloat, 2, 20, 4), 6 * 20.0 * kv);
}

TEST(WindowRings, TheModelsLayoutAndTheBackendsOptions) {
  const auto model = testing::test_model("gemma3-a", 11);  // window 5, every third layer global
  const WindowLayout w = model->window_layout(/*max_len=*/40, /*ring_spare=*/2);
  EXPECT_EQ(w.window, 5);
  EXPECT_EQ(w.ring(), 7);
  EXPECT_EQ(w.layers, model->config().sliding_layers);
  EXPECT_GT(w.count(), 0);
  EXPECT_EQ(model->window_layout(40, -1).count(), 0);  // rings off
  EXPECT_EQ(model->window_layout(7, 2).count(), 0);    // the whole cache is no longer
  EXPECT_EQ(testing::test_model("llama-a", 11)->window_layout(40, 2).count(), 0);  // no window

  register_builtin_backends();
  auto& registry = BackendRegistry::instance();
  const auto refused = [&](const std::map<std::string, std::string>& options) {
    try {
      registry.create("eager", model, BackendOptions("eager", options));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(refused({{"window_rings", "false"}, {"ring_spare", "3"}}).find("ring_spare"),
            std::string::npos);
  EXPECT_NE(refused({{"cache", "paged"}, {"window_rings", "true"}}).find("cache: paged"),
            std::string::npos);
  EXPECT_NE(refused({{"ring_spare", "-1"}}).find("ring_spare"), std::string::npos);
  // cuda_graph holds rings only with its eager step: another step's graph takes the stacked
  // buffers.
  try {
    registry.create("cuda_graph", model,
                    BackendOptions("cuda_graph",
                                   {{"capture", "false"}, {"step", "trace"}, {"ring_spare", "3"}}));
    ADD_FAILURE() << "cuda_graph with step: trace took ring_spare";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("apply to step: eager, found step: trace"),
              std::string::npos)
        << e.what();
  }

  // The backend reports what its cache holds: rings at 40 slots with a spare of 2.
  auto eager = registry.create("eager", model,
                               BackendOptions("eager", {{"cache", "static"}, {"ring_spare", "2"}}));
  eager->prepare(2, 40);
  const BackendReport r = eager->report();
  EXPECT_EQ(r.at("window_rings"), double(w.count()));
  EXPECT_EQ(r.at("ring_spare"), 2.0);
  EXPECT_EQ(eager->max_verify_candidates(), 2);
  auto off = registry.create(
      "eager", model, BackendOptions("eager", {{"cache", "static"}, {"window_rings", "false"}}));
  off->prepare(2, 40);
  EXPECT_EQ(off->report().at("window_rings"), 0.0);
  EXPECT_LT(r.at("kv_cache_bytes"), off->report().at("kv_cache_bytes"));
}

}  // namespace
}  // namespace gengraph

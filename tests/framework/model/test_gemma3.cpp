// Gemma 3's text model (gemma3_text): config.json read as transformers 5.17's Gemma3TextConfig
// reads it (defaults, layer types, rope per layer type and the older rope keys), what is not
// implemented refused naming the key, the window and the logit soft cap in effect, and the
// presets. Token parity with transformers is in tests/parity (fixture gemma3-a,
// tools/fixture_cases_arch.py); the 270M shape's in docs/results/gemma3_270m_shape_parity.txt.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "backends/register_builtin.h"
#include "framework/backend/backend_registry.h"
#include "framework/decoding/generator.h"
#include "framework/model/architectures/gemma3.h"
#include "framework/model/loader.h"
#include "framework/model/model_registry.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using testing::error_of;
using ::testing::HasSubstr;

const nlohmann::json kGemma = {
    {"model_type", "gemma3_text"}, {"vocab_size", 64},       {"hidden_size", 16},
    {"intermediate_size", 24},     {"num_hidden_layers", 7}, {"num_attention_heads", 2},
    {"num_key_value_heads", 1},    {"head_dim", 8},          {"max_position_embeddings", 64}};

// A merge patch (a null in it removes the key).
nlohmann::json with(nlohmann::json base, const nlohmann::json& patch) {
  base.merge_patch(patch);
  return base;
}

// `key` set to `value`, null included.
nlohmann::json set(nlohmann::json base, const std::string& key, const nlohmann::json& value) {
  base[key] = value;
  return base;
}

ModelConfig parse(const nlohmann::json& doc) {
  register_builtin_architectures();
  return parse_model_config(doc, "config.json");
}

std::string config_error(const nlohmann::json& doc) {
  return error_of([&] { parse(doc); });
}

TEST(Gemma3Config, TransformersDefaults) {
  nlohmann::json doc = kGemma;
  doc.erase("head_dim");
  doc.erase("num_key_value_heads");
  doc["num_attention_heads"] = 4;
  const ModelConfig c = parse(doc);
  EXPECT_EQ(c.head_dim, 256);  // Gemma3TextConfig's, not hidden_size / heads
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.norm_eps, 1e-6);
  EXPECT_EQ(c.activation, "gelu_pytorch_tanh");
  EXPECT_EQ(c.bos_token_id, 2);
  EXPECT_EQ(c.pad_token_id, 0);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{1});
  // sliding_window_pattern 6: every sixth layer is global; the window 4096.
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.sliding_layers, (std::vector<bool>{true, true, true, true, true, false, true}));
  const Gemma3Settings s = gemma3_settings(doc, "config.json");
  EXPECT_EQ(s.global_rope.theta, 1e6);
  EXPECT_EQ(s.local_rope.theta, 1e4);
  EXPECT_EQ(s.global_rope.type, "default");
  EXPECT_EQ(s.query_pre_attn_scalar, 256.0);
  EXPECT_FALSE(s.final_logit_softcapping);
  // layer_types wins over the pattern; no sliding layer means no window.
  const ModelConfig all_global =
      parse(with(kGemma, {{"layer_types", std::vector<std::string>(7, "full_attention")},
                          {"sliding_window_pattern", 2}}));
  EXPECT_EQ(all_global.sliding_window, 0);
  EXPECT_TRUE(all_global.sliding_layers.empty());
  EXPECT_EQ(
      parse(with(kGemma, {{"sliding_window_pattern", 2}, {"sliding_window", 9}})).sliding_layers,
      (std::vector<bool>{true, false, true, false, true, false, true}));
}

TEST(Gemma3Config, RopePerLayerTypeAndTheOlderKeys) {
  auto settings = [](const nlohmann::json& patch) {
    return gemma3_settings(with(kGemma, patch), "config.json");
  };
  const auto old_keys = settings({{"rope_theta", 5e5}, {"rope_local_base_freq", 2e4}});
  EXPECT_EQ(old_keys.global_rope.theta, 5e5);
  EXPECT_EQ(old_keys.local_rope.theta, 2e4);
  // rope_scaling applies to the global layers only.
  const auto scaled = settings({{"rope_scaling", {{"rope_type", "linear"}, {"factor", 8.0}}}});
  EXPECT_EQ(scaled.global_rope.type, "linear");
  EXPECT_EQ(scaled.global_rope.factor, 8.0);
  EXPECT_EQ(scaled.local_rope.type, "default");
  // Merged into the default dict, whose rope_type is already "default", an older "type" key does
  // not change the type: transformers 5.17 runs such a file with unscaled rope.
  EXPECT_EQ(settings({{"rope_scaling", {{"type", "linear"}, {"factor", 8.0}}}}).global_rope.type,
            "default");
  const auto per_type =
      settings({{"rope_theta", 3.0},
                {"rope_parameters",
                 {{"full_attention", {{"type", "linear"}, {"factor", 2.0}}},
                  {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 7.0}}}}}});
  EXPECT_EQ(per_type.global_rope.type, "linear");
  EXPECT_EQ(per_type.global_rope.theta, 3.0);  // the top-level rope_theta fills the dict in
  EXPECT_EQ(per_type.local_rope.theta, 7.0);
  const nlohmann::json null_dict = {{"sliding_attention", nullptr}};
  EXPECT_EQ(gemma3_settings(set(kGemma, "rope_parameters", null_dict), "c").local_rope.theta, 1e4);

  EXPECT_THAT(config_error(with(kGemma, {{"rope_parameters", {{"rope_type", "default"}}}})),
              HasSubstr("config.json: key 'rope_parameters.rope_type': expected only "
                        "full_attention and sliding_attention"));
  EXPECT_THAT(
      config_error(
          with(kGemma, {{"rope_parameters", {{"full_attention", {{"rope_type", "yarn"}}}}}})),
      HasSubstr("key 'rope_parameters.full_attention.rope_type': expected default or linear"));
  EXPECT_THAT(config_error(with(kGemma, {{"rope_scaling", {{"rope_type", "linear"}}}})),
              HasSubstr("key 'rope_parameters.full_attention.factor': expected a positive number"));
  EXPECT_THAT(config_error(with(kGemma, {{"partial_rotary_factor", 0.5}})),
              HasSubstr("key 'partial_rotary_factor': expected 1"));
  EXPECT_THAT(config_error(with(kGemma, {{"rope_parameters", {{"sliding_attention", {}}}},
                                         {"rope_scaling", {{"factor", 2.0}}}})),
              HasSubstr("key 'rope_scaling'"));
}

TEST(Gemma3Config, WhatIsNotImplementedIsRefusedByName) {
  EXPECT_THAT(config_error(with(kGemma, {{"attn_logit_softcapping", 50.0}})),
              HasSubstr("config.json: key 'attn_logit_softcapping': expected null (attention "
                        "logit softcapping is not supported), found 50.0"));
  EXPECT_NO_THROW(parse(set(kGemma, "attn_logit_softcapping", nullptr)));
  EXPECT_THAT(config_error(with(kGemma, {{"use_bidirectional_attention", true}})),
              HasSubstr("key 'use_bidirectional_attention': expected false"));
  EXPECT_THAT(config_error(with(kGemma, {{"layer_types", {"full_attention"}}})),
              HasSubstr("key 'layer_types': expected a list of 7 entries"));
  EXPECT_THAT(config_error(with(kGemma, {{"layer_types", std::vector<std::string>(7, "chunked")}})),
              HasSubstr("key 'layer_types'"));
  EXPECT_THAT(config_error(set(kGemma, "sliding_window", nullptr)),
              HasSubstr("key 'sliding_window': expected a positive integer"));
  EXPECT_THAT(config_error(with(kGemma, {{"hidden_size", 15}})),
              HasSubstr("key 'num_attention_heads': expected a divisor of hidden_size (15)"));
  EXPECT_THAT(config_error(with(kGemma, {{"final_logit_softcapping", -1.0}})),
              HasSubstr("key 'final_logit_softcapping': expected a positive number"));
  EXPECT_THAT(config_error(with(kGemma, {{"hidden_activation", "tanh"}})),
              HasSubstr("unsupported activation 'tanh'"));
}

// Logits at every prefix end of `n` tokens, one prefill per prefix: [n, vocab].
at::Tensor prefix_logits(const nlohmann::json& doc, int64_t n) {
  const ModelConfig mc = parse(doc);
  const auto& arch = ModelRegistry::instance().get(mc.model_type, "test");
  // Norm weights drawn too, so that their (1 + weight) scales matter.
  std::vector<TensorSpec> specs = arch.weight_specs(mc);
  for (auto& s : specs) s.init = Init::kNormal;
  const auto m = arch.build(mc, random_weights(specs, 0.3, 3, LoadOptions{}));
  std::vector<at::Tensor> out;
  for (int64_t t = 1; t <= n; ++t) {
    GrowingCache cache(mc.num_layers);
    const auto ids = (at::arange(t, at::kLong) * 7 + 3).remainder(mc.vocab_size);
    out.push_back(run_forward_step(*m, cache, ids.unsqueeze(0),
                                   at::arange(t, at::kLong).unsqueeze(0), at::arange(t, at::kLong),
                                   at::ones({1, t}, at::kBool)));
  }
  return at::cat(out);
}

TEST(Gemma3Model, TheWindowAndTheSoftCapTakeEffect) {
  const nlohmann::json base =
      with(kGemma, {{"num_hidden_layers", 2}, {"sliding_window_pattern", 2}});
  const auto wide = prefix_logits(with(base, {{"sliding_window", 10}}), 10);
  const auto narrow = prefix_logits(with(base, {{"sliding_window", 4}}), 10);
  EXPECT_TRUE(at::allclose(wide.slice(0, 0, 4), narrow.slice(0, 0, 4), 1e-6, 1e-6));
  EXPECT_FALSE(at::allclose(wide.slice(0, 4), narrow.slice(0, 4), 1e-3, 1e-3));
  const auto capped = prefix_logits(with(base, {{"final_logit_softcapping", 0.5}}), 4);
  EXPECT_LE(capped.abs().max().item<float>(), 0.5f);
  EXPECT_GT(capped.abs().max().item<float>(), 0.1f);
}

int64_t spec_parameters(const std::string& preset) {
  const ModelConfig c = parse(preset_config(preset));
  int64_t n = 0;
  for (const auto& s : ModelRegistry::instance().get(c.model_type, "test").weight_specs(c)) {
    int64_t k = 1;
    for (auto d : s.shape) k *= d;
    n += k;
  }
  return n;
}

TEST(Gemma3Presets, The270mShapeAndTheTinyOne) {
  const ModelConfig c = parse(preset_config("gemma3-270m-shape"));
  EXPECT_EQ(c.model_type, "gemma3_text");
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.num_kv_heads, 1);
  EXPECT_EQ(c.sliding_window, 512);
  std::vector<bool> pattern;
  for (int i = 0; i < 18; ++i) pattern.push_back((i + 1) % 6 != 0);
  EXPECT_EQ(c.sliding_layers, pattern);
  EXPECT_EQ(spec_parameters("gemma3-270m-shape"), 268098176);  // gemma-3-270m's count
  const auto names = preset_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "gemma3-tiny"), names.end());

  register_builtin_backends();
  ModelSource s;
  s.preset = "gemma3-tiny";
  s.seed = 5;
  const auto m = load_model(s).model;
  ASSERT_FALSE(m->config().sliding_layers.empty());
  ResolvedSettings g;
  g.max_new_tokens = 8;
  g.eos_token_id = {};
  const std::vector<int64_t> long_prompt = [] {  // past the window of 16
    std::vector<int64_t> p;
    for (int64_t i = 0; i < 20; ++i) p.push_back(3 + (i * 5) % 50);
    return p;
  }();
  std::vector<std::vector<std::vector<int64_t>>> runs;
  for (const std::string cache : {"growing", "static"}) {
    auto b =
        BackendRegistry::instance().create("eager", m, BackendOptions("eager", {{"cache", cache}}));
    const auto r = Generator(g).generate(*b, {long_prompt, {9}});
    runs.push_back({r.outputs[0][0].tokens, r.outputs[1][0].tokens});
  }
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_EQ(runs[0][0].size(), 8u);
}

}  // namespace
}  // namespace gengraph

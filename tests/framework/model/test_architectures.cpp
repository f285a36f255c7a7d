// GPT-J and the LLaMA family (llama, mistral, qwen2): config.json defects and checkpoint defects
// are refused naming the file, key or tensor; config variants (old rope keys, sliding windows) mean
// what transformers makes of them; the presets parse. Token parity with transformers is in
// tests/parity (fixtures from tools/fixture_cases_arch.py).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "backends/register_builtin.h"
#include "framework/backend/backend_registry.h"
#include "framework/decoding/generator.h"
#include "framework/model/architectures/rope.h"
#include "framework/model/loader.h"
#include "framework/model/model_registry.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using testing::error_of;
using ::testing::HasSubstr;
using testing::TempDir;
using testing::write_file;
using Tensors = std::vector<std::pair<std::string, at::Tensor>>;

const nlohmann::json kLlama = {{"model_type", "llama"},    {"vocab_size", 64},
                               {"hidden_size", 16},        {"intermediate_size", 24},
                               {"num_hidden_layers", 1},   {"num_attention_heads", 4},
                               {"num_key_value_heads", 2}, {"max_position_embeddings", 32}};
const nlohmann::json kGptj = {{"model_type", "gptj"}, {"vocab_size", 64},  {"n_positions", 32},
                              {"n_embd", 16},         {"n_layer", 1},      {"n_head", 2},
                              {"rotary_dim", 4},      {"bos_token_id", 1}, {"eos_token_id", 2}};

nlohmann::json with(nlohmann::json base, const nlohmann::json& patch) {
  base.merge_patch(patch);
  return base;
}

const Architecture& arch_of(const ModelConfig& c) {
  register_builtin_architectures();
  return ModelRegistry::instance().get(c.model_type, "test");
}

// Writes config.json and a checkpoint with the architecture's expected tensors, after `edit`.
void write_model(const std::filesystem::path& dir, const nlohmann::json& config,
                 const std::function<void(Tensors&)>& edit = {}) {
  register_builtin_architectures();
  write_file(dir / "config.json", config.dump());
  const ModelConfig mc = parse_model_config(config, "test");
  const WeightMap w = random_weights(arch_of(mc).weight_specs(mc), 0.1, 0, LoadOptions{});
  Tensors tensors(w.begin(), w.end());
  if (edit) edit(tensors);
  testing::write_safetensors(dir / "model.safetensors", tensors);
}

std::string load_error(const std::filesystem::path& dir) {
  ModelSource s;
  s.path = dir;
  return error_of([&] { load_model(s); });
}

// The message parsing `config` as a config.json file gives.
std::string config_error(const nlohmann::json& config) {
  register_builtin_architectures();
  TempDir dir;
  write_file(dir / "config.json", config.dump());
  const std::string message = error_of([&] { load_model_config(dir / "config.json"); });
  // Every message names the file it came from.
  EXPECT_THAT(message, HasSubstr((dir / "config.json").string() + ": "));
  return message;
}

// A model of `config` with random weights from `seed` (the same weights for the same tensor list).
std::unique_ptr<CausalLM> build(const nlohmann::json& config, uint64_t seed = 0) {
  register_builtin_architectures();
  const ModelConfig mc = parse_model_config(config, "test");
  const auto& arch = arch_of(mc);
  return arch.build(mc, random_weights(arch.weight_specs(mc), 0.3, seed, LoadOptions{}));
}

// Logits at every prefix end of `n` tokens, one prefill per prefix: [n, vocab].
at::Tensor prefix_logits(const CausalLM& m, int64_t n) {
  std::vector<at::Tensor> out;
  for (int64_t t = 1; t <= n; ++t) {
    GrowingCache cache(m.config().num_layers);
    const auto ids = (at::arange(t, at::kLong) * 7 + 3).remainder(m.config().vocab_size);
    out.push_back(run_forward_step(m, cache, ids.unsqueeze(0),
                                   at::arange(t, at::kLong).unsqueeze(0), at::arange(t, at::kLong),
                                   at::ones({1, t}, at::kBool)));
  }
  return at::cat(out);
}

TEST(ArchitectureConfig, MissingRequiredFields) {
  nlohmann::json llama = kLlama;
  llama.erase("hidden_size");
  EXPECT_THAT(config_error(llama),
              HasSubstr("key 'hidden_size': expected a required positive integer (missing)"));
  nlohmann::json gptj = kGptj;
  gptj.erase("n_layer");
  EXPECT_THAT(config_error(gptj),
              HasSubstr("key 'n_layer': expected a required positive integer (missing)"));
  nlohmann::json qwen2 = with(kLlama, {{"model_type", "qwen2"}});
  qwen2.erase("vocab_size");
  EXPECT_THAT(config_error(qwen2), HasSubstr("key 'vocab_size'"));
}

TEST(ArchitectureConfig, InconsistentHeadCounts) {
  EXPECT_THAT(config_error(with(kLlama, {{"num_key_value_heads", 3}})),
              HasSubstr("key 'num_key_value_heads': expected a divisor of num_attention_heads "
                        "(4), found 3"));
  EXPECT_THAT(config_error(with(kLlama, {{"model_type", "mistral"},
                                         {"num_attention_heads", 5},
                                         {"num_key_value_heads", 1}})),
              HasSubstr("key 'num_attention_heads': expected a divisor of hidden_size (16) when "
                        "head_dim is not given, found 5"));
  EXPECT_THAT(config_error(with(kGptj, {{"n_head", 3}})),
              HasSubstr("key 'n_head': expected a divisor of n_embd (16), found 3"));
  EXPECT_THAT(config_error(with(kLlama, {{"head_dim", 5}})), HasSubstr("key 'head_dim'"));
  // An explicit head_dim frees the head size from hidden_size (not for LlamaConfig, which checks
  // hidden_size % num_attention_heads regardless).
  const nlohmann::json six_heads = {
      {"num_attention_heads", 6}, {"num_key_value_heads", 3}, {"head_dim", 6}};
  EXPECT_THAT(config_error(with(kLlama, six_heads)),
              HasSubstr("key 'num_attention_heads': expected a divisor of hidden_size (16), "
                        "found 6"));
  const auto m = build(with(with(kLlama, six_heads), {{"model_type", "qwen2"}}));
  EXPECT_EQ(m->config().head_dim, 6);
  EXPECT_EQ(m->weights().at("model.layers.0.self_attn.q_proj.weight").sizes(),
            at::IntArrayRef({36, 16}));
  EXPECT_EQ(m->weights().at("model.layers.0.self_attn.k_proj.weight").sizes(),
            at::IntArrayRef({18, 16}));
  EXPECT_EQ(prefix_logits(*m, 3).size(0), 3);
}

TEST(ArchitectureConfig, RotaryDimMustFitTheHead) {
  EXPECT_THAT(config_error(with(kGptj, {{"rotary_dim", 16}})),
              HasSubstr("key 'rotary_dim': expected an even number at most the head size "
                        "n_embd / n_head = 8, found 16"));
  EXPECT_THAT(config_error(with(kGptj, {{"rotary_dim", 3}})), HasSubstr("key 'rotary_dim'"));
  nlohmann::json null_rotary = kGptj;
  null_rotary["rotary_dim"] = nullptr;  // (a merge patch would delete the key instead)
  EXPECT_THAT(config_error(null_rotary), HasSubstr("key 'rotary_dim': expected an integer (null"));
}

TEST(ArchitectureConfig, RopeTypesAndTheirKeys) {
  EXPECT_THAT(
      config_error(with(kLlama, {{"rope_parameters", {{"rope_type", "yarn"}, {"factor", 4.0}}}})),
      HasSubstr("key 'rope_parameters.rope_type': expected one of default, linear, llama3 "
                "(the implemented rope types), found \"yarn\""));
  EXPECT_THAT(config_error(with(kLlama, {{"rope_scaling", {{"type", "dynamic"}, {"factor", 2}}}})),
              HasSubstr("key 'rope_scaling.type': expected one of default, linear, llama3"));
  EXPECT_THAT(config_error(with(kLlama, {{"rope_parameters", {{"rope_type", "linear"}}}})),
              HasSubstr("key 'rope_parameters.factor': expected a positive number (required by "
                        "rope_type 'linear'), found nothing"));
  EXPECT_THAT(
      config_error(
          with(kLlama, {{"rope_parameters",
                         {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}}}})),
      HasSubstr("key 'rope_parameters.high_freq_factor'"));
  EXPECT_THAT(config_error(with(kLlama, {{"partial_rotary_factor", 0.5}})),
              HasSubstr("key 'partial_rotary_factor': expected 1 (partial rotary"));
  EXPECT_THAT(config_error(with(kLlama, {{"rope_theta", -1}})), HasSubstr("key 'rope_theta'"));
  EXPECT_THAT(config_error(with(kLlama, {{"rope_parameters", 3}})),
              HasSubstr("key 'rope_parameters': expected an object"));
}

TEST(ArchitectureConfig, OlderRopeKeysMeanTheSame) {
  // transformers 5.17 reads "rope_scaling" (with "type") and a top-level "rope_theta" as it reads
  // "rope_parameters"; a non-empty rope_scaling wins.
  const auto current = build(with(
      kLlama,
      {{"rope_parameters", {{"rope_type", "linear"}, {"factor", 4.0}, {"rope_theta", 100.0}}}}));
  const auto older = build(with(kLlama, {{"rope_scaling", {{"type", "linear"}, {"factor", 4.0}}},
                                         {"rope_theta", 100.0},
                                         {"rope_parameters", {{"rope_type", "default"}}}}));
  const auto unscaled = build(with(kLlama, {{"rope_theta", 100.0}}));
  EXPECT_EQ(older->config().rope.type, "linear");
  EXPECT_EQ(older->config().rope.theta, 100.0);
  const auto a = prefix_logits(*current, 12);
  EXPECT_TRUE(at::equal(a, prefix_logits(*older, 12)));
  EXPECT_FALSE(at::allclose(a, prefix_logits(*unscaled, 12), 1e-3, 1e-3));
}

TEST(ArchitectureConfig, Llama3FrequenciesFollowTheirBands) {
  RopeConfig r;
  r.type = "llama3";
  r.theta = 500000.0;
  r.factor = 8.0;
  r.low_freq_factor = 1.0;
  r.high_freq_factor = 4.0;
  r.original_max_positions = 64;
  const at::Tensor got = rope_inv_freq(r, 16);
  ASSERT_EQ(got.sizes(), at::IntArrayRef({8}));
  int kept = 0, slowed = 0, smoothed = 0;
  for (int64_t i = 0; i < 8; ++i) {
    const double base = 1.0 / std::pow(r.theta, 2.0 * i / 16);
    const double wavelen = 2 * M_PI / base;
    double want = base;
    if (wavelen > 64.0) {
      want = base / r.factor;
      ++slowed;
    } else if (wavelen >= 16.0) {
      const double s = (64.0 / wavelen - 1.0) / 3.0;
      want = (1 - s) * base / r.factor + s * base;
      ++smoothed;
    } else {
      ++kept;
    }
    EXPECT_NEAR(got[i].item<double>(), want, 1e-6 * want) << "frequency " << i;
  }
  EXPECT_TRUE(kept > 0 && slowed > 0 && smoothed > 0);  // the case exercises every band
}

TEST(ArchitectureConfig, SlidingWindows) {
  const nlohmann::json mistral = with(kLlama, {{"model_type", "mistral"}});
  const auto full = prefix_logits(*build(with(mistral, {{"sliding_window", nullptr}})), 10);
  // A window at least as long as the sequence changes nothing; a shorter one does.
  EXPECT_TRUE(at::equal(full, prefix_logits(*build(with(mistral, {{"sliding_window", 10}})), 10)));
  const auto narrow = prefix_logits(*build(with(mistral, {{"sliding_window", 4}})), 10);
  EXPECT_TRUE(at::equal(full.slice(0, 0, 4), narrow.slice(0, 0, 4)));
  EXPECT_FALSE(at::allclose(full.slice(0, 4), narrow.slice(0, 4), 1e-3, 1e-3));
  // MistralConfig's default window is 4096 tokens.
  EXPECT_EQ(parse_model_config(mistral, "test").sliding_window, 4096);
  // Qwen2: only with use_sliding_window, only in the layers from max_window_layers on.
  const nlohmann::json qwen2 = with(kLlama, {{"model_type", "qwen2"},
                                             {"num_hidden_layers", 3},
                                             {"sliding_window", 4},
                                             {"max_window_layers", 1}});
  EXPECT_EQ(parse_model_config(qwen2, "test").sliding_window, 0);
  const ModelConfig on = parse_model_config(with(qwen2, {{"use_sliding_window", true}}), "test");
  EXPECT_EQ(on.sliding_window, 4);
  EXPECT_EQ(on.sliding_layers, (std::vector<bool>{false, true, true}));
  EXPECT_THAT(config_error(with(qwen2, {{"layer_types", {"full_attention"}}})),
              HasSubstr("key 'layer_types': expected a list of 3 entries"));
}

TEST(ArchitectureWeights, ShapesAndNamesAreChecked) {
  TempDir dir;
  write_model(dir.path(), kLlama, [](Tensors& t) {
    for (auto& [name, tensor] : t) {
      if (name == "model.layers.0.self_attn.k_proj.weight") tensor = at::zeros({16, 16});
    }
  });
  const std::string message = load_error(dir.path());
  EXPECT_THAT(message, HasSubstr((dir / "model.safetensors").string()));
  EXPECT_THAT(message, HasSubstr("tensor 'model.layers.0.self_attn.k_proj.weight' has shape "
                                 "[16, 16] but the config expects [8, 16]"));
  // Qwen2 always has q/k/v biases.
  write_model(dir.path(), with(kLlama, {{"model_type", "qwen2"}}), [](Tensors& t) {
    t.erase(
        std::remove_if(t.begin(), t.end(),
                       [](auto& p) { return p.first == "model.layers.0.self_attn.q_proj.bias"; }),
        t.end());
  });
  EXPECT_THAT(load_error(dir.path()),
              HasSubstr("missing tensor(s): model.layers.0.self_attn.q_proj.bias"));
  write_model(dir.path(), kGptj, [](Tensors& t) {
    for (auto& [name, tensor] : t) {
      if (name == "lm_head.bias") tensor = at::zeros({65});
    }
  });
  EXPECT_THAT(load_error(dir.path()),
              HasSubstr("tensor 'lm_head.bias' has shape [65] but the config expects [64]"));
  // An untied head must be in the checkpoint.
  write_model(dir.path(), with(kLlama, {{"tie_word_embeddings", true}}));
  write_file(dir / "config.json", kLlama.dump());
  EXPECT_THAT(load_error(dir.path()), HasSubstr("missing tensor(s): lm_head.weight"));
}

TEST(ArchitectureWeights, OlderCheckpointBuffersAreTolerated) {
  TempDir dir;
  write_model(dir.path(), kGptj, [](Tensors& t) {
    t.emplace_back("transformer.h.0.attn.bias", at::ones({1, 1, 32, 32}));
    t.emplace_back("transformer.h.0.attn.masked_bias", at::ones({1}));
  });
  EXPECT_EQ(load_error(dir.path()), "<no error>");
  write_model(dir.path(), with(kLlama, {{"tie_word_embeddings", true}}), [](Tensors& t) {
    t.emplace_back("model.layers.0.self_attn.rotary_emb.inv_freq", at::ones({2}));
    t.emplace_back("lm_head.weight", at::ones({64, 16}));  // a tied head saved anyway
  });
  EXPECT_EQ(load_error(dir.path()), "<no error>");
  write_model(dir.path(), kLlama, [](Tensors& t) {
    t.emplace_back("model.layers.0.self_attn.extra.weight", at::ones({2}));
  });
  EXPECT_THAT(load_error(dir.path()), HasSubstr("unexpected tensor(s) for this architecture: "
                                                "model.layers.0.self_attn.extra.weight"));
}

int64_t spec_parameters(const std::string& preset) {
  const ModelConfig c = parse_model_config(preset_config(preset), "preset:" + preset);
  int64_t n = 0;
  for (const auto& s : arch_of(c).weight_specs(c)) {
    int64_t k = 1;
    for (auto d : s.shape) k *= d;
    n += k;
  }
  return n;
}

TEST(ArchitecturePresets, PublishedShapesParse) {
  register_builtin_architectures();
  const ModelConfig j = parse_model_config(preset_config("gptj-6b"), "preset:gptj-6b");
  EXPECT_EQ(j.model_type, "gptj");
  EXPECT_EQ(j.vocab_size, 50400);
  EXPECT_EQ(j.hidden_size, 4096);
  EXPECT_EQ(j.num_layers, 28);
  EXPECT_EQ(j.num_heads, 16);
  EXPECT_EQ(j.rotary_dim, 64);
  EXPECT_EQ(j.intermediate_size, 16384);
  EXPECT_EQ(j.max_positions, 2048);
  EXPECT_FALSE(j.tie_word_embeddings);
  EXPECT_EQ(j.eos_token_ids, std::vector<int64_t>{50256});
  const ModelConfig l = parse_model_config(preset_config("llama-3-8b"), "preset:llama-3-8b");
  EXPECT_EQ(l.vocab_size, 128256);
  EXPECT_EQ(l.num_kv_heads, 8);
  EXPECT_EQ(l.head_dim, 128);
  EXPECT_EQ(l.intermediate_size, 14336);
  EXPECT_EQ(l.rope.type, "default");
  EXPECT_EQ(l.rope.theta, 500000.0);
  EXPECT_FALSE(l.tie_word_embeddings);
  // Parameter counts of the published models (transformers reports the same for these configs).
  EXPECT_EQ(spec_parameters("gptj-6b"), 6050882784);
  EXPECT_EQ(spec_parameters("llama-3-8b"), 8030261248);
  const ModelConfig tiny = parse_model_config(preset_config("llama-tiny"), "preset:llama-tiny");
  EXPECT_LT(tiny.num_kv_heads, tiny.num_heads);
  EXPECT_NO_THROW(parse_model_config(preset_config("gptj-tiny"), "preset:gptj-tiny"));
}

TEST(ArchitecturePresets, TinyPresetsGenerateTheSameWithEitherCache) {
  register_builtin_backends();
  for (const std::string preset : {"gptj-tiny", "llama-tiny"}) {
    ModelSource s;
    s.preset = preset;
    s.seed = 5;
    const auto m = load_model(s).model;
    ResolvedSettings g;
    g.max_new_tokens = 6;
    g.eos_token_id = {};
    std::vector<std::vector<std::vector<int64_t>>> runs;
    for (const std::string cache : {"growing", "static"}) {
      auto b = BackendRegistry::instance().create("eager", m,
                                                  BackendOptions("eager", {{"cache", cache}}));
      const auto r = Generator(g).generate(*b, {{5, 6, 7, 8}, {9}});
      runs.push_back({r.outputs[0][0].tokens, r.outputs[1][0].tokens});
    }
    EXPECT_EQ(runs[0], runs[1]) << preset;
    EXPECT_EQ(runs[0][0].size(), 6u) << preset;
  }
}

TEST(RandomWeights, Float32DrawsAreUnchangedAndReducedPrecisionRoundsThem) {
  const std::vector<TensorSpec> specs = {{"a", {3, 40}}, {"b", {7}, Init::kOnes}, {"c", {50}}};
  // What random_weights has always drawn in float32: normal_ on one generator, spec by spec.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(42);
  const at::Tensor a = at::empty({3, 40}).normal_(0.0, 0.5, gen);
  const at::Tensor c = at::empty({50}).normal_(0.0, 0.5, gen);
  const WeightMap f32 = random_weights(specs, 0.5, 42, LoadOptions{});
  EXPECT_TRUE(at::equal(f32.at("a"), a));
  EXPECT_TRUE(at::equal(f32.at("c"), c));
  EXPECT_TRUE(at::equal(f32.at("b"), at::ones({7})));
  LoadOptions bf16;
  bf16.dtype = at::kBFloat16;
  const WeightMap r = random_weights(specs, 0.5, 42, bf16);
  EXPECT_EQ(r.at("a").scalar_type(), at::kBFloat16);
  EXPECT_TRUE(at::equal(r.at("a"), a.to(at::kBFloat16)));
  EXPECT_TRUE(at::equal(r.at("c"), c.to(at::kBFloat16)));
}

}  // namespace
}  // namespace gengraph

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/model/loader.h"
#include "framework/model/model_registry.h"
#include "framework/model/safetensors.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using testing::error_of;
using ::testing::HasSubstr;
using testing::TempDir;
using testing::write_file;

const nlohmann::json kTinyConfig = {{"model_type", "gpt2"}, {"vocab_size", 40}, {"n_positions", 16},
                                    {"n_embd", 8},          {"n_layer", 1},     {"n_head", 2}};

// Writes config.json and a checkpoint with the architecture's expected tensors, after `edit`.
void write_model(
    const std::filesystem::path& dir, const nlohmann::json& config,
    const std::function<void(std::vector<std::pair<std::string, at::Tensor>>&)>& edit = {}) {
  register_builtin_architectures();
  write_file(dir / "config.json", config.dump());
  const ModelConfig mc = parse_model_config(config, "test");
  const auto& arch = ModelRegistry::instance().get("gpt2", "test");
  const WeightMap w = random_weights(arch.weight_specs(mc), 0.02, 0, LoadOptions{});
  std::vector<std::pair<std::string, at::Tensor>> tensors(w.begin(), w.end());
  if (edit) edit(tensors);
  testing::write_safetensors(dir / "model.safetensors", tensors);
}

ModelSource folder(const std::filesystem::path& p) {
  ModelSource s;
  s.path = p;
  return s;
}

TEST(Loader, LoadsTransformersFolderWithGenerationConfig) {
  const auto m = load_model(folder(testing::fixtures_dir() + "/models/gpt2-a"));
  EXPECT_EQ(m.model->config().model_type, "gpt2");
  EXPECT_EQ(m.model->config().vocab_size, 96);
  EXPECT_EQ(m.generation_defaults["eos_token_id"], 2);
  EXPECT_GT(m.model->parameter_count(), 0);
}

TEST(Loader, LoadsShardedAndHalfPrecisionCheckpoints) {
  const auto b = load_model(folder(testing::fixtures_dir() + "/models/gpt2-b"));
  EXPECT_FALSE(b.model->config().tie_word_embeddings);
  ModelSource c = folder(testing::fixtures_dir() + "/models/gpt2-c");
  c.load.dtype = at::kBFloat16;
  const auto m = load_model(c);
  EXPECT_EQ(m.model->dtype(), at::kBFloat16);
}

TEST(Loader, RandomWeightsAreReproducibleFromTheSeed) {
  ModelSource s;
  s.preset = "gpt2-tiny";
  s.seed = 7;
  const auto a = load_model(s), b = load_model(s);
  s.seed = 8;
  const auto c = load_model(s);
  const auto& wa = a.model->weights().at("transformer.h.0.attn.c_attn.weight");
  EXPECT_TRUE(at::equal(wa, b.model->weights().at("transformer.h.0.attn.c_attn.weight")));
  EXPECT_FALSE(at::equal(wa, c.model->weights().at("transformer.h.0.attn.c_attn.weight")));
}

TEST(Loader, PresetOverridesChangeTheShape) {
  ModelSource s;
  s.preset = "gpt2-tiny";
  s.config_overrides = {{"n_layer", 3}, {"n_embd", 32}};
  const auto m = load_model(s);
  EXPECT_EQ(m.model->config().num_layers, 3);
  EXPECT_EQ(m.model->config().hidden_size, 32);
}

// An override of a key no config reader looks at would silently measure the unchanged shape.
TEST(LoaderErrors, AnOverrideNoConfigReaderUsesIsRefused) {
  ModelSource s;
  s.preset = "gpt2-tiny";
  s.config_overrides = {{"n_layr", 4}};
  EXPECT_THAT(error_of([&] { load_model(s); }),
              HasSubstr("model.config: 'n_layr' is not a key gengraph's gpt2 config reader uses"));
  EXPECT_THAT(error_of([&] { load_model(s); }), HasSubstr("(did you mean 'n_layer'?)"));
  // A dict counts as used when the reader looks at its entries (rope_scaling.factor).
  s.preset = "llama-tiny";
  s.config_overrides = {{"rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}}},
                        {"num_key_value_heads", 2}};
  EXPECT_EQ(load_model(s).model->config().rope.factor, 2.0);
  s.config_overrides = {{"rope_scalng", {{"rope_type", "linear"}, {"factor", 2.0}}}};
  EXPECT_THAT(error_of([&] { load_model(s); }), HasSubstr("(did you mean 'rope_scaling'?)"));
}

// Weights must be F32, F16, BF16 or F64: an integer tensor is no weight, and FP8 weights would
// need their quantization scales, so a plain cast would load a different model.
TEST(LoaderErrors, WeightsOfANonFloatOrFp8DtypeAreRefused) {
  TempDir dir;
  const auto src = std::filesystem::path(testing::fixtures_dir()) / "models" / "gpt2-a";
  for (const auto& [dtype, name, expected] :
       std::vector<std::tuple<at::ScalarType, std::string, std::string>>{
           {at::kLong, "I64", "has dtype I64, expected F32, F16, BF16 or F64"},
           {at::kFloat8_e4m3fn, "F8",
            "has dtype F8_E4M3, expected F32, F16, BF16 or F64 (FP8-quantized checkpoints"}}) {
    const auto m = dir / name;
    std::filesystem::copy(src, m);
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    {
      const auto f = SafetensorsFile::open(src / "model.safetensors");
      for (const auto& [key, e] : f->entries()) {
        at::Tensor t = f->view(key).clone();
        tensors.emplace_back(key, key == "transformer.wte.weight" ? t.to(dtype) : t);
      }
    }
    std::filesystem::remove(m / "model.safetensors");
    testing::write_safetensors(m / "model.safetensors", tensors);
    EXPECT_THAT(error_of([&] { load_model(folder(m)); }),
                HasSubstr("tensor 'transformer.wte.weight' " + expected));
  }
}

TEST(LoaderErrors, UnknownPresetSuggestsClosest) {
  ModelSource s;
  s.preset = "gpt2-tinny";
  EXPECT_THAT(error_of([&] { load_model(s); }), HasSubstr("did you mean 'gpt2-tiny'"));
}

TEST(LoaderErrors, MissingFolderOrConfig) {
  EXPECT_THAT(error_of([] { load_model(folder("/no/such/model")); }),
              HasSubstr("'/no/such/model' is not a folder"));
  TempDir dir;
  EXPECT_THAT(error_of([&] { load_model(folder(dir.path())); }), HasSubstr("has no config.json"));
  // A folder where a file belongs is named as such, not reported as bad JSON or a failed mmap.
  const auto m = dir / "m";
  std::filesystem::copy(std::filesystem::path(testing::fixtures_dir()) / "models" / "gpt2-a", m);
  std::filesystem::remove(m / "generation_config.json");
  std::filesystem::create_directory(m / "generation_config.json");
  EXPECT_THAT(error_of([&] { load_model(folder(m)); }),
              HasSubstr("generation_config.json' is a folder, expected a JSON file"));
  std::filesystem::remove(m / "generation_config.json");
  testing::write_file(m / "generation_config.json", "[]");
  EXPECT_THAT(error_of([&] { load_model(folder(m)); }),
              HasSubstr("generation_config.json': expected a JSON object, found []"));
  std::filesystem::remove(m / "generation_config.json");
  std::filesystem::remove(m / "model.safetensors");
  std::filesystem::create_directory(m / "model.safetensors");
  EXPECT_THAT(error_of([&] { load_model(folder(m)); }),
              HasSubstr("model.safetensors': is a folder, expected a file"));
}

TEST(LoaderErrors, ConfigJsonDefects) {
  TempDir dir;
  write_model(dir.path(), kTinyConfig);
  auto with = [&](nlohmann::json patch) {
    nlohmann::json c = kTinyConfig;
    c.merge_patch(patch);
    write_file(dir / "config.json", c.dump());
    return error_of([&] { load_model(folder(dir.path())); });
  };
  EXPECT_THAT(with({{"model_type", "gpt7"}}),
              HasSubstr("unsupported model_type 'gpt7'; supported: gemma3_text, gpt2, gptj, llama, "
                        "mistral, qwen2"));
  EXPECT_THAT(with({{"model_type", nullptr}}), HasSubstr("missing string field 'model_type'"));
  EXPECT_THAT(with({{"n_layer", "two"}}),
              HasSubstr("key 'n_layer': expected a positive integer, found \"two\""));
  EXPECT_THAT(with({{"n_head", 3}}), HasSubstr("not divisible by n_head"));
  EXPECT_THAT(with({{"eos_token_id", 99}}), HasSubstr("outside the vocabulary"));
  EXPECT_THAT(with({{"activation_function", "gelu_old"}}),
              HasSubstr("unsupported activation 'gelu_old'"));
  write_file(dir / "config.json", "{\"model_type\": ");
  EXPECT_THAT(error_of([&] { load_model(folder(dir.path())); }), HasSubstr("is not valid JSON"));
}

TEST(LoaderErrors, MissingUnexpectedAndMisshapenTensors) {
  TempDir dir;
  write_model(dir.path(), kTinyConfig, [](auto& t) {
    t.erase(std::remove_if(t.begin(), t.end(),
                           [](auto& p) { return p.first == "transformer.ln_f.bias"; }),
            t.end());
  });
  EXPECT_THAT(error_of([&] { load_model(folder(dir.path())); }),
              HasSubstr("missing tensor(s): transformer.ln_f.bias"));
  write_model(dir.path(), kTinyConfig,
              [](auto& t) { t.emplace_back("transformer.extra.weight", at::ones({2})); });
  EXPECT_THAT(error_of([&] { load_model(folder(dir.path())); }),
              HasSubstr("unexpected tensor(s) for this architecture: transformer.extra.weight"));
  write_model(dir.path(), kTinyConfig, [](auto& t) {
    for (auto& p : t) {
      if (p.first == "transformer.wte.weight") p.second = at::zeros({41, 8});
    }
  });
  EXPECT_THAT(
      error_of([&] { load_model(folder(dir.path())); }),
      HasSubstr(
          "tensor 'transformer.wte.weight' has shape [41, 8] but the config expects [40, 8]"));
}

TEST(LoaderErrors, OldStyleNamesAndMaskBuffersAreAccepted) {
  TempDir dir;
  write_model(dir.path(), kTinyConfig, [](auto& t) {
    for (auto& p : t) p.first = p.first.substr(std::string("transformer.").size());
    t.emplace_back("h.0.attn.bias", at::ones({1, 1, 16, 16}));
  });
  EXPECT_NO_THROW(load_model(folder(dir.path())));
}

}  // namespace
}  // namespace gengraph

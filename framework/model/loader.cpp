#include "framework/model/loader.h"

#include <chrono>
#include <map>

#include "framework/model/model_registry.h"
#include "framework/model/safetensors.h"
#include "framework/util/error.h"

namespace gengraph {
namespace {

const std::map<std::string, nlohmann::json>& presets() {
  static const std::map<std::string, nlohmann::json> kPresets = {
      // A small random model for quick runs and tests.
      {"gpt2-tiny",
       {{"model_type", "gpt2"}, {"vocab_size", 1024}, {"n_positions", 256}, {"n_embd", 64},
        {"n_layer", 2}, {"n_head", 4}, {"bos_token_id", 0}, {"eos_token_id", 0}}},
      // Published GPT-2 shapes (transformers' gpt2 / gpt2-medium / gpt2-large config.json).
      {"gpt2",
       {{"model_type", "gpt2"}, {"vocab_size", 50257}, {"n_positions", 1024}, {"n_embd", 768},
        {"n_layer", 12}, {"n_head", 12}, {"bos_token_id", 50256}, {"eos_token_id", 50256}}},
      {"gpt2-medium",
       {{"model_type", "gpt2"}, {"vocab_size", 50257}, {"n_positions", 1024}, {"n_embd", 1024},
        {"n_layer", 24}, {"n_head", 16}, {"bos_token_id", 50256}, {"eos_token_id", 50256}}},
      {"gpt2-large",
       {{"model_type", "gpt2"}, {"vocab_size", 50257}, {"n_positions", 1024}, {"n_embd", 1280},
        {"n_layer", 36}, {"n_head", 20}, {"bos_token_id", 50256}, {"eos_token_id", 50256}}},
  };
  return kPresets;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> out;
  for (const auto& [k, v] : presets()) out.push_back(k);
  return out;
}

nlohmann::json preset_config(const std::string& name) {
  auto it = presets().find(name);
  if (it == presets().end()) {
    throw Error("unknown model preset '" + name + "'" + did_you_mean(name, preset_names()) +
                "; presets: " + join(preset_names(), ", "));
  }
  return it->second;
}

LoadedModel load_model(const ModelSource& src) {
  register_builtin_architectures();
  const auto t0 = std::chrono::steady_clock::now();
  LoadedModel out;
  if (!src.preset.empty()) {
    nlohmann::json doc = preset_config(src.preset);
    if (src.config_overrides.is_object()) doc.merge_patch(src.config_overrides);
    out.source = "preset:" + src.preset;
    ModelConfig config = parse_model_config(doc, out.source);
    const Architecture& arch = ModelRegistry::instance().get(config.model_type, out.source);
    WeightMap w = random_weights(arch.weight_specs(config), config.initializer_range, src.seed,
                                 src.load);
    out.model = arch.build(std::move(config), std::move(w));
  } else {
    const auto& dir = src.path;
    if (!std::filesystem::is_directory(dir)) {
      throw Error("model path '" + dir.string() + "' is not a folder (expected config.json and " +
                  "model.safetensors inside)");
    }
    const auto config_path = dir / "config.json";
    if (!std::filesystem::exists(config_path)) {
      throw Error("model folder '" + dir.string() + "' has no config.json");
    }
    ModelConfig config = load_model_config(config_path);
    const Architecture& arch = ModelRegistry::instance().get(config.model_type, config.source);
    const Checkpoint ckpt = Checkpoint::open_folder(dir);
    WeightMap w = load_weights(ckpt, arch.weight_specs(config), arch.names, src.load);
    out.model = arch.build(std::move(config), std::move(w));
    out.source = dir.string();
    const auto gen_path = dir / "generation_config.json";
    if (std::filesystem::exists(gen_path)) out.generation_defaults = read_json_file(gen_path);
  }
  out.load_seconds = seconds_since(t0);
  return out;
}

}  // namespace gengraph

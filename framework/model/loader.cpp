#include "framework/model/loader.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "framework/model/gguf.h"
#include "framework/model/gguf_model.h"
#include "framework/model/json_fields.h"
#include "framework/model/memory.h"
#include "framework/model/model_registry.h"
#include "framework/model/safetensors.h"
#include "framework/quant/weight_format.h"
#include "framework/util/error.h"
#include "framework/util/path_errors.h"
#include "framework/util/strings.h"

namespace gengraph {
namespace {

const std::map<std::string, nlohmann::json>& presets() {
  static const std::map<std::string, nlohmann::json> kPresets = {
      // A small random model for quick runs and tests.
      {"gpt2-tiny",
       {{"model_type", "gpt2"},
        {"vocab_size", 1024},
        {"n_positions", 256},
        {"n_embd", 64},
        {"n_layer", 2},
        {"n_head", 4},
        {"bos_token_id", 0},
        {"eos_token_id", 0}}},
      // Published GPT-2 shapes (transformers' gpt2 / gpt2-medium / gpt2-large config.json).
      {"gpt2",
       {{"model_type", "gpt2"},
        {"vocab_size", 50257},
        {"n_positions", 1024},
        {"n_embd", 768},
        {"n_layer", 12},
        {"n_head", 12},
        {"bos_token_id", 50256},
        {"eos_token_id", 50256}}},
      {"gpt2-medium",
       {{"model_type", "gpt2"},
        {"vocab_size", 50257},
        {"n_positions", 1024},
        {"n_embd", 1024},
        {"n_layer", 24},
        {"n_head", 16},
        {"bos_token_id", 50256},
        {"eos_token_id", 50256}}},
      {"gpt2-large",
       {{"model_type", "gpt2"},
        {"vocab_size", 50257},
        {"n_positions", 1024},
        {"n_embd", 1280},
        {"n_layer", 36},
        {"n_head", 20},
        {"bos_token_id", 50256},
        {"eos_token_id", 50256}}},
      // GPT-J: a small random one, and the published GPT-J-6B shape (EleutherAI/gpt-j-6b).
      {"gptj-tiny",
       {{"model_type", "gptj"},
        {"vocab_size", 1024},
        {"n_positions", 256},
        {"n_embd", 64},
        {"n_layer", 2},
        {"n_head", 4},
        {"rotary_dim", 8},
        {"bos_token_id", 0},
        {"eos_token_id", 0}}},
      {"gptj-6b",
       {{"model_type", "gptj"},
        {"vocab_size", 50400},
        {"n_positions", 2048},
        {"n_embd", 4096},
        {"n_layer", 28},
        {"n_head", 16},
        {"rotary_dim", 64},
        {"n_inner", nullptr},
        {"activation_function", "gelu_new"},
        {"layer_norm_epsilon", 1e-5},
        {"tie_word_embeddings", false},
        {"bos_token_id", 50256},
        {"eos_token_id", 50256}}},
      // LLaMA: a small random one with grouped-query attention, and the published
      // Meta-Llama-3-8B shape.
      {"llama-tiny",
       {{"model_type", "llama"},
        {"vocab_size", 1024},
        {"max_position_embeddings", 256},
        {"hidden_size", 64},
        {"intermediate_size", 160},
        {"num_hidden_layers", 2},
        {"num_attention_heads", 4},
        {"num_key_value_heads", 2},
        {"rms_norm_eps", 1e-5},
        {"tie_word_embeddings", false},
        {"bos_token_id", 0},
        {"eos_token_id", 0}}},
      {"llama-3-8b",
       {{"model_type", "llama"},
        {"vocab_size", 128256},
        {"max_position_embeddings", 8192},
        {"hidden_size", 4096},
        {"intermediate_size", 14336},
        {"num_hidden_layers", 32},
        {"num_attention_heads", 32},
        {"num_key_value_heads", 8},
        {"hidden_act", "silu"},
        {"rms_norm_eps", 1e-5},
        {"rope_theta", 500000.0},
        {"rope_scaling", nullptr},
        {"attention_bias", false},
        {"mlp_bias", false},
        {"tie_word_embeddings", false},
        {"bos_token_id", 128000},
        {"eos_token_id", 128001}}},
      // Gemma 3 text: a small random one (a window of 16 and every third layer global, so that
      // both kinds of layer and the window show on short prompts), and the published
      // gemma-3-270m shape.
      {"gemma3-tiny",
       {{"model_type", "gemma3_text"},
        {"vocab_size", 1024},
        {"max_position_embeddings", 256},
        {"hidden_size", 64},
        {"intermediate_size", 128},
        {"num_hidden_layers", 3},
        {"num_attention_heads", 4},
        {"num_key_value_heads", 2},
        {"head_dim", 16},
        {"sliding_window", 16},
        {"sliding_window_pattern", 3},
        {"query_pre_attn_scalar", 16},
        {"bos_token_id", 2},
        {"eos_token_id", 1},
        {"pad_token_id", 0}}},
      {"gemma3-270m-shape",
       {{"model_type", "gemma3_text"},
        {"vocab_size", 262144},
        {"max_position_embeddings", 32768},
        {"hidden_size", 640},
        {"intermediate_size", 2048},
        {"num_hidden_layers", 18},
        {"num_attention_heads", 4},
        {"num_key_value_heads", 1},
        {"head_dim", 256},
        {"hidden_activation", "gelu_pytorch_tanh"},
        {"rms_norm_eps", 1e-6},
        {"sliding_window", 512},
        {"sliding_window_pattern", 6},
        {"query_pre_attn_scalar", 256},
        {"rope_theta", 1000000.0},
        {"rope_local_base_freq", 10000.0},
        {"tie_word_embeddings", true},
        {"bos_token_id", 2},
        {"eos_token_id", 1},
        {"pad_token_id", 0}}},
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

namespace {

nlohmann::json preset_document(const ModelSource& src) {
  nlohmann::json doc = preset_config(src.preset);
  if (src.config_overrides.is_object()) doc.merge_patch(src.config_overrides);
  return doc;
}

// A preset's configuration from its document (preset + overrides). An override of a key no config
// reader looks at would change nothing: almost surely a typo, refused with the closest key.
ModelConfig preset_model_config(const ModelSource& src, const nlohmann::json& doc) {
  ConfigKeyRecorder read;
  ModelConfig config = parse_model_config(doc, "preset:" + src.preset);
  if (!src.config_overrides.is_object()) return config;
  std::vector<std::string> known(read.keys().begin(), read.keys().end());
  for (auto it = src.config_overrides.begin(); it != src.config_overrides.end(); ++it) {
    const bool used = std::any_of(known.begin(), known.end(), [&](const std::string& k) {
      return k == it.key() || k.rfind(it.key() + ".", 0) == 0;
    });
    if (!used) {
      throw Error(
          "model.config: '" + it.key() + "' is not a key gengraph's " + config.model_type +
          " config reader uses (with this configuration), so overriding it would change nothing" +
          did_you_mean(it.key(), known));
    }
  }
  return config;
}

// What a path is, for errors: "a directory", "a FIFO", ... ("" for a regular file).
std::string kind_of(const std::filesystem::file_status& st) {
  switch (st.type()) {
    case std::filesystem::file_type::regular:
      return "";
    case std::filesystem::file_type::directory:
      return "a directory";
    case std::filesystem::file_type::fifo:
      return "a FIFO";
    case std::filesystem::file_type::socket:
      return "a socket";
    case std::filesystem::file_type::block:
      return "a block device";
    case std::filesystem::file_type::character:
      return "a character device";
    default:
      return "not a regular file";
  }
}

// " ('gpt2-tiny' is also the name of a built-in preset; ...)" when a model path could have meant
// a preset: a file or folder of that name in the working folder is not the preset.
std::string preset_hint(const std::filesystem::path& dir) {
  const std::string name = dir.string();
  const auto names = preset_names();
  if (std::find(names.begin(), names.end(), name) == names.end()) return "";
  return " ('" + name + "' is also the name of a built-in preset; for the preset, write " +
         "model.preset: " + name + " instead of model.path)";
}

}  // namespace

std::filesystem::path check_model_folder(const std::filesystem::path& dir) {
  std::error_code ec;
  const auto st = checked_status(dir, "model folder");
  if (!std::filesystem::exists(st)) {
    throw Error("model path '" + dir.string() + "' is not a folder: it does not exist (expected " +
                "a folder with config.json and model.safetensors)" + preset_hint(dir));
  }
  if (!std::filesystem::is_directory(st)) {
    throw Error(
        "model path '" + dir.string() + "' is not a folder: it is " +
        (std::filesystem::is_regular_file(st) ? "a file, and not a GGUF file" : kind_of(st)) +
        " (expected a folder with config.json and model.safetensors, or a GGUF file)" +
        preset_hint(dir));
  }
  const auto config_path = dir / "config.json";
  const auto cst = checked_status(config_path, "the model's config.json");
  if (!std::filesystem::exists(cst)) {
    const bool dangling =
        std::filesystem::is_symlink(std::filesystem::symlink_status(config_path, ec));
    throw Error("model folder '" + dir.string() + "' has no config.json" +
                (dangling ? " (it is a symbolic link to a missing file)" : "") + preset_hint(dir));
  }
  if (!std::filesystem::is_regular_file(cst)) {
    throw Error("'" + config_path.string() + "' is " + kind_of(cst) +
                ", expected a regular file (the model's config.json)");
  }
  return config_path;
}

namespace {

// transformers 5.17: when config.json ties lm_head.weight to the input embedding but the checkpoint
// stores an lm_head.weight with other values, the two are not tied; the stored head is used (and
// transformers warns). gengraph does the same, and says so in `warnings`.
void untie_when_the_checkpoint_differs(const Checkpoint& ckpt, const Architecture& arch,
                                       ModelConfig& config, std::vector<std::string>& warnings) {
  if (!config.tie_word_embeddings || arch.input_embedding.empty()) return;
  std::string head, embedding;
  for (const auto& key : ckpt.names()) {
    const std::string canon = arch.names.canonical ? arch.names.canonical(key) : key;
    if (canon == "lm_head.weight") head = key;
    if (canon == arch.input_embedding) embedding = key;
  }
  if (head.empty() || embedding.empty()) return;
  const at::Tensor h = ckpt.view(head), e = ckpt.view(embedding);
  if (h.sizes() == e.sizes() && h.scalar_type() == e.scalar_type() && at::equal(h, e)) return;
  config.tie_word_embeddings = false;
  warnings.push_back(ckpt.description() + ": config.json ties lm_head.weight to " +
                     arch.input_embedding +
                     " (tie_word_embeddings: true), but the checkpoint stores an lm_head.weight "
                     "with other values: it is used untied, as transformers does");
}

}  // namespace

ModelConfig model_config_of(const ModelSource& src) {
  register_builtin_architectures();
  if (!src.preset.empty()) return preset_model_config(src, preset_document(src));
  if (is_gguf_file(src.path)) {
    const auto file = GgufFile::open(src.path);
    return parse_model_config(gguf_config_document(*file), src.path.string());
  }
  const auto config_path = check_model_folder(src.path);
  return parse_model_config(read_json_file(config_path), config_path.string());
}

LoadedModel load_model(const ModelSource& src) {
  // Every entry point checked the keys where the user set them; LoadOptions made in code meet the
  // same rules here, named as the YAML keys.
  check_weight_format(src.load.weights, src.load.fused, key_names_with_prefix("model."));
  register_builtin_architectures();
  const auto t0 = std::chrono::steady_clock::now();
  LoadedModel out;
  if (!src.preset.empty()) {
    out.source = "preset:" + src.preset;
    out.config_json = preset_document(src);
    ModelConfig config = preset_model_config(src, out.config_json);
    const Architecture& arch = ModelRegistry::instance().get(config.model_type, out.source);
    const double bytes = weight_bytes(arch, config, src.load.dtype);
    const std::string what = "the weights of " + out.source;
    const std::string advice =
        "make the preset smaller (model.config: n_layer, n_embd, vocab_size, ...) or use a "
        "smaller dtype (model.dtype)";
    check_memory(what, bytes, src.load.device, advice);
    config.fused = src.load.fused;
    config.weights = src.load.weights;
    out.model = with_allocation_errors(what, bytes, src.load.device, advice, [&] {
      WeightMap w =
          random_weights(arch.weight_specs(config), config.initializer_range, src.seed, src.load);
      return arch.build(std::move(config), std::move(w));
    });
  } else if (is_gguf_file(src.path)) {
    // A GGUF file: its metadata as config.json, its tensors dequantized (docs/gguf.md).
    const auto file = GgufFile::open(src.path);
    out.config_json = gguf_config_document(*file);
    ModelConfig config = parse_model_config(out.config_json, src.path.string());
    const Architecture& arch = ModelRegistry::instance().get(config.model_type, config.source);
    const double bytes = weight_bytes(arch, config, src.load.dtype);
    const std::string what =
        "the weights of '" + src.path.string() + "' (" + gguf_summary(*file) + ", dequantized)";
    const std::string advice = "use a smaller dtype (model.dtype) or a device with more memory";
    check_memory(what, bytes, src.load.device, advice);
    config.fused = src.load.fused;
    config.weights = src.load.weights;
    out.model = with_allocation_errors(what, bytes, src.load.device, advice, [&] {
      auto stored = std::make_shared<StoredWeights>();
      WeightMap w = gguf_weights(*file, config, arch.weight_specs(config), src.load, stored.get());
      if (!stored->int4.empty() || !stored->int8.empty()) config.stored = std::move(stored);
      std::unique_ptr<CausalLM> m = arch.build(std::move(config), std::move(w));
      m->release_stored();
      return m;
    });
    out.source = src.path.string();
  } else {
    const auto& dir = src.path;
    const auto config_path = check_model_folder(dir);
    out.config_json = read_json_file(config_path);
    ModelConfig config = parse_model_config(out.config_json, config_path.string());
    if (checked_exists(dir / "generation_config.json", "the model's generation_config.json")) {
      out.generation_defaults = read_json_file(dir / "generation_config.json");
      if (!out.generation_defaults.is_object()) {
        throw Error("'" + (dir / "generation_config.json").string() +
                    "': expected a JSON object, found " +
                    out.generation_defaults.dump().substr(0, 60));
      }
    }
    const Architecture& arch = ModelRegistry::instance().get(config.model_type, config.source);
    const double bytes = weight_bytes(arch, config, src.load.dtype);
    const std::string what =
        "the weights of '" + dir.string() + "' (as its config.json describes them)";
    const std::string advice = "use a smaller dtype (model.dtype) or a device with more memory";
    check_memory(what, bytes, src.load.device, advice);
    const Checkpoint ckpt = Checkpoint::open_folder(dir);
    untie_when_the_checkpoint_differs(ckpt, arch, config, out.warnings);
    config.fused = src.load.fused;
    config.weights = src.load.weights;
    out.model = with_allocation_errors(what, bytes, src.load.device, advice, [&] {
      WeightMap w = load_weights(ckpt, arch.weight_specs(config), arch.names, src.load);
      return arch.build(std::move(config), std::move(w));
    });
    out.source = dir.string();
  }
  out.load_seconds = seconds_since(t0);
  return out;
}

}  // namespace gengraph

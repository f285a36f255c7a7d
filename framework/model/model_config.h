// A typed view of a Hugging Face config.json, shared by every architecture.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace gengraph {

struct ModelConfig {
  std::string model_type;  // config.json "model_type", the model registry key
  std::string source;      // where it came from (file path or "preset:NAME"), for error messages

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;  // == num_heads without grouped-query attention
  int64_t head_dim = 0;
  int64_t intermediate_size = 0;
  int64_t max_positions = 0;  // the model's context length
  double norm_eps = 1e-5;
  std::string activation;
  bool tie_word_embeddings = true;
  double initializer_range = 0.02;

  // GPT-2 specific attention scaling switches (transformers' GPT2Config names).
  bool scale_attn_weights = true;
  bool scale_attn_by_inverse_layer_idx = false;

  std::optional<int64_t> bos_token_id;
  std::optional<int64_t> pad_token_id;
  std::vector<int64_t> eos_token_ids;

  // Throws gengraph::Error naming `source` and the field when the numbers are inconsistent.
  void validate() const;
};

// Reads config.json at `path` and parses it with the parser registered for its model_type.
ModelConfig load_model_config(const std::filesystem::path& path);

// Parses an already-read config.json document; `source` names it in errors.
ModelConfig parse_model_config(const nlohmann::json& doc, const std::string& source);

// Reads and parses a JSON file, naming the file (and line/byte) on malformed input.
nlohmann::json read_json_file(const std::filesystem::path& path);

}  // namespace gengraph

// Generation parameters, named and defaulted as in transformers' GenerationConfig, so that a
// model's generation_config.json and a YAML `generation:` block mean the same thing here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace gengraph {

struct GenerationConfig {
  // Length. max_new_tokens wins over max_length (which counts the padded prompt); with neither,
  // transformers 5 generates 20 new tokens, capped at the model's context.
  std::optional<int64_t> max_new_tokens;
  std::optional<int64_t> max_length;

  // Search.
  bool do_sample = false;
  int64_t num_beams = 1;
  int64_t num_return_sequences = 1;

  // Special tokens.
  std::vector<int64_t> eos_token_id;
  std::optional<int64_t> pad_token_id;
  std::optional<int64_t> bos_token_id;

  // Throws gengraph::Error naming the key, the value and the allowed range.
  void validate() const;
  // The total length (padded prompt + new tokens) as transformers resolves it.
  int64_t resolve_max_length(int64_t prompt_length, int64_t max_positions) const;
  // Checks token ids against the vocabulary.
  void validate_for_vocab(int64_t vocab_size) const;
  nlohmann::json to_json() const;
};

// The keys apply_generation_key understands.
const std::vector<std::string>& generation_keys();

// Keys of generation_config.json that describe the file rather than the decoding; never an error.
bool is_generation_metadata_key(const std::string& key);

// Sets one key from a JSON value; throws naming `source` and the key when the value is wrong or
// the key unknown (suggesting the closest valid key).
void apply_generation_key(GenerationConfig& config, const std::string& key,
                          const nlohmann::json& value, const std::string& source);

// Applies a generation_config.json document. Keys that gengraph does not implement are returned
// (the caller reports them) rather than silently dropped.
std::vector<std::string> apply_generation_defaults(GenerationConfig& config,
                                                   const nlohmann::json& doc,
                                                   const std::string& source);

}  // namespace gengraph

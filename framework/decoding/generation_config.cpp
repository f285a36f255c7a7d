#include "framework/decoding/generation_config.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "framework/util/error.h"

namespace gengraph {
namespace {

[[noreturn]] void bad(const std::string& source, const std::string& key, const std::string& expected,
                      const nlohmann::json& found) {
  throw Error(source + ": '" + key + "': expected " + expected + ", found " + found.dump());
}

int64_t as_int(const nlohmann::json& v, const std::string& source, const std::string& key,
               int64_t min) {
  if (!v.is_number_integer() || v.get<int64_t>() < min) {
    bad(source, key, "an integer >= " + std::to_string(min), v);
  }
  return v.get<int64_t>();
}

bool as_bool(const nlohmann::json& v, const std::string& source, const std::string& key) {
  if (!v.is_boolean()) bad(source, key, "true or false", v);
  return v.get<bool>();
}

std::optional<int64_t> as_token(const nlohmann::json& v, const std::string& source,
                                const std::string& key) {
  if (v.is_null()) return std::nullopt;
  if (v.is_array() && v.size() == 1) return as_int(v[0], source, key, 0);
  return as_int(v, source, key, 0);
}

std::vector<int64_t> as_tokens(const nlohmann::json& v, const std::string& source,
                               const std::string& key) {
  if (v.is_null()) return {};
  if (v.is_number()) return {as_int(v, source, key, 0)};
  if (!v.is_array()) bad(source, key, "a token id or a list of token ids", v);
  std::vector<int64_t> out;
  for (const auto& x : v) out.push_back(as_int(x, source, key, 0));
  return out;
}

}  // namespace

const std::vector<std::string>& generation_keys() {
  static const std::vector<std::string> kKeys = {
      "max_new_tokens", "max_length",   "do_sample",    "num_beams", "num_return_sequences",
      "eos_token_id",   "pad_token_id", "bos_token_id"};
  return kKeys;
}

bool is_generation_metadata_key(const std::string& key) {
  return key == "transformers_version" || key == "_from_model_config" || key == "use_cache" ||
         key == "return_dict_in_generate" || key == "output_scores" || key == "output_logits" ||
         key == "output_attentions" || key == "output_hidden_states" ||
         key == "decoder_start_token_id";
}

void apply_generation_key(GenerationConfig& c, const std::string& key, const nlohmann::json& v,
                          const std::string& source) {
  if (key == "max_new_tokens") {
    c.max_new_tokens = v.is_null() ? std::nullopt : std::optional<int64_t>(as_int(v, source, key, 1));
  } else if (key == "max_length") {
    c.max_length = v.is_null() ? std::nullopt : std::optional<int64_t>(as_int(v, source, key, 1));
  } else if (key == "do_sample") {
    c.do_sample = as_bool(v, source, key);
  } else if (key == "num_beams") {
    c.num_beams = as_int(v, source, key, 1);
  } else if (key == "num_return_sequences") {
    c.num_return_sequences = as_int(v, source, key, 1);
  } else if (key == "eos_token_id") {
    c.eos_token_id = as_tokens(v, source, key);
  } else if (key == "pad_token_id") {
    c.pad_token_id = as_token(v, source, key);
  } else if (key == "bos_token_id") {
    c.bos_token_id = as_token(v, source, key);
  } else {
    throw Error(source + ": unknown generation parameter '" + key + "'" +
                did_you_mean(key, generation_keys()) + "; known: " + join(generation_keys(), ", "));
  }
}

std::vector<std::string> apply_generation_defaults(GenerationConfig& c, const nlohmann::json& doc,
                                                   const std::string& source) {
  if (!doc.is_object()) throw Error(source + ": expected a JSON object");
  std::vector<std::string> ignored;
  const auto& known = generation_keys();
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (is_generation_metadata_key(it.key())) continue;
    if (std::find(known.begin(), known.end(), it.key()) == known.end()) {
      ignored.push_back(it.key());
      continue;
    }
    apply_generation_key(c, it.key(), it.value(), source);
  }
  return ignored;
}

void GenerationConfig::validate() const {
  if (do_sample) {
    throw Error("generation: 'do_sample': true is not supported yet (only greedy search); "
                "set do_sample: false");
  }
  if (num_beams != 1) {
    throw Error("generation: 'num_beams': expected 1 (beam search is not supported yet), found " +
                std::to_string(num_beams));
  }
  if (num_return_sequences > num_beams) {
    throw Error("generation: 'num_return_sequences' (" + std::to_string(num_return_sequences) +
                ") must not exceed num_beams (" + std::to_string(num_beams) + ")");
  }
}

int64_t GenerationConfig::resolve_max_length(int64_t prompt_length, int64_t max_positions) const {
  if (max_new_tokens) return prompt_length + *max_new_tokens;
  if (max_length) {
    if (*max_length <= prompt_length) {
      throw Error("generation: 'max_length' " + std::to_string(*max_length) +
                  " leaves no room after the longest prompt (" + std::to_string(prompt_length) +
                  " tokens, padding included); raise it or set max_new_tokens");
    }
    return *max_length;
  }
  return std::min(prompt_length + 20, max_positions);
}

void GenerationConfig::validate_for_vocab(int64_t vocab) const {
  auto check = [&](const char* key, int64_t id) {
    if (id < 0 || id >= vocab) {
      throw Error(std::string("generation: '") + key + "': token id " + std::to_string(id) +
                  " is outside the model's vocabulary [0, " + std::to_string(vocab) + ")");
    }
  };
  for (auto id : eos_token_id) check("eos_token_id", id);
  if (pad_token_id) check("pad_token_id", *pad_token_id);
  if (bos_token_id) check("bos_token_id", *bos_token_id);
}

nlohmann::json GenerationConfig::to_json() const {
  nlohmann::json j;
  j["max_new_tokens"] = max_new_tokens ? nlohmann::json(*max_new_tokens) : nlohmann::json();
  j["max_length"] = max_length ? nlohmann::json(*max_length) : nlohmann::json();
  j["do_sample"] = do_sample;
  j["num_beams"] = num_beams;
  j["num_return_sequences"] = num_return_sequences;
  j["eos_token_id"] = eos_token_id;
  j["pad_token_id"] = pad_token_id ? nlohmann::json(*pad_token_id) : nlohmann::json();
  j["bos_token_id"] = bos_token_id ? nlohmann::json(*bos_token_id) : nlohmann::json();
  return j;
}

}  // namespace gengraph

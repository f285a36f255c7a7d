#include "framework/model/model_config.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "framework/model/json_fields.h"
#include "framework/util/error.h"
#include "framework/util/files.h"
#include "framework/util/json_at.h"

namespace gengraph {

nlohmann::json read_json_file(const std::filesystem::path& path) {
  const std::string source = "'" + path.string() + "'";
  // Parse errors and number overflows name the file, the line and the column.
  return parse_json_text(read_regular_file(path, source, "a JSON file", kMaxDocumentBytes), source);
}

void ModelConfig::validate() const {
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) throw Error(source + ": " + what);
  };
  need(vocab_size > 0 && hidden_size > 0 && num_layers > 0 && num_heads > 0,
       "vocab size, hidden size, layer and head counts must be positive");
  need(hidden_size % num_heads == 0 || head_dim > 0, "hidden size " + std::to_string(hidden_size) +
                                                         " is not divisible by the head count " +
                                                         std::to_string(num_heads));
  need(num_kv_heads > 0 && num_heads % num_kv_heads == 0,
       "head count " + std::to_string(num_heads) +
           " is not a multiple of the key/value head count " + std::to_string(num_kv_heads));
  need(max_positions > 0, "the context length (max positions) must be positive");
  need(head_dim > 0, "the head size (head_dim) must be positive");
  need(rotary_dim >= 0 && rotary_dim <= head_dim && rotary_dim % 2 == 0,
       "rotary_dim " + std::to_string(rotary_dim) + " must be even and at most the head size " +
           std::to_string(head_dim));
  if (rotary_dim > 0) validate_rope();
  need(sliding_window >= 0, "sliding_window must not be negative");
  need(sliding_layers.empty() || static_cast<int64_t>(sliding_layers.size()) == num_layers,
       "sliding_layers has " + std::to_string(sliding_layers.size()) + " entries for " +
           std::to_string(num_layers) + " layers");
  need(sliding_window > 0 || sliding_layers.empty(),
       "sliding layers need a positive sliding_window");
  for (auto id : eos_token_ids) {
    need(id >= 0 && id < vocab_size, "eos_token_id " + std::to_string(id) +
                                         " is outside the vocabulary [0, " +
                                         std::to_string(vocab_size) + ")");
  }
}

void ModelConfig::validate_rope() const {
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) throw Error(source + ": rope: " + what);
  };
  need(rope.type == "default" || rope.type == "linear" || rope.type == "llama3",
       "unsupported rope_type '" + rope.type + "'; supported: default, linear, llama3");
  need(rope.theta > 0, "rope_theta must be positive");
  need(rope.factor > 0, "factor must be positive");
  if (rope.type == "llama3") {
    need(rope.original_max_positions > 0, "original_max_position_embeddings must be positive");
    need(rope.low_freq_factor > 0 && rope.high_freq_factor > rope.low_freq_factor,
         "llama3 needs 0 < low_freq_factor < high_freq_factor");
  }
}

namespace {
thread_local ConfigKeyRecorder* active_recorder = nullptr;
}  // namespace

ConfigKeyRecorder::ConfigKeyRecorder() : previous_(active_recorder) { active_recorder = this; }
ConfigKeyRecorder::~ConfigKeyRecorder() { active_recorder = previous_; }
void ConfigKeyRecorder::note(const std::string& key) {
  if (active_recorder) active_recorder->keys_.insert(key);
}

bool JsonFields::has(const std::string& key) const {
  ConfigKeyRecorder::note(prefix_ + key);
  return doc_.contains(key) && !doc_[key].is_null();
}

int64_t JsonFields::positive_int(const std::string& key) const {
  if (!has(key)) fail(key, "a required positive integer (missing)");
  return positive_int(key, 0);
}

int64_t JsonFields::positive_int(const std::string& key, int64_t fallback) const {
  if (!has(key)) return fallback;
  const auto& v = doc_[key];
  // Past 64 bits: an unsigned number above int64's range, or a whole number JSON could only hold
  // as a double (1e20). Too large, not "not an integer".
  const bool past_int64 =
      (v.is_number_unsigned() &&
       v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) ||
      (v.is_number_float() && v.get<double>() >= 9223372036854775808.0 &&
       std::isfinite(v.get<double>()) && std::floor(v.get<double>()) == v.get<double>());
  if (past_int64) {
    throw Error(source_ + ": key '" + prefix_ + key + "': too large (the most is " +
                std::to_string(std::numeric_limits<int64_t>::max()) + "), found " + v.dump());
  }
  if (!v.is_number_integer() || v.get<int64_t>() <= 0) fail(key, "a positive integer");
  return v.get<int64_t>();
}

double JsonFields::positive_number(const std::string& key, double fallback) const {
  const double v = number(key, fallback);
  if (!(v > 0)) fail(key, "a positive number");
  return v;
}

double JsonFields::number(const std::string& key, double fallback) const {
  if (!has(key)) return fallback;
  if (!doc_[key].is_number()) fail(key, "a number");
  return doc_[key].get<double>();
}

bool JsonFields::boolean(const std::string& key, bool fallback) const {
  if (!has(key)) return fallback;
  if (!doc_[key].is_boolean()) fail(key, "true or false");
  return doc_[key].get<bool>();
}

std::string JsonFields::string(const std::string& key, const std::string& fallback) const {
  if (!has(key)) return fallback;
  if (!doc_[key].is_string()) fail(key, "a string");
  return doc_[key].get<std::string>();
}

std::optional<int64_t> JsonFields::optional_token(const std::string& key) const {
  if (!has(key)) return std::nullopt;
  const auto& v = doc_[key];
  if (v.is_array() && v.size() == 1 && v[0].is_number_integer()) return v[0].get<int64_t>();
  if (!v.is_number_integer() || v.get<int64_t>() < 0) fail(key, "a non-negative token id");
  return v.get<int64_t>();
}

std::vector<int64_t> JsonFields::token_list(const std::string& key) const {
  if (!has(key)) return {};
  const auto& v = doc_[key];
  std::vector<int64_t> out;
  if (v.is_number_integer()) {
    out.push_back(v.get<int64_t>());
  } else if (v.is_array()) {
    for (const auto& x : v) {
      if (!x.is_number_integer()) fail(key, "a token id or a list of token ids");
      out.push_back(x.get<int64_t>());
    }
  } else {
    fail(key, "a token id or a list of token ids");
  }
  for (auto id : out) {
    if (id < 0) fail(key, "non-negative token ids");
  }
  return out;
}

void JsonFields::fail(const std::string& key, const std::string& expected) const {
  std::string found = has(key) ? doc_[key].dump() : "nothing";
  if (found.size() > 80) found = found.substr(0, 77) + "...";
  throw Error(source_ + ": key '" + prefix_ + key + "': expected " + expected + ", found " + found);
}

}  // namespace gengraph

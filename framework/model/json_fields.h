// Typed reads of config.json fields with errors that name the file, the key, what was expected and
// what was found. Used by every architecture's config parser.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace gengraph {

class JsonFields {
 public:
  // `prefix` names a nested object in errors ("rope_parameters." gives "rope_parameters.factor").
  JsonFields(const nlohmann::json& doc, std::string source, std::string prefix = "")
      : doc_(doc), source_(std::move(source)), prefix_(std::move(prefix)) {}

  // Every read goes through has(), which tells an active ConfigKeyRecorder the key.
  bool has(const std::string& key) const;
  int64_t positive_int(const std::string& key) const;
  int64_t positive_int(const std::string& key, int64_t fallback) const;
  double positive_number(const std::string& key, double fallback) const;
  double number(const std::string& key, double fallback) const;
  bool boolean(const std::string& key, bool fallback) const;
  std::string string(const std::string& key, const std::string& fallback) const;
  std::optional<int64_t> optional_token(const std::string& key) const;
  // An int or a list of ints (eos_token_id accepts both).
  std::vector<int64_t> token_list(const std::string& key) const;
  [[noreturn]] void fail(const std::string& key, const std::string& expected) const;

 private:
  const nlohmann::json& doc_;
  std::string source_;
  std::string prefix_;
};

// While one is alive (on this thread), records every config key a JsonFields looks up, with its
// prefix ("rope_parameters.factor"): what a config parser read, so that an override of a key no
// parser reads (a typo) can be refused instead of silently doing nothing.
class ConfigKeyRecorder {
 public:
  ConfigKeyRecorder();
  ~ConfigKeyRecorder();
  ConfigKeyRecorder(const ConfigKeyRecorder&) = delete;
  ConfigKeyRecorder& operator=(const ConfigKeyRecorder&) = delete;
  const std::set<std::string>& keys() const { return keys_; }
  static void note(const std::string& key);

 private:
  std::set<std::string> keys_;
  ConfigKeyRecorder* previous_;
};

}  // namespace gengraph

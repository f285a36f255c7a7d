// Typed reads of config.json fields with errors that name the file, the key, what was expected and
// what was found. Used by every architecture's config parser.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gengraph {

class JsonFields {
 public:
  // `prefix` names a nested object in errors ("rope_parameters." gives "rope_parameters.factor").
  JsonFields(const nlohmann::json& doc, std::string source, std::string prefix = "")
      : doc_(doc), source_(std::move(source)), prefix_(std::move(prefix)) {}

  bool has(const std::string& key) const { return doc_.contains(key) && !doc_[key].is_null(); }
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

}  // namespace gengraph

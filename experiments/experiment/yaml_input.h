// YAML documents read safely, for the experiment configuration: the text checked (UTF-8, no
// control characters YAML forbids), the parser dry-run with an event budget (yaml-cpp 0.7 loops on
// some malformed input), the structure walked once with depth and expansion budgets (aliases),
// --set overrides applied, and every error placed at file:line:col or at the override it came from;
// then its mappings read key by key (MapReader).
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace gengraph {

// The one document in `text` (an empty or null document gives an undefined node), checked as
// above; errors name `source`.
YAML::Node load_yaml(const std::string& text, const std::string& source);

// Applies "a.b.c=value" (a --set or a sweep point) onto the document, creating mappings on the
// way. The value is one YAML document, checked as load_yaml checks a file.
void apply_override(YAML::Node& root, const std::string& spec);

// While one is alive (on this thread), nodes that apply_override adds are remembered, so that
// where() names the override instead of a position in the file.
class OverrideScope {
 public:
  OverrideScope();
  ~OverrideScope();
  OverrideScope(const OverrideScope&) = delete;
  OverrideScope& operator=(const OverrideScope&) = delete;

 private:
  std::vector<std::pair<YAML::Node, std::string>> nodes_;
  std::vector<std::pair<YAML::Node, std::string>>* outer_;
};

// "file:line:col: " for a node (or "override 'k=v': " for one an override added).
std::string where(const std::string& file, const YAML::Node& node);

// "'text'", "a list", "a mapping" or "nothing", for error messages.
std::string describe(const YAML::Node& n);

// Typed, position-aware access to one YAML mapping (`path`: its key path, "" for the root; `file`
// for positions); unknown keys are errors with a suggestion.
class MapReader {
 public:
  MapReader(YAML::Node node, std::string path, std::string file);

  bool has(const std::string& key);
  YAML::Node child(const std::string& key);
  std::string key_path(const std::string& key) const {
    return path_.empty() ? key : path_ + "." + key;
  }
  // The key as an error names it: its position in the file (the mapping's, for a key it does not
  // hold) and its path.
  std::string located(const std::string& key);
  [[noreturn]] void fail(const std::string& key, const std::string& expected);

  template <typename T>
  T scalar(const std::string& key, T fallback, const std::string& expected) {
    if (!has(key)) return fallback;
    const YAML::Node n = child(key);
    if (!n.IsScalar()) fail(key, expected);
    try {
      return n.as<T>();
    } catch (const YAML::BadConversion&) {
      fail(key, expected);
    }
  }
  // "too large (the most is N)" for an integer above `max`, also one past 64 bits.
  [[noreturn]] void too_large(const std::string& key, const std::string& most);
  int64_t integer(const std::string& key, int64_t fallback, int64_t min, int64_t max);
  uint64_t seed(const std::string& key, uint64_t fallback);
  std::string choice(const std::string& key, const std::string& fallback,
                     const std::vector<std::string>& allowed);

  // Throws for keys not asked about.
  void finish();

 private:
  YAML::Node node_;
  std::string path_;
  std::string file_;
  std::set<std::string> known_;
};

// A YAML scalar/list/map as JSON: numbers, booleans and null keep their types.
nlohmann::json to_json(const YAML::Node& n);

// inputs.messages: a non-empty list of conversations, each a list of {role, content} messages
// (scalars read as text), checked as check_chat_messages checks them; an Error names the file,
// line and key path ("inputs.messages[1][0]: key 'role': ...").
std::vector<nlohmann::json> chat_conversations(const YAML::Node& n, const std::string& path,
                                               const std::string& file);

// A list of non-negative token ids at `path`, or an Error naming the item.
std::vector<int64_t> token_list(const YAML::Node& n, const std::string& path,
                                const std::string& file);

}  // namespace gengraph

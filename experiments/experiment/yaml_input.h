// YAML documents read safely, for the experiment configuration: the text checked (UTF-8, no
// control characters YAML forbids), the parser dry-run with an event budget (yaml-cpp 0.7 loops on
// some malformed input), the structure walked once with depth and expansion budgets (aliases),
// --set overrides applied, and every error placed at file:line:col or at the override it came from.
#pragma once

#include <yaml-cpp/yaml.h>

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

}  // namespace gengraph

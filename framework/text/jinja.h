// Chat templates rendered natively: the part of Jinja that chat templates use, evaluated as
// transformers' apply_chat_template evaluates it (jinja2 with trim_blocks and lstrip_blocks, the
// loop controls extension, its own tojson, raise_exception and strftime_now), so that chat needs
// no Python process. Anything outside that part is refused at parse time as Unsupported, naming
// the construct and its line: the caller then falls back to transformers (ChatRenderer) by name.
//
// The part rendered: text with {{ }}, {% %} and {# #} and their whitespace control (-); if / elif /
// else, for (tuple targets, an `if` filter, an else branch, the loop variable, break, continue),
// set (a name or a namespace's attribute), generation blocks (rendered as their body); literals
// (strings, numbers, booleans, none, lists, dicts), names, attributes, subscripts and slices,
// arithmetic (+ - * / // % **), ~, comparisons, in / not in, and / or / not, conditional
// expressions; the filters, tests, functions and string / dict methods listed in jinja.cpp.
// Values print as Python prints them (None, True, 1.0, ['a'], {'a': 1}).
//
// Rendering is bounded: at most Limits::max_steps evaluation steps, Limits::max_output characters
// and Limits::seconds, else Error naming the limit, so that a template that loops for ever is
// stopped.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

#include "framework/util/error.h"

namespace gengraph::jinja {

// A construct outside the rendered part ("filter 'wordwrap' (line 3)"); what() names the template.
class Unsupported : public Error {
 public:
  Unsupported(const std::string& source, const std::string& construct, int line)
      : Error(source + ": " + construct + " (line " + std::to_string(line) +
              ") is not rendered natively"),
        construct_(construct) {}
  const std::string& construct() const { return construct_; }

 private:
  std::string construct_;
};

// A rendering stopped by one of its Limits; what() names the template, the line and the limit.
class LimitPassed : public Error {
 public:
  enum class Kind { kSteps, kSeconds, kOutput };
  LimitPassed(Kind kind, const std::string& where, const std::string& reason)
      : Error(where + ": " + reason), kind_(kind), reason_(reason) {}
  Kind kind() const { return kind_; }
  // The limit alone: "ran past 30 s", "rendered more than N characters (the template's output)".
  const std::string& reason() const { return reason_; }

 private:
  Kind kind_;
  std::string reason_;
};

struct Limits {
  int64_t max_steps = 20'000'000;
  size_t max_output = size_t{16} << 20;  // characters (code points), as Python counts them
  int64_t seconds = 0;                   // wall-clock seconds of rendering; 0: no limit
};

struct Node;

class Template {
 public:
  // Parses `text`; `source` names it in errors ("'<folder>/chat_template.jinja'"). Throws
  // Unsupported for a construct outside the rendered part, Error for a syntax error (with line).
  Template(std::string_view text, std::string source);
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // Renders with `context` (a JSON object: messages, add_generation_prompt, bos_token, ...).
  // Throws Error: raise_exception's message, an undefined value used where Jinja refuses one, a
  // type error, or a limit passed; each names the template and the line.
  // Python's dicts keep their keys' order, which tojson and items() show: an ordered_json context
  // keeps it too (a json one renders its objects' keys sorted).
  std::string render(const nlohmann::ordered_json& context, const Limits& limits = {}) const;
  std::string render(const nlohmann::json& context, const Limits& limits = {}) const;

  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::unique_ptr<Node> root_;
};

}  // namespace gengraph::jinja

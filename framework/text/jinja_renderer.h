// The renderer of a parsed chat template (framework/text/jinja.h): statements, scopes and limits
// here; expressions and Python's printing in jinja_eval.cpp, calls, filters and tests in
// jinja_calls.cpp. Internal to those.
#pragma once

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "framework/text/jinja.h"
#include "framework/text/jinja_ast.h"

namespace gengraph::jinja::detail {

using Json = nlohmann::ordered_json;

// Python's printing and string handling, as the renderer needs them (jinja_eval.cpp).
std::string py_str(const Json& j);     // str(x): None, True, 1.0, ['a'], {'a': 1}
std::string py_repr(const Json& j);    // repr(x)
std::string type_name(const Json& j);  // Python's type name: 'str', 'NoneType', ...
std::vector<std::string> code_points(const std::string& s);  // one string per UTF-8 character
std::string py_float(double d);                              // repr(float)
// json.dumps(j, ensure_ascii=False, indent=indent (-1: None), sort_keys=sort_keys) into `out`.
void dumps(const Json& j, int indent, bool sort_keys, int level, std::string& out);
bool py_space(const std::string& code_point);  // str.isspace()
// str.strip / lstrip / rstrip, of `chars` (a string) or of whitespace (chars null or None).
std::string py_strip(const std::string& s, const Json* chars, bool left, bool right);
std::string ascii_case(std::string s, bool upper);  // lower() / upper() of ASCII letters
std::string title_case(const std::string& s, bool only_first);  // title() / capitalize()
std::vector<std::string> py_split(const std::string& s, const Json& sep, int64_t max);
std::string replace_all(std::string s, const std::string& a, const std::string& b, int64_t count);
bool py_eq(const Json& a, const Json& b);  // ==, with 1 == 1.0 == True
bool is_num(const Json& j);                // int, float or bool
double num(const Json& j);
bool is_int(const Json& j);  // int or bool
int64_t int_of(const Json& j);

struct Value {
  Json j;
  bool undefined = false;
  static Value undef() {
    Value v;
    v.undefined = true;
    return v;
  }
};

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
 public:
  Renderer(const std::string& source, const Limits& limits, const Json& context)
      : source_(source),
        limits_(limits),
        deadline_(std::chrono::steady_clock::now() + std::chrono::seconds(limits.seconds)) {
    scopes_.emplace_back();
    for (auto it = context.begin(); it != context.end(); ++it) scopes_[0][it.key()] = it.value();
  }

  std::string run(const Node& root) {
    exec(root);
    return std::move(out_);
  }

 private:
  [[noreturn]] void fail(int line, const std::string& what) const {
    throw Error(source_ + ": line " + std::to_string(line) + ": " + what);
  }

  [[noreturn]] void limit(LimitPassed::Kind kind, int line, const std::string& what) const {
    throw LimitPassed(kind, source_ + ": line " + std::to_string(line), what);
  }

  void step(int line) {
    if (++steps_ > limits_.max_steps) {
      limit(LimitPassed::Kind::kSteps, line,
            "passed " + std::to_string(limits_.max_steps) +
                " steps (a template that does not end is stopped)");
    }
    if (limits_.seconds > 0 && (steps_ & 4095) == 0 &&
        std::chrono::steady_clock::now() > deadline_) {
      limit(LimitPassed::Kind::kSeconds, line,
            "ran past " + std::to_string(limits_.seconds) + " s");
    }
  }

  // Characters as Python counts them (code points: bytes that do not continue a UTF-8 sequence).
  void emit(const std::string& s, int line) {
    out_ += s;
    for (const char c : s) out_chars_ += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    if (out_chars_ > limits_.max_output) {
      limit(LimitPassed::Kind::kOutput, line,
            "rendered more than " + std::to_string(limits_.max_output) +
                " characters (the template's output)");
    }
  }

  // Where a name's value is held (innermost scope first); null when it is undefined.
  const Json* lookup_ref(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      if (auto f = it->find(name); f != it->end()) return &f->second;
    }
    return nullptr;
  }

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      if (auto f = it->find(name); f != it->end()) return {f->second};
    }
    return Value::undef();
  }

  Flow exec(const Node& n) {
    step(n.line);
    switch (n.kind) {
      case Node::Kind::kBody:
        for (const auto& c : n.children) {
          const Flow f = exec(*c);
          if (f != Flow::kNormal) return f;
        }
        return Flow::kNormal;
      case Node::Kind::kText:
        emit(n.text, n.line);
        return Flow::kNormal;
      case Node::Kind::kOutput: {
        const Value v = eval(*n.expr);
        if (!v.undefined) emit(py_str(v.j), n.line);
        return Flow::kNormal;
      }
      case Node::Kind::kIf:
        for (size_t i = 0; i < n.conds.size(); ++i) {
          if (truthy(eval(*n.conds[i]))) return exec(*n.children[i]);
        }
        return n.else_body ? exec(*n.else_body) : Flow::kNormal;
      case Node::Kind::kFor:
        return exec_for(n);
      case Node::Kind::kSet: {
        Value v = eval(*n.expr);
        if (n.attr.empty()) {
          scopes_.back()[n.text] = v.j;
          return Flow::kNormal;
        }
        for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
          if (auto f = it->find(n.text); f != it->end()) {
            if (!f->second.is_object()) {
              fail(n.line, "cannot set attribute '" + n.attr + "' of '" + n.text +
                               "', which is not a namespace");
            }
            f->second[n.attr] = v.j;
            return Flow::kNormal;
          }
        }
        fail(n.line, "'" + n.text + "' is undefined");
      }
      case Node::Kind::kBreak:
        return Flow::kBreak;
      case Node::Kind::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  std::vector<Json> items_of(const Value& v, int line) {
    if (v.undefined) return {};
    const Json& j = v.j;
    std::vector<Json> out;
    if (j.is_array()) {
      for (const auto& x : j) out.push_back(x);
    } else if (j.is_object()) {
      for (auto it = j.begin(); it != j.end(); ++it) out.push_back(it.key());
    } else if (j.is_string()) {
      for (const auto& c : code_points(j.get_ref<const std::string&>())) out.push_back(c);
    } else {
      fail(line, "'" + type_name(j) + "' object is not iterable");
    }
    return out;
  }

  Flow exec_for(const Node& n) {
    std::vector<Json> items = items_of(eval(*n.expr), n.line);
    if (n.cond) {
      std::vector<Json> kept;
      for (auto& x : items) {
        scopes_.emplace_back();
        bind(n, x);
        if (truthy(eval(*n.cond))) kept.push_back(std::move(x));
        scopes_.pop_back();
      }
      items = std::move(kept);
    }
    if (items.empty()) return n.else_body ? exec(*n.else_body) : Flow::kNormal;
    const int64_t len = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < len; ++i) {
      scopes_.emplace_back();
      bind(n, items[i]);
      Json loop = {{"index", i + 1},      {"index0", i},
                   {"revindex", len - i}, {"revindex0", len - i - 1},
                   {"first", i == 0},     {"last", i == len - 1},
                   {"length", len}};
      if (i > 0) loop["previtem"] = items[i - 1];
      if (i + 1 < len) loop["nextitem"] = items[i + 1];
      scopes_.back()["loop"] = std::move(loop);
      const Flow f = exec(*n.children[0]);
      scopes_.pop_back();
      if (f == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  void bind(const Node& n, const Json& item) {
    if (n.targets.size() == 1) {
      scopes_.back()[n.targets[0]] = item;
      return;
    }
    if (!item.is_array() || item.size() != n.targets.size()) {
      fail(n.line, "cannot unpack " + type_name(item) + " into " +
                       std::to_string(n.targets.size()) + " loop variables");
    }
    for (size_t k = 0; k < n.targets.size(); ++k) scopes_.back()[n.targets[k]] = item[k];
  }

  static bool truthy(const Value& v) {
    if (v.undefined) return false;
    const Json& j = v.j;
    if (j.is_null()) return false;
    if (j.is_boolean()) return j.get<bool>();
    if (j.is_number_integer()) return j.get<int64_t>() != 0;
    if (j.is_number()) return j.get<double>() != 0.0;
    if (j.is_string()) return !j.get_ref<const std::string&>().empty();  // json's empty() is false
    if (j.is_array() || j.is_object()) return !j.empty();
    return true;
  }

  const Json& defined(const Value& v, int line, const std::string& what) const {
    if (v.undefined) fail(line, what + " of an undefined value");
    return v.j;
  }

  // obj: the value, or null for an undefined one. A name's value is passed where it is held in its
  // scope, so `messages[0]` reads one message without copying the whole list.
  Value attribute(const Json* obj, const std::string& name, int line) const {
    if (!obj) fail(line, "attribute '" + name + "' of an undefined value");
    const Json& j = *obj;
    if (j.is_object()) {
      if (auto it = j.find(name); it != j.end()) return {*it};
    }
    return Value::undef();
  }

  Value item(const Json* obj, const Json& key, int line) const {
    if (!obj) fail(line, "subscript of an undefined value");
    const Json& j = *obj;
    if (j.is_object() && key.is_string()) {
      if (auto it = j.find(key.get<std::string>()); it != j.end()) return {*it};
      return Value::undef();
    }
    if ((j.is_array() || j.is_string()) && (key.is_number_integer() || key.is_boolean())) {
      std::vector<std::string> cps;
      if (j.is_string()) cps = code_points(j.get_ref<const std::string&>());
      const int64_t size =
          j.is_array() ? static_cast<int64_t>(j.size()) : static_cast<int64_t>(cps.size());
      int64_t i = key.is_boolean() ? key.get<bool>() : key.get<int64_t>();
      if (i < 0) i += size;
      if (i < 0 || i >= size) return Value::undef();
      return {j.is_array() ? j[static_cast<size_t>(i)] : Json(cps[static_cast<size_t>(i)])};
    }
    return Value::undef();
  }

  Value eval(const Expr& e);
  Value call(const Expr& e);
  Value filter(const Expr& e);
  Value test(const Expr& e);
  Value binary(const Expr& e);
  Value slice(const Expr& e);
  Value apply_filter(const std::string& name, const Value& v, const std::vector<Json>& args,
                     const std::map<std::string, Json>& kw, int line);
  bool apply_test(const std::string& name, const Value& v, const std::vector<Json>& args, int line);

  const std::string& source_;
  Limits limits_;
  std::chrono::steady_clock::time_point deadline_;
  int64_t steps_ = 0;
  size_t out_chars_ = 0;
  std::string out_;
  std::vector<std::map<std::string, Json>> scopes_;
};

}  // namespace gengraph::jinja::detail

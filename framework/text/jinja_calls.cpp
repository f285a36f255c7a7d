// Calls in a chat template (framework/text/jinja.h): the global functions transformers gives
// templates (range, namespace, dict, raise_exception, strftime_now), Python's string and dict
// methods, and jinja2's filters and tests that jinja_names.h lists, with their semantics.
#include <algorithm>
#include <climits>
#include <cmath>
#include <ctime>

#include "framework/text/jinja_names.h"
#include "framework/text/jinja_renderer.h"

namespace gengraph::jinja::detail {
namespace {

const Json* arg(const std::vector<Json>& args, const std::map<std::string, Json>& kw, size_t i,
                const char* name) {
  if (i < args.size()) return &args[i];
  if (auto it = kw.find(name); it != kw.end()) return &it->second;
  return nullptr;
}

}  // namespace

Value Renderer::call(const Expr& e) {
  std::vector<Json> args;
  std::map<std::string, Json> kw;
  for (const auto& a : e.args) args.push_back(eval(*a).j);
  for (size_t i = 0; i < e.kw_names.size(); ++i) kw[e.kw_names[i]] = eval(*e.kw_args[i]).j;
  const auto need = [&](size_t lo, size_t hi, const std::string& what) {
    if (args.size() < lo || args.size() > hi) {
      fail(e.line, what + " takes " + std::to_string(lo) +
                       (hi != lo ? " to " + std::to_string(hi) : "") + " arguments, " +
                       std::to_string(args.size()) + " given");
    }
  };
  if (e.a->kind == Expr::Kind::kName) {
    const std::string& f = e.a->name;
    if (f == "raise_exception") {
      fail(e.line, "the template raised an error: " + (args.empty() ? "" : py_str(args[0])));
    }
    if (f == "namespace" || f == "dict") {
      Json o = Json::object();
      if (!args.empty() && args[0].is_object()) o = args[0];
      for (const auto& [k, v] : kw) o[k] = v;
      return {o};
    }
    if (f == "range") {
      need(1, 3, "range()");
      for (const auto& a : args)
        if (!is_int(a)) fail(e.line, "range() takes integers");
      const int64_t start = args.size() > 1 ? int_of(args[0]) : 0;
      const int64_t stop = args.size() > 1 ? int_of(args[1]) : int_of(args[0]);
      const int64_t st = args.size() > 2 ? int_of(args[2]) : 1;
      if (st == 0) fail(e.line, "range() step must not be zero");
      Json out = Json::array();
      // jinja2's sandbox refuses ranges of more than 100,000 items (MAX_RANGE).
      const double count = std::ceil((static_cast<double>(stop) - static_cast<double>(start)) /
                                     static_cast<double>(st));
      if (count > 100000) {
        fail(e.line, "range() of more than 100000 items (jinja2's sandbox refuses it)");
      }
      for (int64_t k = 0; k < static_cast<int64_t>(count); ++k) {
        step(e.line);
        out.push_back(start + k * st);
      }
      return {out};
    }
    if (f == "strftime_now") {
      need(1, 1, "strftime_now()");
      const std::time_t now = std::time(nullptr);
      std::tm tm{};
      localtime_r(&now, &tm);
      char buf[256];
      const size_t n = std::strftime(buf, sizeof buf, py_str(args[0]).c_str(), &tm);
      return {Json(std::string(buf, n))};
    }
    fail(e.line, "unknown function '" + f + "'");
  }
  // A method: e.a is obj.name.
  const std::string& m = e.a->name;
  const Value ov = eval(*e.a->a);
  const Json& o = defined(ov, e.line, "method '" + m + "'");
  if (o.is_string()) {
    const std::string& s = o.get_ref<const std::string&>();
    if (m == "strip" || m == "lstrip" || m == "rstrip") {
      need(0, 1, m + "()");
      const Json* chars = args.empty() || args[0].is_null() ? nullptr : &args[0];
      return {Json(py_strip(s, chars, m != "rstrip", m != "lstrip"))};
    }
    if (m == "startswith" || m == "endswith") {
      need(1, 1, m + "()");
      std::vector<std::string> opts;
      if (args[0].is_array()) {
        for (const auto& x : args[0]) opts.push_back(py_str(x));
      } else {
        opts.push_back(py_str(args[0]));
      }
      for (const auto& p : opts) {
        if (p.size() <= s.size() &&
            (m == "startswith" ? s.compare(0, p.size(), p) == 0
                               : s.compare(s.size() - p.size(), p.size(), p) == 0)) {
          return {Json(true)};
        }
      }
      return {Json(false)};
    }
    if (m == "split" || m == "rsplit") {
      const Json* sep = arg(args, kw, 0, "sep");
      const Json* max = arg(args, kw, 1, "maxsplit");
      const int64_t n = max ? int_of(*max) : -1;
      if (m == "rsplit" && n >= 0) fail(e.line, "rsplit() with maxsplit is not rendered natively");
      Json out = Json::array();
      for (auto& p : py_split(s, sep ? *sep : Json(), n)) out.push_back(p);
      return {out};
    }
    if (m == "lower" || m == "upper") return {Json(ascii_case(s, m == "upper"))};
    if (m == "title" || m == "capitalize") return {Json(title_case(s, m == "capitalize"))};
    if (m == "replace") {
      need(2, 3, "replace()");
      return {Json(replace_all(s, py_str(args[0]), py_str(args[1]),
                               args.size() > 2 ? int_of(args[2]) : -1))};
    }
    if (m == "count" || m == "find") {
      need(1, 1, m + "()");
      const std::string sub = py_str(args[0]);
      if (m == "find") {
        const size_t f = s.find(sub);
        return {Json(f == std::string::npos
                         ? int64_t{-1}
                         : static_cast<int64_t>(code_points(s.substr(0, f)).size()))};
      }
      int64_t n = 0;
      for (size_t p = s.find(sub); !sub.empty() && p != std::string::npos;
           p = s.find(sub, p + sub.size()))
        ++n;
      return {Json(n)};
    }
  }
  if (o.is_object()) {
    if (m == "items" || m == "keys" || m == "values") {
      Json out = Json::array();
      for (auto it = o.begin(); it != o.end(); ++it) {
        if (m == "items") out.push_back(Json::array({it.key(), it.value()}));
        if (m == "keys") out.push_back(it.key());
        if (m == "values") out.push_back(it.value());
      }
      return {out};
    }
    if (m == "get") {
      need(1, 2, "get()");
      if (args[0].is_string()) {
        if (auto it = o.find(args[0].get<std::string>()); it != o.end()) return {*it};
      }
      return {args.size() > 1 ? args[1] : Json()};
    }
  }
  fail(e.line, "'" + type_name(o) + "' object has no method '" + m + "'");
}

Value Renderer::filter(const Expr& e) {
  const Value v = eval(*e.a);
  std::vector<Json> args;
  std::map<std::string, Json> kw;
  for (const auto& a : e.args) args.push_back(eval(*a).j);
  for (size_t i = 0; i < e.kw_names.size(); ++i) kw[e.kw_names[i]] = eval(*e.kw_args[i]).j;
  return apply_filter(e.name, v, args, kw, e.line);
}

Value Renderer::apply_filter(const std::string& f, const Value& v, const std::vector<Json>& args,
                             const std::map<std::string, Json>& kw, int line) {
  if (f == "default" || f == "d") {
    const Json* fallback = arg(args, kw, 0, "default_value");
    const Json* boolean = arg(args, kw, 1, "boolean");
    const bool use = v.undefined || (boolean && truthy({*boolean}) && !truthy(v));
    if (use) return {fallback ? *fallback : Json("")};
    return v;
  }
  if (f == "length" || f == "count") {
    if (v.undefined) return {Json(0)};
    if (v.j.is_string())
      return {Json(static_cast<int64_t>(code_points(v.j.get<std::string>()).size()))};
    if (v.j.is_array() || v.j.is_object()) return {Json(static_cast<int64_t>(v.j.size()))};
    fail(line, "object of type '" + type_name(v.j) + "' has no len()");
  }
  if (f == "string") return {Json(v.undefined ? std::string() : py_str(v.j))};
  if (f == "safe") return v;
  if (f == "tojson") {
    const Json& j = defined(v, line, "filter 'tojson'");
    const Json* indent = arg(args, kw, 0, "indent");
    const Json* sort = kw.count("sort_keys") ? &kw.at("sort_keys") : nullptr;
    std::string out;
    dumps(j, indent && is_int(*indent) ? static_cast<int>(int_of(*indent)) : -1,
          sort && truthy({*sort}), 0, out);
    return {Json(out)};
  }
  const Json& j = defined(v, line, "filter '" + f + "'");
  if (f == "trim") {
    if (!j.is_string()) fail(line, "filter 'trim' of a '" + type_name(j) + "'");
    const Json* chars = arg(args, kw, 0, "chars");
    return {Json(
        py_strip(j.get<std::string>(), chars && !chars->is_null() ? chars : nullptr, true, true))};
  }
  if (f == "lower" || f == "upper") return {Json(ascii_case(py_str(j), f == "upper"))};
  if (f == "title" || f == "capitalize") return {Json(title_case(py_str(j), f == "capitalize"))};
  if (f == "first" || f == "last") {
    if (j.is_array())
      return j.empty() ? Value::undef() : Value{f == "first" ? j.front() : j.back()};
    if (j.is_string()) {
      const auto cps = code_points(j.get<std::string>());
      return cps.empty() ? Value::undef() : Value{Json(f == "first" ? cps.front() : cps.back())};
    }
    fail(line, "filter '" + f + "' of a '" + type_name(j) + "'");
  }
  if (f == "join") {
    const Json* sep = arg(args, kw, 0, "d");
    const Json* attr = arg(args, kw, 1, "attribute");
    std::string out;
    bool first = true;
    for (const auto& x : items_of(v, line)) {
      const Json y = attr ? attribute(&x, py_str(*attr), line).j : x;
      out += (first ? "" : (sep ? py_str(*sep) : "")) + py_str(y);
      first = false;
    }
    return {Json(out)};
  }
  if (f == "replace") {
    if (args.size() < 2) fail(line, "filter 'replace' takes the old and the new text");
    return {Json(replace_all(py_str(j), py_str(args[0]), py_str(args[1]),
                             args.size() > 2 ? int_of(args[2]) : -1))};
  }
  if (f == "list") {
    Json out = Json::array();
    for (auto& x : items_of(v, line)) out.push_back(std::move(x));
    return {out};
  }
  if (f == "items") {
    if (!j.is_object()) fail(line, "filter 'items' of a '" + type_name(j) + "'");
    Json out = Json::array();
    for (auto it = j.begin(); it != j.end(); ++it)
      out.push_back(Json::array({it.key(), it.value()}));
    return {out};
  }
  if (f == "int" || f == "float" || f == "abs") {
    if (f == "abs") {
      if (!is_num(j)) fail(line, "bad operand type for abs(): '" + type_name(j) + "'");
      if (is_int(j) && int_of(j) == INT64_MIN) fail(line, "an integer past 64 bits");
      return is_int(j) ? Value{Json(std::abs(int_of(j)))} : Value{Json(std::abs(num(j)))};
    }
    double d = 0;
    bool ok = is_num(j);
    if (ok) d = num(j);
    if (j.is_string()) {
      try {
        size_t used = 0;
        d = std::stod(j.get<std::string>(), &used);
        ok = used == j.get<std::string>().size();
      } catch (const std::exception&) {
        ok = false;
      }
    }
    if (!ok) return {args.empty() ? (f == "int" ? Json(0) : Json(0.0)) : args[0]};
    if (f == "int" && !(std::abs(d) < 9.2e18)) fail(line, "an integer past 64 bits");
    return f == "int" ? Value{Json(static_cast<int64_t>(d))} : Value{Json(d)};
  }
  if (f == "reverse") {
    if (j.is_string()) {
      auto cps = code_points(j.get<std::string>());
      std::string out;
      for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
      return {Json(out)};
    }
    Json out = Json::array();
    auto items = items_of(v, line);
    for (auto it = items.rbegin(); it != items.rend(); ++it) out.push_back(*it);
    return {out};
  }
  if (f == "selectattr" || f == "rejectattr") {
    if (args.empty()) fail(line, "filter '" + f + "' needs an attribute name");
    Json out = Json::array();
    for (const auto& x : items_of(v, line)) {
      const Value a = attribute(&x, py_str(args[0]), line);
      const bool pass = args.size() > 1
                            ? apply_test(py_str(args[1]), a, {args.begin() + 2, args.end()}, line)
                            : truthy(a);
      if (pass == (f == "selectattr")) out.push_back(x);
    }
    return {out};
  }
  if (f == "map") {
    Json out = Json::array();
    for (const auto& x : items_of(v, line)) {
      if (auto at = kw.find("attribute"); at != kw.end()) {
        Value a = attribute(&x, py_str(at->second), line);
        if (a.undefined && kw.count("default")) a = {kw.at("default")};
        out.push_back(a.j);
      } else if (!args.empty() && args[0].is_string() && args[0] != "map" &&
                 is_filter(args[0].get<std::string>())) {
        out.push_back(
            apply_filter(args[0].get<std::string>(), {x}, {args.begin() + 1, args.end()}, {}, line)
                .j);
      } else {
        fail(line, "filter 'map' needs attribute= or the name of a filter rendered natively");
      }
    }
    return {out};
  }
  fail(line, "filter '" + f + "' is not rendered natively");
}

Value Renderer::test(const Expr& e) {
  const Value v = eval(*e.a);
  std::vector<Json> args;
  for (const auto& a : e.args) args.push_back(eval(*a).j);
  const bool r = apply_test(e.name, v, args, e.line);
  return {Json(e.negated ? !r : r)};
}

bool Renderer::apply_test(const std::string& t, const Value& v, const std::vector<Json>& args,
                          int line) {
  if (t == "defined") return !v.undefined;
  if (t == "undefined") return v.undefined;
  if (v.undefined) {
    // jinja2 tests see an Undefined: it is none of the types, and comparisons refuse it.
    if (t == "none" || t == "string" || t == "number" || t == "integer" || t == "float" ||
        t == "mapping" || t == "boolean" || t == "true" || t == "false" || t == "callable") {
      return false;
    }
    if (t == "iterable") return true;
    fail(line, "test '" + t + "' of an undefined value");
  }
  const Json& j = v.j;
  const auto need_arg = [&]() -> const Json& {
    if (args.empty()) fail(line, "test '" + t + "' needs an argument");
    return args[0];
  };
  if (t == "none") return j.is_null();
  if (t == "string") return j.is_string();
  if (t == "number") return is_num(j);
  if (t == "integer") return j.is_number_integer();
  if (t == "float") return j.is_number_float();
  if (t == "boolean") return j.is_boolean();
  if (t == "true") return j.is_boolean() && j.get<bool>();
  if (t == "false") return j.is_boolean() && !j.get<bool>();
  if (t == "mapping") return j.is_object();
  if (t == "iterable") return j.is_array() || j.is_object() || j.is_string();
  if (t == "sequence") return j.is_array() || j.is_object() || j.is_string();
  if (t == "callable") return false;
  if (t == "lower" || t == "upper") {
    return j.is_string() && ascii_case(j.get<std::string>(), t == "upper") == j.get<std::string>();
  }
  if (t == "even" || t == "odd" || t == "divisibleby") {
    if (!is_int(j)) fail(line, "test '" + t + "' of a '" + type_name(j) + "'");
    const int64_t n = int_of(j);
    if (t == "even") return n % 2 == 0;
    if (t == "odd") return n % 2 != 0;
    const Json& d = need_arg();
    if (!is_int(d) || int_of(d) == 0) fail(line, "test 'divisibleby' needs a non-zero integer");
    return n % int_of(d) == 0;
  }
  if (t == "eq" || t == "equalto") return py_eq(j, need_arg());
  if (t == "ne") return !py_eq(j, need_arg());
  if (t == "sameas") {
    const Json& o = need_arg();
    return (j.is_null() && o.is_null()) || (j.is_boolean() && o.is_boolean() && j == o);
  }
  if (t == "in") {
    const Json& o = need_arg();
    if (o.is_array())
      return std::any_of(o.begin(), o.end(), [&](const Json& x) { return py_eq(x, j); });
    if (o.is_object()) return j.is_string() && o.contains(j.get<std::string>());
    if (o.is_string() && j.is_string())
      return o.get<std::string>().find(j.get<std::string>()) != std::string::npos;
    fail(line, "test 'in' needs a container");
  }
  if (t == "lt" || t == "gt" || t == "le" || t == "ge") {
    const Json& o = need_arg();
    if (!is_num(j) || !is_num(o)) fail(line, "test '" + t + "' compares numbers");
    const double a = num(j), b = num(o);
    return t == "lt" ? a < b : t == "gt" ? a > b : t == "le" ? a <= b : a >= b;
  }
  fail(line, "test '" + t + "' is not rendered natively");
}

}  // namespace gengraph::jinja::detail

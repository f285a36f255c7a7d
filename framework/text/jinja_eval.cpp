// Expressions of a chat template (framework/text/jinja.h): operators with Python's semantics,
// calls of the functions and methods jinja_names.h lists, filters and tests, and Python's
// printing of values (str, repr, float formatting) and transformers' tojson.
#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdint>
#include <ctime>

#include "framework/text/jinja_names.h"
#include "framework/text/jinja_renderer.h"

namespace gengraph::jinja::detail {

// Python's repr of a float: the shortest digits that read back, fixed notation for exponents
// -4..15, scientific (two-digit exponent at least) beyond; a whole number keeps ".0".
std::string py_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  std::string sign;
  if (mant[0] == '-') {
    sign = "-";
    mant.erase(0, 1);
  }
  std::string digits = mant;
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  if (exp < -4 || exp >= 16) {
    std::string m = digits.substr(0, 1);
    if (digits.size() > 1) m += "." + digits.substr(1);
    const std::string ex = std::to_string(std::abs(exp));
    return sign + m + "e" + (exp < 0 ? "-" : "+") + (ex.size() < 2 ? "0" : "") + ex;
  }
  std::string out;
  if (exp < 0) {
    out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  } else if (static_cast<int>(digits.size()) <= exp + 1) {
    out = digits + std::string(static_cast<size_t>(exp + 1) - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, static_cast<size_t>(exp + 1)) + "." + digits.substr(exp + 1);
  }
  return sign + out;
}

namespace {

std::string py_quote(const std::string& s) {
  const bool single = s.find('\'') == std::string::npos || s.find('"') != std::string::npos;
  const char q = single ? '\'' : '"';
  std::string out(1, q);
  for (const unsigned char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == static_cast<unsigned char>(q)) {
      out += std::string("\\") + q;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + q;
}

}  // namespace

// json.dumps(x, ensure_ascii=False, indent=indent, sort_keys=sort_keys) with Python's default
// separators (", " and ": "; "," at line ends when indenting).
void dumps(const Json& j, int indent, bool sort_keys, int level, std::string& out) {
  const auto newline = [&](int l) {
    if (indent >= 0) out += "\n" + std::string(static_cast<size_t>(indent * l), ' ');
  };
  const std::string comma = indent >= 0 ? "," : ", ";
  if (j.is_object()) {
    if (j.empty()) {
      out += "{}";
      return;
    }
    std::vector<std::string> keys;
    for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
    if (sort_keys) std::sort(keys.begin(), keys.end());
    out += "{";
    for (size_t i = 0; i < keys.size(); ++i) {
      if (i) out += comma;
      newline(level + 1);
      dumps(Json(keys[i]), indent, sort_keys, level + 1, out);
      out += ": ";
      dumps(j.at(keys[i]), indent, sort_keys, level + 1, out);
    }
    newline(level);
    out += "}";
  } else if (j.is_array()) {
    if (j.empty()) {
      out += "[]";
      return;
    }
    out += "[";
    for (size_t i = 0; i < j.size(); ++i) {
      if (i) out += comma;
      newline(level + 1);
      dumps(j[i], indent, sort_keys, level + 1, out);
    }
    newline(level);
    out += "]";
  } else if (j.is_string()) {
    out += '"';
    for (const unsigned char c : j.get_ref<const std::string&>()) {
      switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        case '\b':
          out += "\\b";
          break;
        case '\f':
          out += "\\f";
          break;
        default:
          if (c < 0x20) {
            char b[8];
            std::snprintf(b, sizeof b, "\\u%04x", c);
            out += b;
          } else {
            out += static_cast<char>(c);
          }
      }
    }
    out += '"';
  } else if (j.is_number_float()) {
    const double d = j.get<double>();
    out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity") : py_float(d);
  } else {
    out += j.dump();  // integers, true, false, null
  }
}

// Python's str.isspace() characters, for strip() without arguments.
bool py_space(const std::string& cp) {
  static const char* const k[] = {" ",
                                  "\t",
                                  "\n",
                                  "\v",
                                  "\f",
                                  "\r",
                                  "\x1c",
                                  "\x1d",
                                  "\x1e",
                                  "\x1f",
                                  "\xc2\x85",
                                  "\xc2\xa0",
                                  "\xe1\x9a\x80",
                                  "\xe2\x80\xa8",
                                  "\xe2\x80\xa9",
                                  "\xe2\x80\xaf",
                                  "\xe2\x81\x9f",
                                  "\xe3\x80\x80"};
  for (const char* s : k)
    if (cp == s) return true;
  // U+2000..U+200A
  return cp.size() == 3 && static_cast<unsigned char>(cp[0]) == 0xe2 &&
         static_cast<unsigned char>(cp[1]) == 0x80 && static_cast<unsigned char>(cp[2]) >= 0x80 &&
         static_cast<unsigned char>(cp[2]) <= 0x8a;
}

std::string py_strip(const std::string& s, const Json* chars, bool left, bool right) {
  const std::vector<std::string> cps = code_points(s);
  std::vector<std::string> set;
  if (chars && chars->is_string()) set = code_points(chars->get<std::string>());
  const auto strip_it = [&](const std::string& cp) {
    return chars && chars->is_string() ? std::find(set.begin(), set.end(), cp) != set.end()
                                       : py_space(cp);
  };
  size_t b = 0, e = cps.size();
  while (left && b < e && strip_it(cps[b])) ++b;
  while (right && e > b && strip_it(cps[e - 1])) --e;
  std::string out;
  for (size_t i = b; i < e; ++i) out += cps[i];
  return out;
}

std::string ascii_case(std::string s, bool upper) {
  for (char& c : s)
    c = static_cast<char>(upper ? std::toupper(static_cast<unsigned char>(c))
                                : std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string title_case(const std::string& s, bool only_first) {
  std::string out = ascii_case(s, false);
  bool start = true;
  for (char& c : out) {
    const bool alpha = std::isalpha(static_cast<unsigned char>(c)) != 0;
    if (alpha && start) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (only_first) return out;
    start = !alpha && !std::isdigit(static_cast<unsigned char>(c)) && c != '\'';
  }
  return out;
}

std::vector<std::string> py_split(const std::string& s, const Json& sep, int64_t max) {
  std::vector<std::string> out;
  if (sep.is_null()) {  // runs of whitespace, none at either end
    std::string cur;
    bool in = false;
    const auto cps = code_points(s);
    for (size_t i = 0; i < cps.size(); ++i) {
      if (py_space(cps[i])) {
        if (in && (max < 0 || static_cast<int64_t>(out.size()) < max)) {
          out.push_back(cur);
          cur.clear();
          in = false;
        } else if (in) {
          cur += cps[i];
        }
      } else {
        cur += cps[i];
        in = true;
      }
    }
    if (in) out.push_back(py_strip(cur, nullptr, false, true));
    return out;
  }
  const std::string d = sep.get<std::string>();
  if (d.empty()) throw Error("empty separator");
  size_t pos = 0;
  for (;;) {
    const size_t f = s.find(d, pos);
    if (f == std::string::npos || (max >= 0 && static_cast<int64_t>(out.size()) >= max)) break;
    out.push_back(s.substr(pos, f - pos));
    pos = f + d.size();
  }
  out.push_back(s.substr(pos));
  return out;
}

std::string replace_all(std::string s, const std::string& a, const std::string& b, int64_t count) {
  if (a.empty()) return s;
  size_t pos = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    pos = s.find(a, pos);
    if (pos == std::string::npos) break;
    s.replace(pos, a.size(), b);
    pos += b.size();
  }
  return s;
}

bool is_num(const Json& j) { return j.is_number() || j.is_boolean(); }
double num(const Json& j) { return j.is_boolean() ? (j.get<bool>() ? 1.0 : 0.0) : j.get<double>(); }
bool is_int(const Json& j) { return j.is_number_integer() || j.is_boolean(); }
int64_t int_of(const Json& j) {
  return j.is_boolean() ? (j.get<bool>() ? 1 : 0) : j.get<int64_t>();
}

bool py_eq(const Json& a, const Json& b) {
  if (is_num(a) && is_num(b)) return num(a) == num(b);
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!py_eq(a[i], b[i])) return false;
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (auto it = a.begin(); it != a.end(); ++it) {
      auto f = b.find(it.key());
      if (f == b.end() || !py_eq(it.value(), *f)) return false;
    }
    return true;
  }
  return a == b;
}

std::vector<std::string> code_points(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

std::string type_name(const Json& j) {
  if (j.is_null()) return "NoneType";
  if (j.is_boolean()) return "bool";
  if (j.is_number_integer()) return "int";
  if (j.is_number()) return "float";
  if (j.is_string()) return "str";
  if (j.is_array()) return "list";
  return "dict";
}

std::string py_repr(const Json& j) {
  if (j.is_string()) return py_quote(j.get<std::string>());
  return py_str(j);
}

std::string py_str(const Json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_null()) return "None";
  if (j.is_boolean()) return j.get<bool>() ? "True" : "False";
  if (j.is_number_float()) return py_float(j.get<double>());
  if (j.is_number()) return j.dump();
  std::string out;
  if (j.is_array()) {
    out = "[";
    for (size_t i = 0; i < j.size(); ++i) out += (i ? ", " : "") + py_repr(j[i]);
    return out + "]";
  }
  out = "{";
  bool first = true;
  for (auto it = j.begin(); it != j.end(); ++it) {
    out += (first ? "" : ", ") + py_quote(it.key()) + ": " + py_repr(it.value());
    first = false;
  }
  return out + "}";
}

Value Renderer::eval(const Expr& e) {
  step(e.line);
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return {Json(e.value)};
    case Expr::Kind::kName:
      return lookup(e.name);
    case Expr::Kind::kAttr:
      if (e.a->kind == Expr::Kind::kName) return attribute(lookup_ref(e.a->name), e.name, e.line);
      {
        const Value obj = eval(*e.a);
        return attribute(obj.undefined ? nullptr : &obj.j, e.name, e.line);
      }
    case Expr::Kind::kItem: {
      if (e.a->kind == Expr::Kind::kName) {
        const Json* obj = lookup_ref(e.a->name);
        return item(obj, eval(*e.args[0]).j, e.line);
      }
      const Value obj = eval(*e.a);
      return item(obj.undefined ? nullptr : &obj.j, eval(*e.args[0]).j, e.line);
    }
    case Expr::Kind::kSlice:
      return slice(e);
    case Expr::Kind::kCall:
      return call(e);
    case Expr::Kind::kFilter:
      return filter(e);
    case Expr::Kind::kTest:
      return test(e);
    case Expr::Kind::kUnary: {
      const Value v = eval(*e.a);
      if (e.name == "not") return {Json(!truthy(v))};
      const Json& j = defined(v, e.line, "unary " + e.name);
      if (!is_num(j))
        fail(e.line, "bad operand type for unary " + e.name + ": '" + type_name(j) + "'");
      if (e.name == "+") return {j};
      if (is_int(j) && int_of(j) == INT64_MIN) fail(e.line, "an integer past 64 bits");
      return is_int(j) ? Value{Json(-int_of(j))} : Value{Json(-num(j))};
    }
    case Expr::Kind::kBinary:
      return binary(e);
    case Expr::Kind::kCond:
      if (truthy(eval(*e.args[1]))) return eval(*e.args[0]);
      return e.args[2] ? eval(*e.args[2]) : Value::undef();
    case Expr::Kind::kList: {
      Json a = Json::array();
      for (const auto& x : e.args) a.push_back(eval(*x).j);
      return {a};
    }
    case Expr::Kind::kDict: {
      Json o = Json::object();
      for (size_t i = 0; i < e.keys.size(); ++i) {
        const Json k = eval(*e.keys[i]).j;
        o[k.is_string() ? k.get<std::string>() : py_str(k)] = eval(*e.args[i]).j;
      }
      return {o};
    }
  }
  return Value::undef();
}

Value Renderer::slice(const Expr& e) {
  const Value v = eval(*e.a);
  const Json& j = defined(v, e.line, "slice");
  std::vector<Json> items;
  if (j.is_array()) {
    for (const auto& x : j) items.push_back(x);
  } else if (j.is_string()) {
    for (auto& c : code_points(j.get<std::string>())) items.push_back(c);
  } else {
    fail(e.line, "'" + type_name(j) + "' object is not subscriptable");
  }
  const int64_t n = static_cast<int64_t>(items.size());
  const auto part = [&](int k) -> std::optional<int64_t> {
    if (!e.args[k]) return std::nullopt;
    const Json x = eval(*e.args[k]).j;
    if (x.is_null()) return std::nullopt;
    if (!is_int(x)) fail(e.line, "slice indices must be integers");
    return int_of(x);
  };
  const int64_t st = part(2).value_or(1);
  if (st == 0) fail(e.line, "slice step cannot be zero");
  auto clamp = [&](std::optional<int64_t> x, int64_t dflt) {
    if (!x) return dflt;
    int64_t i = *x < 0 ? *x + n : *x;
    return st > 0 ? std::clamp<int64_t>(i, 0, n) : std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t a = clamp(part(0), st > 0 ? 0 : n - 1), b = clamp(part(1), st > 0 ? n : -1);
  Json out = Json::array();
  std::string s;
  for (int64_t i = a; st > 0 ? i < b : i > b; i += st) {
    if (j.is_string()) {
      s += items[static_cast<size_t>(i)].get<std::string>();
    } else {
      out.push_back(items[static_cast<size_t>(i)]);
    }
  }
  return j.is_string() ? Value{Json(s)} : Value{out};
}

Value Renderer::binary(const Expr& e) {
  if (e.name == "and") {
    const Value a = eval(*e.a);
    return truthy(a) ? eval(*e.args[0]) : a;
  }
  if (e.name == "or") {
    const Value a = eval(*e.a);
    return truthy(a) ? a : eval(*e.args[0]);
  }
  const Value av = eval(*e.a), bv = eval(*e.args[0]);
  if (e.name == "~") {
    return {Json((av.undefined ? "" : py_str(av.j)) + (bv.undefined ? "" : py_str(bv.j)))};
  }
  if (e.name == "==" || e.name == "!=") {
    const bool eq = av.undefined || bv.undefined ? av.undefined == bv.undefined : py_eq(av.j, bv.j);
    return {Json(e.name == "==" ? eq : !eq)};
  }
  const Json& a = defined(av, e.line, "operator " + e.name);
  const Json& b = defined(bv, e.line, "operator " + e.name);
  const auto bad = [&]() -> Value {
    fail(e.line, "unsupported operand types for " + e.name + ": '" + type_name(a) + "' and '" +
                     type_name(b) + "'");
  };
  if (e.name == "in" || e.name == "not in") {
    bool in = false;
    if (b.is_string() && a.is_string()) {
      in = b.get<std::string>().find(a.get<std::string>()) != std::string::npos;
    } else if (b.is_array()) {
      in = std::any_of(b.begin(), b.end(), [&](const Json& x) { return py_eq(x, a); });
    } else if (b.is_object()) {
      in = a.is_string() && b.contains(a.get<std::string>());
    } else {
      fail(e.line, "argument of type '" + type_name(b) + "' is not iterable");
    }
    return {Json(e.name == "in" ? in : !in)};
  }
  if (e.name == "<" || e.name == ">" || e.name == "<=" || e.name == ">=") {
    int c;
    if (is_num(a) && is_num(b)) {
      c = num(a) < num(b) ? -1 : num(a) > num(b) ? 1 : 0;
    } else if (a.is_string() && b.is_string()) {
      c = a.get<std::string>().compare(b.get<std::string>());
    } else {
      fail(e.line, "'" + e.name + "' not supported between '" + type_name(a) + "' and '" +
                       type_name(b) + "'");
    }
    const bool r = e.name == "<" ? c < 0 : e.name == ">" ? c > 0 : e.name == "<=" ? c <= 0 : c >= 0;
    return {Json(r)};
  }
  const auto too_big = [&](const std::string& what) {
    limit(
        LimitPassed::Kind::kOutput, e.line,
        "rendered more than " + std::to_string(limits_.max_output) + " characters (" + what + ")");
  };
  const auto size_of = [](const Json& v) -> int64_t {
    if (v.is_string()) return static_cast<int64_t>(v.get_ref<const std::string&>().size());
    return v.is_array() ? static_cast<int64_t>(v.size()) : -1;
  };
  if (e.name == "+" && size_of(a) >= 0 && size_of(b) >= 0 &&
      static_cast<size_t>(size_of(a) + size_of(b)) > limits_.max_output) {
    too_big("a value of " + std::to_string(size_of(a)) + " + " + std::to_string(size_of(b)));
  }
  if (e.name == "+") {
    if (a.is_string() && b.is_string()) return {Json(a.get<std::string>() + b.get<std::string>())};
    if (a.is_array() && b.is_array()) {
      Json out = a;
      for (const auto& x : b) out.push_back(x);
      return {out};
    }
  }
  if (e.name == "*" && ((size_of(a) >= 0 && is_int(b)) || (is_int(a) && size_of(b) >= 0))) {
    const Json& seq = size_of(a) >= 0 ? a : b;
    const int64_t n = size_of(a) >= 0 ? int_of(b) : int_of(a);
    if (n > 0 && static_cast<double>(size_of(seq)) * static_cast<double>(n) >
                     static_cast<double>(limits_.max_output)) {
      too_big("a value of " + std::to_string(size_of(seq)) + " x " + std::to_string(n));
    }
    Json out = seq.is_string() ? Json(std::string()) : Json::array();
    for (int64_t i = 0; i < n; ++i) {
      if (seq.is_string()) {
        out.get_ref<std::string&>() += seq.get_ref<const std::string&>();
      } else {
        for (const auto& x : seq) out.push_back(x);
      }
    }
    return {out};
  }
  if (!is_num(a) || !is_num(b)) return bad();
  const bool ints = is_int(a) && is_int(b);
  const double x = num(a), y = num(b);
  // Python's integers do not overflow; past int64 the native renderer refuses.
  const auto checked = [&](bool overflowed, int64_t r) -> Value {
    if (overflowed)
      fail(e.line, "an integer past 64 bits (" + e.name + ") is not rendered natively");
    return {Json(r)};
  };
  const int64_t p = ints ? int_of(a) : 0, q = ints ? int_of(b) : 0;
  int64_t r = 0;
  if (e.name == "+")
    return ints ? checked(__builtin_add_overflow(p, q, &r), r) : Value{Json(x + y)};
  if (e.name == "-")
    return ints ? checked(__builtin_sub_overflow(p, q, &r), r) : Value{Json(x - y)};
  if (e.name == "*")
    return ints ? checked(__builtin_mul_overflow(p, q, &r), r) : Value{Json(x * y)};
  if (e.name == "/") {
    if (y == 0) fail(e.line, "division by zero");
    return {Json(x / y)};
  }
  if (e.name == "//" || e.name == "%") {
    if (y == 0) fail(e.line, "integer division or modulo by zero");
    if (ints) {
      if (p == INT64_MIN && q == -1) return checked(true, 0);
      int64_t d = p / q;
      if ((p % q != 0) && ((p < 0) != (q < 0))) --d;
      return {Json(e.name == "//" ? d : p - d * q)};
    }
    const double d = std::floor(x / y);
    return {Json(e.name == "//" ? d : x - d * y)};
  }
  if (e.name == "**") {
    if (ints && q >= 0) {
      int64_t acc = 1;
      for (int64_t i = 0; i < q && acc != 0 && !(acc == 1 && (p == 1 || p == 0) && i > 0); ++i) {
        if (__builtin_mul_overflow(acc, p, &acc)) return checked(true, 0);
      }
      return {Json(q == 0 ? int64_t{1} : acc)};
    }
    return {Json(std::pow(x, y))};
  }
  return bad();
}

}  // namespace gengraph::jinja::detail

namespace gengraph::jinja {

std::string Template::render(const nlohmann::ordered_json& context, const Limits& limits) const {
  if (!context.is_object()) throw Error(source_ + ": the context to render with is not an object");
  return detail::Renderer(source_, limits, context).run(*root_);
}

std::string Template::render(const nlohmann::json& context, const Limits& limits) const {
  return render(nlohmann::ordered_json::parse(context.dump()), limits);
}

}  // namespace gengraph::jinja

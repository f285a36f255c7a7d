#include "framework/util/json_at.h"

#include <algorithm>
#include <cstdio>

#include "framework/util/error.h"
#include "framework/util/strings.h"

namespace gengraph {

namespace {

// "an array of 1 entry", "an object of 3 keys"
std::string count_of(size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// `text` for messages: control characters (C0, DEL, C1) escaped, and with `quotes` quotes and
// backslashes too; cut after `max_bytes` on a character boundary ("...").
std::string escaped(const std::string& text, size_t max_bytes, bool quotes) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    const auto b = static_cast<unsigned char>(text[i]);
    // Cut at the first byte past the limit that starts a character.
    if (i >= max_bytes && (b & 0xC0) != 0x80) {
      out += "...";
      break;
    }
    unsigned control = 0x100;  // none
    if (b < 0x20 || b == 0x7f) {
      control = b;
    } else if (b == 0xc2 && i + 1 < text.size() &&
               static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
      control = static_cast<unsigned char>(text[++i]);  // a C1 control, U+0080 to U+009F
    }
    if (quotes && (b == '"' || b == '\\')) {
      out += '\\';
      out += text[i];
    } else if (control == '\n') {
      out += "\\n";
    } else if (control == '\r') {
      out += "\\r";
    } else if (control == '\t') {
      out += "\\t";
    } else if (control < 0x100) {
      out += "\\u00";
      out += kHex[control >> 4];
      out += kHex[control & 15];
    } else {
      out += text[i];
    }
  }
  return out;
}

// Where and why the parser refuses a text: a SAX reader that keeps nothing but its first error
// (the parser's own exceptions carry no place for a number out of range).
class ParseFailure final : public nlohmann::json_sax<nlohmann::json> {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::json::exception& e) override {
    found = true;
    byte = position;
    what = e.what();
    return false;
  }

  bool found = false;
  size_t byte = 0;  // the bytes the parser had read, the one it stopped at included
  std::string what;
};

// `text` with each byte that is not part of a well-formed UTF-8 character replaced by '?' (the
// parser quotes what it last read, which may be any bytes; a message must stay valid text).
std::string well_formed_utf8(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto b = static_cast<unsigned char>(text[i]);
    const size_t n = b < 0x80                 ? 1
                     : b >= 0xc2 && b <= 0xdf ? 2
                     : b >= 0xe0 && b <= 0xef ? 3
                     : b >= 0xf0 && b <= 0xf4 ? 4
                                              : 0;
    bool ok = n > 0 && i + n <= text.size();
    for (size_t k = 1; ok && k < n; ++k)
      ok = (static_cast<unsigned char>(text[i + k]) & 0xc0) == 0x80;
    if (ok && n == 3) {  // no overlong form, no surrogate
      const auto c = static_cast<unsigned char>(text[i + 1]);
      ok = !(b == 0xe0 && c < 0xa0) && !(b == 0xed && c >= 0xa0);
    }
    if (ok && n == 4) {  // no overlong form, nothing past U+10FFFF
      const auto c = static_cast<unsigned char>(text[i + 1]);
      ok = !(b == 0xf0 && c < 0x90) && !(b == 0xf4 && c >= 0x90);
    }
    if (ok) {
      out.append(text, i, n);
      i += n;
    } else {
      out += '?';
      ++i;
    }
  }
  return out;
}

// The parser's reason without its "[json.exception.parse_error.101] " and its own "parse error at
// line L, column C: " (the place is added as the other refusals have it).
std::string parser_reason(std::string what) {
  if (what.rfind("[json.exception.", 0) == 0) {
    const auto end = what.find("] ");
    if (end != std::string::npos) what.erase(0, end + 2);
  }
  if (what.rfind("parse error", 0) == 0) {
    const auto colon = what.find(": ");
    if (colon != std::string::npos) what.erase(0, colon + 2);
  }
  return escaped(well_formed_utf8(what), 200, false);
}

}  // namespace

JsonAt::JsonAt(const nlohmann::json& doc, std::string source)
    : JsonAt(&doc, std::make_shared<const std::string>(std::move(source)), "") {}

JsonAt::JsonAt(const nlohmann::json* value, std::shared_ptr<const std::string> source,
               std::string path)
    : value_(value), source_(std::move(source)), path_(std::move(path)) {}

JsonAt JsonAt::child(const nlohmann::json* value, std::string path) const {
  return JsonAt(value, source_, std::move(path));
}

std::string JsonAt::quoted(const std::string& text, size_t max_bytes) {
  return "\"" + escaped(text, max_bytes, true) + "\"";
}

std::string JsonAt::describe(const nlohmann::json& v) {
  if (v.is_string()) return "the string " + quoted(v.get_ref<const std::string&>());
  if (v.is_array()) return "an array of " + count_of(v.size(), "entry", "entries");
  if (v.is_object()) return "an object of " + count_of(v.size(), "key", "keys");
  if (v.is_null()) return "null";
  return v.dump();  // a number, true or false
}

std::string JsonAt::key_part() const { return path_.empty() ? "" : "key '" + path_ + "': "; }

void JsonAt::fail(const std::string& expected) const {
  throw Error(*source_ + ": " + key_part() + "expected " + expected + ", found " +
              (value_ ? describe(*value_) : std::string("nothing (the key is missing)")));
}

const nlohmann::json& JsonAt::json() const {
  if (!value_) fail("a value");
  return *value_;
}

const JsonAt& JsonAt::object(const std::string& expected) const {
  if (!value_ || !value_->is_object()) fail(expected);
  return *this;
}

bool JsonAt::has(const std::string& key) const {
  object();
  return value_->contains(key);
}

std::optional<JsonAt> JsonAt::find(const std::string& key) const {
  object();
  const auto it = value_->find(key);
  if (it == value_->end()) return std::nullopt;
  return child(&*it, path_.empty() ? key : path_ + "." + key);
}

JsonAt JsonAt::operator[](const std::string& key) const {
  object();
  const auto it = value_->find(key);
  return child(it == value_->end() ? nullptr : &*it, path_.empty() ? key : path_ + "." + key);
}

void JsonAt::only(const std::vector<std::string>& known) const {
  object();
  for (const auto& [key, value] : value_->items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    // The key is the file's own text: escaped and cut like any value.
    const std::string shown = quoted(key, 60);
    const std::string name = shown.substr(1, shown.size() - 2);
    throw Error(*source_ + ": unknown key '" + (path_.empty() ? name : path_ + "." + name) + "'" +
                did_you_mean(key, known) + "; expected only " + join(known, ", "));
  }
}

std::vector<JsonAt> JsonAt::items(size_t max_size, const std::string& expected) const {
  if (!value_ || !value_->is_array()) fail(expected);
  if (value_->size() > max_size)
    fail(expected + " (at most " + std::to_string(max_size) + " entries)");
  std::vector<JsonAt> out;
  out.reserve(value_->size());
  for (size_t i = 0; i < value_->size(); ++i)
    out.push_back(child(&(*value_)[i], path_ + "[" + std::to_string(i) + "]"));
  return out;
}

std::string JsonAt::string(const std::string& expected) const {
  if (!value_ || !value_->is_string()) fail(expected);
  return value_->get_ref<const std::string&>();
}

double JsonAt::number() const {
  if (!value_ || !value_->is_number()) fail("a number");
  return value_->get<double>();
}

int64_t JsonAt::integer() const {
  if (!value_ || !value_->is_number_integer() ||
      (value_->is_number_unsigned() && value_->get<uint64_t>() > uint64_t{INT64_MAX}))
    fail("an integer");
  return value_->get<int64_t>();
}

bool JsonAt::boolean() const {
  if (!value_ || !value_->is_boolean()) fail("true or false");
  return value_->get<bool>();
}

std::vector<std::string> JsonAt::strings(size_t max_size) const {
  std::vector<std::string> out;
  for (const auto& x : items(max_size, "an array of strings")) out.push_back(x.string());
  return out;
}

double JsonAt::number_in(double low, double high, const std::string& expected) const {
  if (!value_ || !value_->is_number()) fail(expected);
  const double x = value_->get<double>();
  if (!(x >= low && x <= high)) fail(expected);
  return x;
}

int64_t JsonAt::integer_in(int64_t low, int64_t high, const std::string& expected) const {
  const std::string what =
      expected.empty() ? "an integer from " + std::to_string(low) + " to " + std::to_string(high)
                       : expected;
  if (!value_ || !value_->is_number_integer()) fail(what);
  // A parsed non-negative integer is stored unsigned: compared as one, on both ends.
  const bool within = value_->is_number_unsigned()
                          ? high >= 0 && value_->get<uint64_t>() <= static_cast<uint64_t>(high) &&
                                (low <= 0 || value_->get<uint64_t>() >= static_cast<uint64_t>(low))
                          : value_->get<int64_t>() >= low && value_->get<int64_t>() <= high;
  if (!within) fail(what);
  return value_->get<int64_t>();
}

std::string JsonAt::text() const {
  const nlohmann::json& v = json();
  return v.is_string() ? v.get_ref<const std::string&>()
                       : v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string JsonAt::string_or(const std::string& key, const std::string& fallback) const {
  const auto v = find(key);
  return v ? v->string() : fallback;
}

double JsonAt::number_or(const std::string& key, double fallback) const {
  const auto v = find(key);
  return v ? v->number() : fallback;
}

int64_t JsonAt::integer_or(const std::string& key, int64_t fallback) const {
  const auto v = find(key);
  return v ? v->integer() : fallback;
}

bool JsonAt::boolean_or(const std::string& key, bool fallback) const {
  const auto v = find(key);
  return v ? v->boolean() : fallback;
}

nlohmann::json parse_json_text(std::string_view text, const std::string& source) {
  const char* const first = text.data();
  const char* const last = text.data() + text.size();
  std::string what;
  try {
    return nlohmann::json::parse(first, last);
  } catch (const nlohmann::json::exception& e) {  // parse errors and numbers out of range
    what = e.what();
  }
  ParseFailure failure;
  nlohmann::json::sax_parse(first, last, &failure);
  if (!failure.found) throw Error(source + " is not valid JSON: " + parser_reason(what));
  // Line and column as the parser counts them: a newline read starts the next line at column 0.
  const size_t read = std::min(failure.byte, text.size());
  const size_t newlines = static_cast<size_t>(std::count(first, first + read, '\n'));
  const size_t line_start = newlines == 0 ? 0 : text.rfind('\n', read - 1) + 1;
  throw Error(source + " is not valid JSON: " + parser_reason(failure.what) + " at line " +
              std::to_string(newlines + 1) + ", column " +
              std::to_string(failure.byte - line_start));
}

}  // namespace gengraph

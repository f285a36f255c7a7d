// The one typed reader of JSON documents that a user or a tool hands gengraph: results files
// (show, compare), a Slurm job folder's job.json and its parts, the output of the Python tools.
// Every refusal is a gengraph::Error of one form:
//   <source>: key '<key path>': expected <what>, found <what is there>
// e.g. "'r.json' is not a gengraph results file: key 'runs[1].timings.total_ms.median': expected
// a number, found the string \"fast\"" (the key part is left out for the document itself). What
// is there is described, never copied whole: "nothing (the key is missing)", "null", a number or
// true/false as written, "the string \"...\"" (control characters escaped, cut after 120 bytes),
// "an array of 3 entries", "an object of 2 keys".
// Readers go through it, never through operator[] on a const json (undefined behaviour for a
// missing key) nor get<T>() (json's own type_error texts, which name no file and no key).
// config.json has its own reader, of the same shape (framework/model/json_fields.h).
// Text becomes a document through parse_json_text, whose refusals name the source, the parser's
// reason and the place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gengraph {

class JsonAt {
 public:
  // `source` begins every error: the file ("'job.json'") or what it is ("'r.json' is not a
  // gengraph results file").
  JsonAt(const nlohmann::json& doc, std::string source);

  // The value; only when it exists (a missing key is refused, naming it).
  const nlohmann::json& json() const;
  bool exists() const { return value_ != nullptr; }
  // The key path ("points[1].runs[0].label"; "" for the document).
  const std::string& path() const { return path_; }

  // Refuses what is not an object; `expected` says what was wanted ("a gengraph job manifest").
  const JsonAt& object(const std::string& expected = "an object") const;
  // An object's members: has() and find() for optional ones, operator[] for one that must be
  // there (its absence is reported by the read that follows). All refuse what is not an object.
  bool has(const std::string& key) const;
  std::optional<JsonAt> find(const std::string& key) const;
  JsonAt operator[](const std::string& key) const;
  // Refuses an object with a key not in `known`: "<source>: unknown key '<path>' (did you mean
  // '...'?); expected only a, b, c".
  void only(const std::vector<std::string>& known) const;

  // An array's elements. Refuses what is not an array, and one of more than `max_size` entries
  // before it is walked; `expected` says what was wanted ("an array of points").
  std::vector<JsonAt> items(size_t max_size = std::numeric_limits<size_t>::max(),
                            const std::string& expected = "an array") const;

  std::string string(const std::string& expected = "a string") const;
  double number() const;
  int64_t integer() const;
  bool boolean() const;
  // An array of strings (of at most `max_size`); an element of another type is named by its index.
  std::vector<std::string> strings(size_t max_size = std::numeric_limits<size_t>::max()) const;
  // A number in [low, high]; `expected` describes the range in errors ("a number >= 0").
  double number_in(double low, double high, const std::string& expected) const;
  // An integer in [low, high]; `expected` describes it in errors (by default "an integer from LOW
  // to HIGH").
  int64_t integer_in(int64_t low, int64_t high, const std::string& expected = "") const;
  // Any value as display text: a string as it is, anything else as JSON.
  std::string text() const;

  // Optional members: the fallback when absent, refused when present with another type.
  std::string string_or(const std::string& key, const std::string& fallback) const;
  double number_or(const std::string& key, double fallback) const;
  int64_t integer_or(const std::string& key, int64_t fallback) const;
  bool boolean_or(const std::string& key, bool fallback) const;

  // "<source>: key '<path>': expected <expected>, found <what is there>"
  [[noreturn]] void fail(const std::string& expected) const;

  // A value for messages, as `fail` describes what it found.
  static std::string describe(const nlohmann::json& v);
  // `text` for messages in double quotes: quotes, backslashes and control characters (C0, DEL,
  // C1) escaped, cut after `max_bytes` on a character boundary ("..." inside the quotes).
  static std::string quoted(const std::string& text, size_t max_bytes = 120);

 private:
  JsonAt(const nlohmann::json* value, std::shared_ptr<const std::string> source, std::string path);
  JsonAt child(const nlohmann::json* value, std::string path) const;
  std::string key_part() const;

  const nlohmann::json* value_;  // null for a missing key
  std::shared_ptr<const std::string> source_;
  std::string path_;
};

// The JSON document `text`; what is not one is refused as
//   <source> is not valid JSON: <the parser's reason> at line L, column C
// e.g. "'job.json' is not valid JSON: number overflow parsing '1e999' at line 3, column 14": the
// reason in the parser's words without its "[json.exception...]" prefix, control characters
// escaped, cut after 200 bytes; L and C count from 1, C in bytes (0 before the first byte, as in an
// empty text). `source` is the file ("'job.json'") or the part of one ("trace file 'a.pt':
// gengraph.json"). A file's reader passes the text it read within its size limit (so
// read_json_file can be `return parse_json_text(read_regular_file(...), "'" + path.string() +
// "'");`).
nlohmann::json parse_json_text(std::string_view text, const std::string& source);

}  // namespace gengraph

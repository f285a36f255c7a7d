// The pipeline of the native tokenizer.json reader (framework/text/tokenizer_json.cpp): the
// normalizer, pre-tokenizer and decoder steps built from the file, and what they share:
// characters, patterns (PCRE2 for tokenizer.json's Oniguruma regular expressions) and the pieces a
// string is split into. The steps before the model are defined in tokenizer_pretokenize.cpp, the
// decoders in tokenizer_decoders.cpp. Internal to framework/text.
#pragma once

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "framework/text/tokenizer.h"
#include "framework/text/utf8.h"
#include "framework/util/error.h"
#include "framework/util/json_at.h"

namespace gengraph::tokenizer_detail {

using Offsets = std::pair<size_t, size_t>;
using Matches = std::vector<std::pair<Offsets, bool>>;  // covers the whole string, in order

[[noreturn]] void unsupported(const std::string& source, const std::string& what,
                              const std::string& type, const std::string& supported);

// Unicode White_Space (Rust's char::is_whitespace, the regex crate's \s): what lstrip/rstrip of
// added tokens and the Strip normalizer remove.
bool is_white_space(char32_t c);

// The regex crate's \w: Alphabetic, marks, decimal digits, connector punctuation, Join_Control.
bool is_word_char(char32_t c);

// Rust's char::is_numeric: general categories Nd, Nl, No.
bool is_numeric(char32_t c);

char32_t first_char(std::string_view s);

char32_t last_char(std::string_view s);

// Matches of a per-character predicate: each matching character is one match.
template <typename Pred>
Matches char_matches(std::string_view s, Pred pred) {
  Matches out;
  if (s.empty()) return {{{0, 0}, false}};
  size_t last = 0, i = 0;
  while (i < s.size()) {
    const size_t b = i;
    const char32_t c = utf8::next(s, i);
    if (pred(c)) {
      if (last < b) out.push_back({{last, b}, false});
      out.push_back({{b, i}, true});
      last = i;
    }
  }
  if (last < s.size()) out.push_back({{last, s.size()}, false});
  return out;
}

// --- patterns -------------------------------------------------------------------------------

// A tokenizer.json regular expression (written for Oniguruma) compiled by PCRE2. The classes whose
// meaning differs between the two engines are rewritten to Oniguruma's Unicode definitions:
// \s = U+0009-000D, U+0085 and the separators (Z); \d = Nd; \w = L, M, Nd, Pc; \h = a hex digit.
// A thread's PCRE2 match data, big enough for any of the patterns (they have few groups).
class MatchData {
 public:
  MatchData() : md_(pcre2_match_data_create(32, nullptr)) {}
  ~MatchData() { pcre2_match_data_free(md_); }
  MatchData(const MatchData&) = delete;
  MatchData& operator=(const MatchData&) = delete;
  pcre2_match_data* get() const { return md_; }

 private:
  pcre2_match_data* md_;
};

// PCRE2's limits for one search (one pcre2_match call, over every start position it tries), set
// here rather than left to the library's build: the steps of backtracking (its default, 10^7), the
// depth of nested backtracking points, and the interpreter's heap (in KiB; its default is 20 GB).
// A pattern that backtracks past them on a text (`(.*a){25}`) is refused, naming the step and the
// pattern.
inline constexpr uint32_t kRegexMatchLimit = 10000000;
inline constexpr uint32_t kRegexDepthLimit = 10000000;
inline constexpr uint32_t kRegexHeapLimitKiB = 1u << 20;
pcre2_match_context* regex_match_context();

class Regex {
 public:
  // `where` names the step in errors ("'<file>': pre_tokenizer.pretokenizers[1] (Split)").
  Regex(const std::string& pattern, const std::string& where) : pattern_(pattern), where_(where) {
    const std::string translated = translate(pattern, where);
    int code = 0;
    PCRE2_SIZE offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                          PCRE2_UTF | PCRE2_UCP, &code, &offset, nullptr);
    if (code_ == nullptr) {
      throw Error(where + ": the regular expression " + JsonAt::quoted(pattern) +
                  " does not compile: " + error_text(code));
    }
    jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
  }
  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Non-overlapping matches from the left, as Oniguruma's find_iter gives them (an empty match
  // right after the previous match is skipped by one character).
  std::vector<Offsets> find_all(std::string_view s) const {
    std::vector<Offsets> out;
    for_each(s, [&](size_t start, size_t end) { out.push_back({start, end}); });
    return out;
  }

  // Calls fn(start, end) for each match, in order (find_all without the vector).
  template <typename Fn>
  void for_each(std::string_view s, Fn&& fn) const {
    thread_local MatchData md_holder;
    pcre2_match_data* md = md_holder.get();
    pcre2_match_context* context = regex_match_context();
    size_t pos = 0;
    std::optional<size_t> last_match_end;
    while (pos <= s.size()) {
      const auto subject = reinterpret_cast<PCRE2_SPTR>(s.data());
      int rc = jit_ ? pcre2_jit_match(code_, subject, s.size(), pos, 0, md, context)
                    : PCRE2_ERROR_JIT_STACKLIMIT;
      // The interpreter when there is no JIT code, or when the JIT's stack is too small for this
      // text (a very long run of one class). PCRE2_NO_JIT: pcre2_match would run the JIT code
      // again otherwise.
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
        rc = pcre2_match(code_, subject, s.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md,
                         context);
      }
      if (rc < 0) {
        if (rc == PCRE2_ERROR_NOMATCH) break;
        match_failed(rc, s.size(), pos);
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      const size_t start = ov[0], end = ov[1];
      if (start == end && last_match_end && *last_match_end == end) {
        if (pos >= s.size()) break;
        pos += utf8::char_length(static_cast<unsigned char>(s[pos]));
        continue;
      }
      pos = end;
      last_match_end = end;
      fn(start, end);
      if (start == end && pos >= s.size()) break;
    }
  }

 private:
  static std::string error_text(int code) {
    PCRE2_UCHAR buffer[256];
    if (pcre2_get_error_message(code, buffer, sizeof buffer) < 0) {
      return "PCRE2 error " + std::to_string(code);
    }
    return reinterpret_cast<const char*>(buffer);
  }
  [[noreturn]] void match_failed(int rc, size_t length, size_t pos) const;

  static std::string translate(const std::string& p, const std::string& where) {
    static const std::string space = "\\t\\n\\x{0B}\\f\\r\\x{85}\\p{Z}";
    static const std::string word = "\\p{L}\\p{M}\\p{Nd}\\p{Pc}";
    std::string out;
    bool in_class = false;
    for (size_t i = 0; i < p.size(); ++i) {
      const char c = p[i];
      if (c == '\\' && i + 1 < p.size()) {
        const char e = p[++i];
        auto refuse = [&] {
          throw Error(std::string(kUnsupportedTokenizer) + where + ": the regular expression " +
                      JsonAt::quoted(p) + " uses \\" + e +
                      " inside a character class, which is not supported natively");
        };
        switch (e) {
          case 's':
            out += in_class ? space : "[" + space + "]";
            break;
          case 'S':
            if (in_class) refuse();
            out += "[^" + space + "]";
            break;
          case 'd':
            out += "\\p{Nd}";
            break;
          case 'D':
            out += "\\P{Nd}";
            break;
          case 'w':
            out += in_class ? word : "[" + word + "]";
            break;
          case 'W':
            if (in_class) refuse();
            out += "[^" + word + "]";
            break;
          case 'h':
            out += in_class ? "0-9a-fA-F" : "[0-9a-fA-F]";
            break;
          case 'H':
            if (in_class) refuse();
            out += "[^0-9a-fA-F]";
            break;
          default:
            out += '\\';
            out += e;
        }
        continue;
      }
      if (in_class) {
        if (c == '[' || (c == '&' && i + 1 < p.size() && p[i + 1] == '&')) {
          throw Error(std::string(kUnsupportedTokenizer) + where + ": the regular expression " +
                      JsonAt::quoted(p) +
                      " nests character classes, which is not supported natively");
        }
        if (c == ']') in_class = false;
        out += c;
        continue;
      }
      if (c == '[') {
        in_class = true;
        out += c;
        // A ']' right after '[' or '[^' is a literal member.
        if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
        if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
        continue;
      }
      if (c == '^' || c == '$') {
        throw Error(std::string(kUnsupportedTokenizer) + where + ": the regular expression " +
                    JsonAt::quoted(p) + " uses the anchor '" + c +
                    "', whose meaning differs between regex engines");
      }
      out += c;
    }
    return out;
  }

  std::string pattern_, where_;
  pcre2_code* code_ = nullptr;
  bool jit_ = false;
};

// A Split or Replace pattern: {"String": "..."} (literal) or {"Regex": "..."}. The library compiles
// a String as the regular expression of its escaped text, so the empty String is the empty
// expression: an empty match before every character and at the end (Split then cuts the text
// into characters; Replace puts its content between them).
class Pattern {
 public:
  Pattern(const JsonAt& j, const std::string& where) {
    j.object("an object {\"String\": ...} or {\"Regex\": ...}");
    if (j.has("String")) {
      literal_ = j["String"].string();
      if (literal_.empty()) regex_ = std::make_shared<Regex>("", where);
    } else if (j.has("Regex")) {
      regex_ = std::make_shared<Regex>(j["Regex"].string(), where);
    } else {
      j.fail("an object {\"String\": ...} or {\"Regex\": ...}");
    }
  }
  Matches find(std::string_view s) const {
    Matches out;
    if (s.empty()) return {{{0, 0}, false}};
    std::vector<Offsets> found;
    if (regex_) {
      found = regex_->find_all(s);
    } else {
      size_t at = 0;
      while ((at = s.find(literal_, at)) != std::string_view::npos) {
        found.push_back({at, at + literal_.size()});
        at += literal_.size();
      }
    }
    size_t prev = 0;
    for (const auto& [start, end] : found) {
      if (prev != start) out.push_back({{prev, start}, false});
      out.push_back({{start, end}, true});
      prev = end;
    }
    if (prev != s.size()) out.push_back({{prev, s.size()}, false});
    return out;
  }

 private:
  std::string literal_;
  std::shared_ptr<Regex> regex_;
};

struct Piece {
  std::string text;
  int64_t id = -1;         // an added token's id, or -1 for text still to tokenize
  bool at_origin = false;  // starts at offset 0 of the input (Metaspace's prepend_scheme "first")
};

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// The pieces of `s` that NormalizedString::split keeps for `matches` and `behavior`.
std::vector<Offsets> split_offsets(Matches matches, Behavior behavior);

// Replaces `piece` by its parts at `offsets` (empty parts dropped, as PreTokenizedString does).
void emit_parts(const Piece& piece, const std::vector<Offsets>& offsets, std::vector<Piece>& out);

Matches invert(Matches m);

// The most a normalizer, pre-tokenizer or Replace decoder may make of a text: 16 times its bytes,
// or its bytes + 4096, whichever is more. Real steps stay far below (ByteLevel doubles at most,
// Metaspace triples a space, NFKD's widest expansion is 18 characters from one); a step past it
// (a Replace of one character by 20,000) is refused, naming it, before its output is built.
// A bound covers one encode (or decode) call: the pieces of the text share it (`used`).
inline constexpr size_t kStepGrowth = 16;
inline constexpr size_t kStepSlack = 4096;
struct OutputBound {
  explicit OutputBound(size_t input_bytes)
      : input(input_bytes), max(std::max(input_bytes * kStepGrowth, input_bytes + kStepSlack)) {}
  size_t input, max;
  size_t used = 0;  // bytes already made by earlier pieces
  // Refuses `bytes` more, naming `step`.
  void check(size_t bytes, const std::string& step) const {
    if (used > max || bytes > max - used) refuse(step);
  }
  [[noreturn]] void refuse(const std::string& step) const;
};

// The name of a step in errors: "'<file>': pre_tokenizer.pretokenizers[1] (Split)".
std::string step_name(const std::string& source, const JsonAt& j, const std::string& type);

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Normalizes `s`, refusing (through `bound`) an output past it.
  virtual void normalize(std::string& s, const OutputBound& bound) const = 0;
};

// Replaces every match of a pattern by a string (the Replace normalizer and decoder).
class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(Pattern p, std::string c, std::string step)
      : pattern(std::move(p)), content(std::move(c)), step_(std::move(step)) {}
  Pattern pattern;
  std::string content;
  std::string apply(std::string_view s, const OutputBound& bound) const {
    std::string out;
    for (const auto& [off, is_match] : pattern.find(s)) {
      if (is_match)
        out += content;
      else
        out.append(s.substr(off.first, off.second - off.first));
      bound.check(out.size(), step_);
    }
    return out;
  }
  void normalize(std::string& s, const OutputBound& bound) const override { s = apply(s, bound); }

 private:
  std::string step_;
};

std::unique_ptr<Normalizer> make_normalizer(const JsonAt& j, const std::string& source);

// GPT-2's byte-to-character table: printable bytes map to themselves, the rest to U+0100 onwards.
struct ByteLevelTables {
  std::array<std::string, 256> byte_to_text;
  std::unordered_map<char32_t, uint8_t> char_to_byte;
  ByteLevelTables() {
    std::vector<int> bs;
    for (int b = '!'; b <= '~'; ++b) bs.push_back(b);
    for (int b = 0xA1; b <= 0xAC; ++b) bs.push_back(b);
    for (int b = 0xAE; b <= 0xFF; ++b) bs.push_back(b);
    std::vector<char32_t> cs(bs.begin(), bs.end());
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      if (std::find(bs.begin(), bs.end(), b) == bs.end()) {
        bs.push_back(b);
        cs.push_back(static_cast<char32_t>(256 + n++));
      }
    }
    for (size_t k = 0; k < bs.size(); ++k) {
      utf8::append(byte_to_text[bs[k]], cs[k]);
      char_to_byte[cs[k]] = static_cast<uint8_t>(bs[k]);
    }
  }
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits (and may rewrite) each piece; empty pieces are dropped. The pieces' bytes after it
  // must stay within `bound`.
  virtual void apply(std::vector<Piece>& pieces, const OutputBound& bound) const = 0;
};

size_t total_bytes(const std::vector<Piece>& pieces);

enum class PrependScheme { Always, First, Never };

const ByteLevelTables& byte_level();

char32_t single_char(const JsonAt& j);

PrependScheme prepend_scheme(const JsonAt& j);

Behavior behavior_of(const JsonAt& j);

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonAt& j, const std::string& source);

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual std::vector<std::string> chain(std::vector<std::string> tokens) const = 0;
};

// The byte a "<0xXX>" token stands for, as the library parses it (u8::from_str_radix).
std::optional<uint8_t> byte_token(const std::string& t);

std::unique_ptr<Decoder> make_decoder(const JsonAt& j, const std::string& source);

// A tokenizer from a tokenizer.json document already in memory (tokenizer_gguf.cpp builds one from
// a GGUF file's metadata); `name` is what errors and describe() call it.
std::unique_ptr<Tokenizer> load_tokenizer_json_document(const nlohmann::json& doc,
                                                        const std::string& name);

}  // namespace gengraph::tokenizer_detail

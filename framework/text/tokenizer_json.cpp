// tokenizer.json, natively. The pipeline and each component follow the `tokenizers` library's
// definitions (added-token extraction, normalizer, pre-tokenizer, BPE model, post-processor;
// decoder chain for the way back); tests/framework/text checks the result token for token against
// the library on a corpus of 12,000 lines per tokenizer family.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <queue>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "framework/text/tokenizer.h"
#include "framework/text/utf8.h"
#include "framework/util/error.h"
#include "framework/util/json_at.h"

namespace gengraph {
namespace {

using Offsets = std::pair<size_t, size_t>;
using Matches = std::vector<std::pair<Offsets, bool>>;  // covers the whole string, in order

[[noreturn]] void unsupported(const std::string& source, const std::string& what,
                              const std::string& type, const std::string& supported) {
  throw Error(std::string(kUnsupportedTokenizer) + source + ": " + what + " '" + type +
              "' is not supported natively (supported: " + supported + ")");
}

// --- characters -----------------------------------------------------------------------------

// Unicode White_Space (Rust's char::is_whitespace, the regex crate's \s): what lstrip/rstrip of
// added tokens and the Strip normalizer remove.
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// The regex crate's \w: Alphabetic, marks, decimal digits, connector punctuation, Join_Control.
bool is_word_char(char32_t c) {
  const auto cp = static_cast<UChar32>(c);
  if (u_hasBinaryProperty(cp, UCHAR_ALPHABETIC) || u_hasBinaryProperty(cp, UCHAR_JOIN_CONTROL)) {
    return true;
  }
  const int32_t mask = U_GET_GC_MASK(cp);
  return (mask & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) != 0;
}

// Rust's char::is_numeric: general categories Nd, Nl, No.
bool is_numeric(char32_t c) { return (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_N_MASK) != 0; }

char32_t first_char(std::string_view s) {
  size_t i = 0;
  return utf8::next(s, i);
}
char32_t last_char(std::string_view s) {
  size_t i = s.size();
  while (i > 0 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) --i;
  if (i > 0) --i;
  size_t j = i;
  return utf8::next(s, j);
}

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

class Regex {
 public:
  Regex(const std::string& pattern, const std::string& where) {
    const std::string translated = translate(pattern, where);
    int code = 0;
    PCRE2_SIZE offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                          PCRE2_UTF | PCRE2_UCP, &code, &offset, nullptr);
    if (code_ == nullptr) {
      PCRE2_UCHAR buffer[256];
      pcre2_get_error_message(code, buffer, sizeof buffer);
      throw Error(where + ": the regular expression " + JsonAt::quoted(pattern) +
                  " does not compile: " + reinterpret_cast<const char*>(buffer));
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
    size_t pos = 0;
    std::optional<size_t> last_match_end;
    while (pos <= s.size()) {
      const auto subject = reinterpret_cast<PCRE2_SPTR>(s.data());
      int rc = jit_ ? pcre2_jit_match(code_, subject, s.size(), pos, 0, md, nullptr)
                    : PCRE2_ERROR_JIT_STACKLIMIT;
      // The interpreter when there is no JIT code, or when the JIT's stack is too small for this
      // text (a very long run of one class).
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
        rc = pcre2_match(code_, subject, s.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
      }
      if (rc < 0) {
        if (rc == PCRE2_ERROR_NOMATCH) break;
        throw Error("tokenizer regular expression: matching failed (PCRE2 error " +
                    std::to_string(rc) + ")");
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

  pcre2_code* code_ = nullptr;
  bool jit_ = false;
};

// A Split or Replace pattern: {"String": "..."} (literal) or {"Regex": "..."}.
class Pattern {
 public:
  Pattern(const JsonAt& j, const std::string& where) {
    j.object("an object {\"String\": ...} or {\"Regex\": ...}");
    if (j.has("String")) {
      literal_ = j["String"].string();
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
    } else if (literal_.empty()) {
      return {{{0, s.size()}, false}};
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

// --- the string being tokenized ------------------------------------------------------------

struct Piece {
  std::string text;
  int64_t id = -1;         // an added token's id, or -1 for text still to tokenize
  bool at_origin = false;  // starts at offset 0 of the input (Metaspace's prepend_scheme "first")
};

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// The pieces of `s` that NormalizedString::split keeps for `matches` and `behavior`.
std::vector<Offsets> split_offsets(Matches matches, Behavior behavior) {
  std::vector<std::pair<Offsets, bool>> splits;  // (offsets, remove)
  switch (behavior) {
    case Behavior::Isolated:
      for (auto& m : matches) splits.push_back({m.first, false});
      break;
    case Behavior::Removed:
      splits = matches;
      break;
    case Behavior::Contiguous: {
      bool previous = false;
      for (auto& [off, is_match] : matches) {
        if (is_match == previous && !splits.empty()) {
          splits.back().first.second = off.second;
        } else {
          splits.push_back({off, false});
        }
        previous = is_match;
      }
      break;
    }
    case Behavior::MergedWithPrevious: {
      bool previous = false;
      for (auto& [off, is_match] : matches) {
        if (is_match && !previous && !splits.empty()) {
          splits.back().first.second = off.second;
        } else {
          splits.push_back({off, false});
        }
        previous = is_match;
      }
      break;
    }
    case Behavior::MergedWithNext: {
      bool previous = false;
      for (auto it = matches.rbegin(); it != matches.rend(); ++it) {
        if (it->second && !previous && !splits.empty()) {
          splits.back().first.first = it->first.first;
        } else {
          splits.push_back({it->first, false});
        }
        previous = it->second;
      }
      std::reverse(splits.begin(), splits.end());
      break;
    }
  }
  std::vector<Offsets> out;
  for (auto& [off, remove] : splits) {
    if (!remove) out.push_back(off);
  }
  return out;
}

// Replaces `piece` by its parts at `offsets` (empty parts dropped, as PreTokenizedString does).
void emit_parts(const Piece& piece, const std::vector<Offsets>& offsets, std::vector<Piece>& out) {
  for (const auto& [start, end] : offsets) {
    if (end <= start) continue;
    out.push_back({piece.text.substr(start, end - start), -1, piece.at_origin && start == 0});
  }
}

Matches invert(Matches m) {
  for (auto& x : m) x.second = !x.second;
  return m;
}

// --- normalizers ----------------------------------------------------------------------------

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& s) const = 0;
};

class SequenceNormalizer : public Normalizer {
 public:
  std::vector<std::unique_ptr<Normalizer>> parts;
  void normalize(std::string& s) const override {
    for (const auto& p : parts) p->normalize(s);
  }
};

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(const std::string& form) {
    UErrorCode status = U_ZERO_ERROR;
    if (form == "NFC")
      n_ = icu::Normalizer2::getNFCInstance(status);
    else if (form == "NFD")
      n_ = icu::Normalizer2::getNFDInstance(status);
    else if (form == "NFKC")
      n_ = icu::Normalizer2::getNFKCInstance(status);
    else
      n_ = icu::Normalizer2::getNFKDInstance(status);
    if (U_FAILURE(status))
      throw Error("ICU: no " + form + " normaliser (" + u_errorName(status) + ")");
  }
  void normalize(std::string& s) const override {
    UErrorCode status = U_ZERO_ERROR;
    if (n_->isNormalized(icu::UnicodeString::fromUTF8(s), status) && U_SUCCESS(status)) return;
    status = U_ZERO_ERROR;
    const icu::UnicodeString out = n_->normalize(icu::UnicodeString::fromUTF8(s), status);
    if (U_FAILURE(status))
      throw Error(std::string("ICU normalisation failed: ") + u_errorName(status));
    s.clear();
    out.toUTF8String(s);
  }

 private:
  const icu::Normalizer2* n_ = nullptr;
};

class LowercaseNormalizer : public Normalizer {
 public:
  void normalize(std::string& s) const override {
    icu::UnicodeString u = icu::UnicodeString::fromUTF8(s);
    u.toLower(icu::Locale::getRoot());
    s.clear();
    u.toUTF8String(s);
  }
};

class PrependNormalizer : public Normalizer {
 public:
  std::string prepend;
  void normalize(std::string& s) const override {
    if (!s.empty()) s.insert(0, prepend);
  }
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(Pattern p, std::string c) : pattern(std::move(p)), content(std::move(c)) {}
  Pattern pattern;
  std::string content;
  std::string apply(std::string_view s) const {
    std::string out;
    for (const auto& [off, is_match] : pattern.find(s)) {
      if (is_match)
        out += content;
      else
        out.append(s.substr(off.first, off.second - off.first));
    }
    return out;
  }
  void normalize(std::string& s) const override { s = apply(s); }
};

class StripNormalizer : public Normalizer {
 public:
  bool left = false, right = false;
  void normalize(std::string& s) const override {
    if (right) {
      while (!s.empty() && is_white_space(last_char(s))) {
        size_t i = s.size();
        while (i > 0 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) --i;
        s.resize(i - 1);
      }
    }
    if (left) {
      size_t i = 0;
      while (i < s.size()) {
        size_t j = i;
        if (!is_white_space(utf8::next(s, j))) break;
        i = j;
      }
      s.erase(0, i);
    }
  }
};

std::unique_ptr<Normalizer> make_normalizer(const JsonAt& j, const std::string& source) {
  const std::string type = j["type"].string();
  const std::string supported =
      "Sequence, NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Replace, Strip";
  if (type == "Sequence") {
    auto seq = std::make_unique<SequenceNormalizer>();
    for (const auto& item : j["normalizers"].items(1000))
      seq->parts.push_back(make_normalizer(item, source));
    return seq;
  }
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    return std::make_unique<UnicodeNormalizer>(type);
  }
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "Prepend") {
    auto p = std::make_unique<PrependNormalizer>();
    p->prepend = j["prepend"].string();
    return p;
  }
  if (type == "Replace") {
    return std::make_unique<ReplaceNormalizer>(Pattern(j["pattern"], source),
                                               j["content"].string());
  }
  if (type == "Strip") {
    auto p = std::make_unique<StripNormalizer>();
    p->left = j["strip_left"].boolean();
    p->right = j["strip_right"].boolean();
    return p;
  }
  unsupported(source, "normalizer", type, supported);
}

// --- pre-tokenizers -------------------------------------------------------------------------

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
const ByteLevelTables& byte_level() {
  static const ByteLevelTables tables;
  return tables;
}

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits (and may rewrite) each piece; empty pieces are dropped.
  virtual void apply(std::vector<Piece>& pieces) const = 0;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  std::vector<std::unique_ptr<PreTokenizer>> parts;
  void apply(std::vector<Piece>& pieces) const override {
    for (const auto& p : parts) p->apply(pieces);
  }
};

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex, const std::string& source)
      : add_prefix_space_(add_prefix_space) {
    if (use_regex) regex_ = std::make_unique<Regex>(kGpt2Pattern, source);
  }
  void apply(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    out.reserve(pieces.size() * 4);
    const auto& table = byte_level().byte_to_text;
    // Isolated: every match and every gap between matches is a piece, mapped byte by byte.
    auto emit = [&](const Piece& piece, size_t start, size_t end) {
      if (end <= start) return;
      Piece p{std::string(), -1, piece.at_origin && start == 0};
      p.text.reserve((end - start) * 2);
      for (size_t k = start; k < end; ++k)
        p.text += table[static_cast<unsigned char>(piece.text[k])];
      out.push_back(std::move(p));
    };
    for (auto& piece : pieces) {
      if (add_prefix_space_ && !piece.text.empty() && piece.text[0] != ' ')
        piece.text.insert(0, " ");
      if (regex_) {
        size_t prev = 0;
        regex_->for_each(piece.text, [&](size_t s, size_t e) {
          emit(piece, prev, s);
          emit(piece, s, e);
          prev = e;
        });
        emit(piece, prev, piece.text.size());
      } else {
        emit(piece, 0, piece.text.size());
      }
    }
    pieces = std::move(out);
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(Pattern p, Behavior b, bool inv)
      : pattern_(std::move(p)), behavior_(b), invert_(inv) {}
  void apply(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (const auto& piece : pieces) {
      Matches m = pattern_.find(piece.text);
      if (invert_) m = invert(std::move(m));
      emit_parts(piece, split_offsets(std::move(m), behavior_), out);
    }
    pieces = std::move(out);
  }

 private:
  Pattern pattern_;
  Behavior behavior_;
  bool invert_;
};

class DigitsPreTokenizer : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual) : individual_(individual) {}
  void apply(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    out.reserve(pieces.size());
    for (auto& piece : pieces) {
      // Most pieces have no digit: an ASCII-only piece without 0-9 passes unchanged.
      bool plain = true;
      for (const char c : piece.text) {
        if ((c >= '0' && c <= '9') || static_cast<unsigned char>(c) >= 0x80) {
          plain = false;
          break;
        }
      }
      if (plain) {
        if (!piece.text.empty()) out.push_back(std::move(piece));
        continue;
      }
      emit_parts(piece,
                 split_offsets(char_matches(piece.text, is_numeric),
                               individual_ ? Behavior::Isolated : Behavior::Contiguous),
                 out);
    }
    pieces = std::move(out);
  }

 private:
  bool individual_;
};

enum class PrependScheme { Always, First, Never };

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(char32_t replacement, PrependScheme scheme, bool split)
      : replacement_(replacement), scheme_(scheme), split_(split) {
    utf8::append(rep_, replacement);
  }
  void apply(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (auto& piece : pieces) {
      std::string s;
      for (const char c : piece.text) {
        if (c == ' ')
          s += rep_;
        else
          s += c;
      }
      const bool starts = !s.empty() && first_char(s) == replacement_;
      const bool prepend = !s.empty() && !starts &&
                           (scheme_ == PrependScheme::Always ||
                            (scheme_ == PrependScheme::First && piece.at_origin));
      if (prepend) s.insert(0, rep_);
      piece.text = std::move(s);
      if (split_) {
        const char32_t r = replacement_;
        emit_parts(piece,
                   split_offsets(char_matches(piece.text, [r](char32_t c) { return c == r; }),
                                 Behavior::MergedWithNext),
                   out);
      } else if (!piece.text.empty()) {
        out.push_back(std::move(piece));
      }
    }
    pieces = std::move(out);
  }

 private:
  char32_t replacement_;
  std::string rep_;
  PrependScheme scheme_;
  bool split_;
};

char32_t single_char(const JsonAt& j) {
  const std::string s = j.string("one character");
  size_t i = 0;
  if (s.empty() || !utf8::is_valid(s)) j.fail("one character");
  const char32_t c = utf8::next(s, i);
  if (i != s.size()) j.fail("one character");
  return c;
}

PrependScheme prepend_scheme(const JsonAt& j) {
  if (j.has("prepend_scheme")) {
    const std::string s = j["prepend_scheme"].string();
    if (s == "always") return PrependScheme::Always;
    if (s == "first") return PrependScheme::First;
    if (s == "never") return PrependScheme::Never;
    j["prepend_scheme"].fail("\"always\", \"first\" or \"never\"");
  }
  // Files from before prepend_scheme: add_prefix_space true means always.
  return j.boolean_or("add_prefix_space", true) ? PrependScheme::Always : PrependScheme::Never;
}

Behavior behavior_of(const JsonAt& j) {
  static const std::map<std::string, Behavior> names = {
      {"Removed", Behavior::Removed},
      {"Isolated", Behavior::Isolated},
      {"MergedWithPrevious", Behavior::MergedWithPrevious},
      {"MergedWithNext", Behavior::MergedWithNext},
      {"Contiguous", Behavior::Contiguous}};
  const auto it = names.find(j.string());
  if (it == names.end())
    j.fail("Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous");
  return it->second;
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonAt& j, const std::string& source) {
  const std::string type = j["type"].string();
  if (type == "Sequence") {
    auto seq = std::make_unique<SequencePreTokenizer>();
    for (const auto& item : j["pretokenizers"].items(1000)) {
      seq->parts.push_back(make_pre_tokenizer(item, source));
    }
    return seq;
  }
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(j.boolean_or("add_prefix_space", true),
                                                   j.boolean_or("use_regex", true), source);
  }
  if (type == "Split") {
    return std::make_unique<SplitPreTokenizer>(Pattern(j["pattern"], source),
                                               behavior_of(j["behavior"]), j["invert"].boolean());
  }
  if (type == "Digits")
    return std::make_unique<DigitsPreTokenizer>(j["individual_digits"].boolean());
  if (type == "Metaspace") {
    return std::make_unique<MetaspacePreTokenizer>(single_char(j["replacement"]), prepend_scheme(j),
                                                   j.boolean_or("split", true));
  }
  unsupported(source, "pre-tokenizer", type, "Sequence, ByteLevel, Split, Digits, Metaspace");
}

// --- the BPE model --------------------------------------------------------------------------

// The merge table: (left id, right id) -> (rank, merged id), open addressing (the hot lookup of
// BPE; std::unordered_map's buckets cost a cache miss each).
class MergeTable {
 public:
  struct Entry {
    uint64_t key = kEmpty;
    int32_t rank = 0, merged = 0;
  };
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    slots_.assign(cap, Entry{});
    mask_ = cap - 1;
  }
  // A pair already present keeps its slot and takes the new values (a later merge overrides).
  void set(uint64_t key, int32_t rank, int32_t merged) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    Entry& e = slot(key);
    if (e.key == kEmpty) ++size_;
    e = {key, rank, merged};
  }
  const Entry* find(uint64_t key) const {
    if (slots_.empty()) return nullptr;
    for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      const Entry& e = slots_[i];
      if (e.key == key) return &e;
      if (e.key == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static size_t hash(uint64_t k) { return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> 20); }
  Entry& slot(uint64_t key) {
    for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].key == key || slots_[i].key == kEmpty) return slots_[i];
    }
  }
  void grow() {
    std::vector<Entry> old = std::move(slots_);
    reserve(std::max<size_t>(16, old.size()));
    size_ = 0;
    for (const auto& e : old) {
      if (e.key != kEmpty) set(e.key, e.rank, e.merged);
    }
  }
  std::vector<Entry> slots_;
  size_t mask_ = 0, size_ = 0;
};

class Bpe {
 public:
  Bpe(const JsonAt& j, const std::string& source) {
    const std::string type = j.string_or("type", "BPE");
    if (type != "BPE") unsupported(source, "model", type, "BPE");
    if (j.has("dropout") && !j["dropout"].json().is_null() && j["dropout"].number() != 0.0) {
      unsupported(source, "BPE option", "dropout", "dropout null or 0");
    }
    const auto& vocab = j["vocab"];
    vocab.object("an object of token -> id");
    vocab_.reserve(vocab.json().size());
    for (auto it = vocab.json().begin(); it != vocab.json().end(); ++it) {
      const auto& v = it.value();
      const bool ok = v.is_number_unsigned() && v.get<uint64_t>() < (uint64_t{1} << 31);
      // Only a bad entry pays for the typed reader (which names the key).
      const int64_t id = ok ? v.get<int64_t>()
                            : vocab[it.key()].integer_in(0, (int64_t{1} << 31) - 1, "a token id");
      vocab_[it.key()] = static_cast<int32_t>(id);
      if (static_cast<size_t>(id) >= tokens_.size()) tokens_.resize(static_cast<size_t>(id) + 1);
      tokens_[static_cast<size_t>(id)] = it.key();
    }
    if (j.has("unk_token") && !j["unk_token"].json().is_null()) unk_ = j["unk_token"].string();
    if (j.has("continuing_subword_prefix") && !j["continuing_subword_prefix"].json().is_null()) {
      prefix_ = j["continuing_subword_prefix"].string();
    }
    if (j.has("end_of_word_suffix") && !j["end_of_word_suffix"].json().is_null()) {
      suffix_ = j["end_of_word_suffix"].string();
    }
    fuse_unk_ = j.boolean_or("fuse_unk", false);
    byte_fallback_ = j.boolean_or("byte_fallback", false);
    ignore_merges_ = j.boolean_or("ignore_merges", false);
    if (byte_fallback_) {
      for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        const auto it = vocab_.find(name);
        byte_ids_[b] = it == vocab_.end() ? -1 : it->second;
      }
    }
    if (prefix_.empty() && suffix_.empty()) {
      char_ids_.assign(0x800, -1);
      for (const auto& [token, id] : vocab_) {
        size_t k = 0;
        if (token.empty() || token.size() > 2 || !utf8::is_valid(token)) continue;
        const char32_t c = utf8::next(token, k);
        if (k == token.size() && c < 0x800) char_ids_[c] = id;
      }
    }
    int32_t rank = 0;
    const auto merges = j["merges"];
    if (!merges.json().is_array()) merges.fail("an array of merges");
    merges_.reserve(merges.json().size());
    size_t index = 0;
    std::string a, b;
    for (const auto& m : merges.json()) {
      bool ok = false;
      if (m.is_string()) {
        const std::string& s = m.get_ref<const std::string&>();
        const size_t space = s.find(' ');
        ok = space != std::string::npos && s.find(' ', space + 1) == std::string::npos;
        if (ok) {
          a.assign(s, 0, space);
          b.assign(s, space + 1, std::string::npos);
        }
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        ok = true;
        a = m[0].get<std::string>();
        b = m[1].get<std::string>();
      }
      // Only a bad entry pays for the typed reader (which names the key).
      if (!ok) merges.items()[index].fail("a merge \"A B\" (two tokens and one space) or [A, B]");
      ++index;
      const auto fa = vocab_.find(a), fb = vocab_.find(b);
      if (fa == vocab_.end() || fb == vocab_.end()) {
        merges.items()[index - 1].fail("a merge of tokens in the vocabulary (" +
                                       JsonAt::quoted(fa == vocab_.end() ? a : b) + " is not)");
      }
      const int32_t ia = fa->second, ib = fb->second;
      const std::string merged =
          a + (prefix_.empty() || b.rfind(prefix_, 0) != 0 ? b : b.substr(prefix_.size()));
      const auto fm = vocab_.find(merged);
      if (fm == vocab_.end()) {
        merges.items()[index - 1].fail("a merge whose result is in the vocabulary (" +
                                       JsonAt::quoted(merged) + " is not)");
      }
      merges_.set(key(ia, ib), rank++, fm->second);
    }
  }

  const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }
  const std::vector<std::string>& tokens() const { return tokens_; }
  std::optional<int32_t> find(const std::string& token) const {
    const auto it = vocab_.find(token);
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
  }

  using Cache = std::unordered_map<std::string, std::vector<int32_t>>;
  // This thread's cache of words already merged (one per tokenizer and thread).
  Cache& thread_cache() const { return thread_caches()[cache_id_]; }

  void tokenize(const std::string& word, std::vector<int64_t>& out) const {
    tokenize(word, out, thread_cache());
  }
  void tokenize(const std::string& word, std::vector<int64_t>& out, Cache& cache) const {
    if (word.empty()) return;
    if (ignore_merges_) {
      if (const auto id = find(word)) {
        out.push_back(*id);
        return;
      }
    }
    // Each thread has its own cache per tokenizer (no lock on the hot path); a tokenizer is known
    // by a number never reused, so a new one at a freed one's address starts empty.
    const auto it = cache.find(word);
    if (it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
    std::vector<int32_t> ids = merge_word(word);
    out.insert(out.end(), ids.begin(), ids.end());
    if (word.size() < 256 && cache.size() < kCacheCapacity) cache.emplace(word, std::move(ids));
  }
  // This thread's cache goes with the tokenizer; another thread's stays until that thread exits
  // (at most kCacheCapacity words).
  ~Bpe() { thread_caches().erase(cache_id_); }

 private:
  static constexpr size_t kCacheCapacity = 20000;
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  int32_t id_or_fail(const std::string& token, const JsonAt& where) const {
    const auto it = vocab_.find(token);
    if (it == vocab_.end()) {
      where.fail("a merge of tokens in the vocabulary (" + JsonAt::quoted(token) + " is not)");
    }
    return it->second;
  }

  struct Symbol {
    int32_t id;
    int prev, next;
    size_t len;  // 0: merged away
  };

  std::vector<int32_t> merge_word(const std::string& w) const {
    std::vector<Symbol> symbols;
    symbols.reserve(w.size());
    std::string s;
    int32_t unk_id = -1;  // an unknown token not yet added (-1: none), and its byte length
    size_t unk_len = 0;
    auto add = [&](int32_t id, size_t len) {
      const int n = static_cast<int>(symbols.size());
      symbols.push_back({id, n - 1, -1, len});
      if (n > 0) symbols[static_cast<size_t>(n - 1)].next = n;
    };
    size_t i = 0;
    while (i < w.size()) {
      const size_t start = i;
      const size_t len = utf8::char_length(static_cast<unsigned char>(w[i]));
      i = std::min(w.size(), i + len);
      // One- and two-byte characters without a prefix or suffix to add: the table, no hashing.
      if (!char_ids_.empty() && len <= 2 && i - start == len) {
        const char32_t c = len == 1 ? static_cast<unsigned char>(w[start])
                                    : ((static_cast<unsigned char>(w[start]) & 0x1F) << 6) |
                                          (static_cast<unsigned char>(w[start + 1]) & 0x3F);
        const int32_t id = char_ids_[c];
        if (id >= 0) {
          if (unk_id >= 0) {
            add(unk_id, unk_len);
            unk_id = -1;
          }
          add(id, len);
          continue;
        }
      }
      s.assign(w, start, i - start);
      const size_t byte_len = s.size();
      if (start != 0 && !prefix_.empty()) s.insert(0, prefix_);
      if (i >= w.size() && !suffix_.empty()) s += suffix_;
      const auto it = vocab_.find(s);
      if (it != vocab_.end()) {
        if (unk_id >= 0) {
          add(unk_id, unk_len);
          unk_id = -1;
        }
        add(it->second, byte_len);
        continue;
      }
      if (byte_fallback_) {
        bool all = true;
        for (const unsigned char b : s) all = all && byte_ids_[b] >= 0;
        if (all) {
          for (const unsigned char b : s) add(byte_ids_[b], 1);
          continue;
        }
      }
      if (unk_) {
        const auto u = vocab_.find(*unk_);
        if (u == vocab_.end()) {
          throw Error("tokenizer: the unknown token " + JsonAt::quoted(*unk_) +
                      " is not in the vocabulary");
        }
        if (unk_id >= 0 && fuse_unk_) {
          unk_len += byte_len;
        } else {
          if (unk_id >= 0) add(unk_id, unk_len);
          unk_id = u->second;
          unk_len = byte_len;
        }
      }
    }
    if (unk_id >= 0) add(unk_id, unk_len);

    struct Merge {
      int32_t rank;
      int pos;
      int32_t new_id;
      bool operator<(const Merge& o) const {  // the queue's top: lowest rank, then leftmost
        return rank != o.rank ? rank > o.rank : pos > o.pos;
      }
    };
    std::priority_queue<Merge> queue;
    for (size_t k = 0; k + 1 < symbols.size(); ++k) {
      const auto* m = merges_.find(key(symbols[k].id, symbols[k + 1].id));
      if (m) queue.push({m->rank, static_cast<int>(k), m->merged});
    }
    while (!queue.empty()) {
      const Merge top = queue.top();
      queue.pop();
      Symbol& cur = symbols[static_cast<size_t>(top.pos)];
      if (cur.len == 0 || cur.next == -1) continue;
      const Symbol right = symbols[static_cast<size_t>(cur.next)];
      const auto* m = merges_.find(key(cur.id, right.id));
      if (!m || m->merged != top.new_id) continue;
      const int right_pos = cur.next;
      cur.id = top.new_id;
      cur.len += right.len;
      cur.next = right.next;
      symbols[static_cast<size_t>(right_pos)].len = 0;
      if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = top.pos;
      if (cur.prev >= 0) {
        const auto* p = merges_.find(key(symbols[static_cast<size_t>(cur.prev)].id, cur.id));
        if (p) queue.push({p->rank, cur.prev, p->merged});
      }
      if (cur.next >= 0) {
        const auto* n = merges_.find(key(cur.id, symbols[static_cast<size_t>(cur.next)].id));
        if (n) queue.push({n->rank, top.pos, n->merged});
      }
    }
    std::vector<int32_t> ids;
    for (const auto& s : symbols) {
      if (s.len != 0) ids.push_back(s.id);
    }
    return ids;
  }

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> tokens_;
  MergeTable merges_;
  std::optional<std::string> unk_;
  std::string prefix_, suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  std::array<int32_t, 256> byte_ids_{};
  // The id of each one-character token below U+0800 (-1: none), when no prefix or suffix applies.
  std::vector<int32_t> char_ids_;
  uint64_t cache_id_ = next_cache_id();
  static uint64_t next_cache_id() {
    static std::atomic<uint64_t> next{1};
    return next++;
  }
  static std::unordered_map<uint64_t, Cache>& thread_caches() {
    thread_local std::unordered_map<uint64_t, Cache> caches;
    return caches;
  }
};

// --- added tokens ---------------------------------------------------------------------------

struct AddedToken {
  std::string content;
  int64_t id = 0;
  bool special = false, single_word = false, lstrip = false, rstrip = false, normalized = true;
};

// Leftmost-longest matching of a set of strings (a byte trie).
class TokenTrie {
 public:
  void add(const std::string& s, size_t token) {
    int node = 0;
    for (const unsigned char b : s) {
      const uint64_t k = (static_cast<uint64_t>(node) << 8) | b;
      auto it = edges_.find(k);
      if (it == edges_.end()) {
        it = edges_.emplace(k, static_cast<int>(terminal_.size())).first;
        terminal_.push_back(-1);
      }
      node = it->second;
    }
    terminal_[static_cast<size_t>(node)] = static_cast<int64_t>(token);
    first_[static_cast<unsigned char>(s[0])] = true;
  }
  bool empty() const { return terminal_.size() == 1; }
  // The longest entry starting at s[i]: (entry, end) or entry -1.
  std::pair<int64_t, size_t> longest_at(std::string_view s, size_t i) const {
    std::pair<int64_t, size_t> best{-1, i};
    if (!first_[static_cast<unsigned char>(s[i])]) return best;
    int node = 0;
    for (size_t k = i; k < s.size(); ++k) {
      const auto it =
          edges_.find((static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(s[k]));
      if (it == edges_.end()) break;
      node = it->second;
      if (terminal_[static_cast<size_t>(node)] >= 0)
        best = {terminal_[static_cast<size_t>(node)], k + 1};
    }
    return best;
  }

 private:
  std::unordered_map<uint64_t, int> edges_;
  std::vector<int64_t> terminal_{-1};
  std::array<bool, 256> first_{};
};

// --- post-processors ------------------------------------------------------------------------

struct PostProcessor {
  std::vector<int64_t> before, after;  // what add_special_tokens puts around the sequence
};

void read_post_processor(const JsonAt& j, const std::string& source, PostProcessor& pp) {
  const std::string type = j["type"].string();
  if (type == "Sequence") {
    for (const auto& item : j["processors"].items(100)) read_post_processor(item, source, pp);
    return;
  }
  if (type == "ByteLevel") return;  // offsets only
  if (type == "TemplateProcessing") {
    std::map<std::string, std::vector<int64_t>> specials;
    const auto& st = j["special_tokens"];
    st.object("an object of special tokens");
    for (auto it = st.json().begin(); it != st.json().end(); ++it) {
      std::vector<int64_t> ids;
      for (const auto& id : st[it.key()]["ids"].items(1000))
        ids.push_back(id.integer_in(0, (int64_t{1} << 31) - 1, "a token id"));
      specials[it.key()] = ids;
    }
    bool seen_sequence = false;
    std::vector<int64_t> before, after;
    for (const auto& piece : j["single"].items(1000)) {
      if (piece.has("Sequence")) {
        if (seen_sequence) piece.fail("one Sequence piece in the single template");
        seen_sequence = true;
      } else if (piece.has("SpecialToken")) {
        const std::string name = piece["SpecialToken"]["id"].string();
        const auto it = specials.find(name);
        if (it == specials.end())
          piece["SpecialToken"]["id"].fail("a name listed in special_tokens");
        auto& side = seen_sequence ? after : before;
        side.insert(side.end(), it->second.begin(), it->second.end());
      } else {
        piece.fail("a template piece {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
    }
    // A later processor wraps what the earlier ones made.
    pp.before.insert(pp.before.begin(), before.begin(), before.end());
    pp.after.insert(pp.after.end(), after.begin(), after.end());
    return;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    const auto cls = j["cls"].items(2), sep = j["sep"].items(2);
    if (cls.size() != 2 || sep.size() != 2) j.fail("cls and sep as [token, id]");
    pp.before.insert(pp.before.begin(), cls[1].integer_in(0, (int64_t{1} << 31) - 1, "a token id"));
    pp.after.push_back(sep[1].integer_in(0, (int64_t{1} << 31) - 1, "a token id"));
    return;
  }
  unsupported(source, "post-processor", type,
              "Sequence, ByteLevel, TemplateProcessing, RobertaProcessing, BertProcessing");
}

// --- decoders -------------------------------------------------------------------------------

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual std::vector<std::string> chain(std::vector<std::string> tokens) const = 0;
};

class SequenceDecoder : public Decoder {
 public:
  std::vector<std::unique_ptr<Decoder>> parts;
  std::vector<std::string> chain(std::vector<std::string> tokens) const override {
    for (const auto& p : parts) tokens = p->chain(std::move(tokens));
    return tokens;
  }
};

class ByteLevelDecoder : public Decoder {
 public:
  std::vector<std::string> chain(std::vector<std::string> tokens) const override {
    const auto& table = byte_level().char_to_byte;
    std::string bytes;
    for (const auto& t : tokens) {
      std::string mapped;
      bool all = true;
      size_t i = 0;
      while (i < t.size()) {
        const auto it = table.find(utf8::next(t, i));
        if (it == table.end()) {
          all = false;
          break;
        }
        mapped.push_back(static_cast<char>(it->second));
      }
      bytes += all ? mapped : t;
    }
    return {utf8::repair(bytes)};
  }
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(char32_t r, PrependScheme s) : replacement_(r), scheme_(s) {}
  std::vector<std::string> chain(std::vector<std::string> tokens) const override {
    for (size_t k = 0; k < tokens.size(); ++k) {
      std::string out;
      size_t i = 0;
      const std::string& t = tokens[k];
      while (i < t.size()) {
        const size_t start = i;
        const char32_t c = utf8::next(t, i);
        if (c == replacement_) {
          if (!(k == 0 && scheme_ != PrependScheme::Never)) out += ' ';
        } else {
          out.append(t, start, i - start);
        }
      }
      tokens[k] = std::move(out);
    }
    return tokens;
  }

 private:
  char32_t replacement_;
  PrependScheme scheme_;
};

class ReplaceDecoder : public Decoder {
 public:
  explicit ReplaceDecoder(ReplaceNormalizer r) : replace_(std::move(r)) {}
  std::vector<std::string> chain(std::vector<std::string> tokens) const override {
    for (auto& t : tokens) t = replace_.apply(t);
    return tokens;
  }

 private:
  ReplaceNormalizer replace_;
};

class FuseDecoder : public Decoder {
 public:
  std::vector<std::string> chain(std::vector<std::string> tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    return {all};
  }
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t c, size_t start, size_t stop) : content_(c), start_(start), stop_(stop) {}
  std::vector<std::string> chain(std::vector<std::string> tokens) const override {
    for (auto& t : tokens) {
      std::vector<std::pair<size_t, char32_t>> chars;  // (byte offset, code point)
      size_t i = 0;
      while (i < t.size()) {
        const size_t at = i;
        chars.push_back({at, utf8::next(t, i)});
      }
      size_t start_cut = 0;
      for (size_t k = 0; k < std::min(start_, chars.size()); ++k) {
        if (chars[k].second != content_) break;
        start_cut = k + 1;
      }
      size_t stop_cut = chars.size();
      for (size_t k = 0; k < stop_ && k < chars.size(); ++k) {
        const size_t index = chars.size() - k - 1;
        if (chars[index].second != content_) break;
        stop_cut = index;
      }
      if (stop_cut <= start_cut) {
        t.clear();
        continue;
      }
      const size_t from = chars[start_cut].first;
      const size_t to = stop_cut < chars.size() ? chars[stop_cut].first : t.size();
      t = t.substr(from, to - from);
    }
    return tokens;
  }

 private:
  char32_t content_;
  size_t start_, stop_;
};

// The byte a "<0xXX>" token stands for, as the library parses it (u8::from_str_radix).
std::optional<uint8_t> byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return std::nullopt;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  if (t[3] == '+' && lo >= 0) return static_cast<uint8_t>(lo);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<uint8_t>(hi * 16 + lo);
}

class ByteFallbackDecoder : public Decoder {
 public:
  std::vector<std::string> chain(std::vector<std::string> tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (utf8::is_valid(pending)) {
        out.push_back(pending);
      } else {
        for (size_t k = 0; k < pending.size(); ++k) out.emplace_back(utf8::kReplacement);
      }
      pending.clear();
    };
    for (auto& t : tokens) {
      if (const auto b = byte_token(t)) {
        pending.push_back(static_cast<char>(*b));
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    return out;
  }
};

std::unique_ptr<Decoder> make_decoder(const JsonAt& j, const std::string& source) {
  const std::string type = j["type"].string();
  if (type == "Sequence") {
    auto seq = std::make_unique<SequenceDecoder>();
    for (const auto& item : j["decoders"].items(1000))
      seq->parts.push_back(make_decoder(item, source));
    return seq;
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") {
    return std::make_unique<MetaspaceDecoder>(single_char(j["replacement"]), prepend_scheme(j));
  }
  if (type == "Replace") {
    return std::make_unique<ReplaceDecoder>(
        ReplaceNormalizer(Pattern(j["pattern"], source), j["content"].string()));
  }
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Strip") {
    return std::make_unique<StripDecoder>(single_char(j["content"]),
                                          static_cast<size_t>(j["start"].integer_in(0, 1 << 20)),
                                          static_cast<size_t>(j["stop"].integer_in(0, 1 << 20)));
  }
  unsupported(source, "decoder", type,
              "Sequence, ByteLevel, Metaspace, Replace, Fuse, ByteFallback, Strip");
}

// --- the tokenizer --------------------------------------------------------------------------

class JsonTokenizer : public Tokenizer {
 public:
  JsonTokenizer(const nlohmann::json& doc, const std::string& source, std::string file)
      : file_(std::move(file)) {
    const JsonAt root(doc, source);
    root.object("a tokenizer.json document");
    if (root.has("version") && root["version"].string() != "1.0") root["version"].fail("\"1.0\"");
    if (root.has("truncation") && !root["truncation"].json().is_null()) {
      unsupported(source, "setting", "truncation", "truncation null");
    }
    const auto model = root["model"];
    model.object("the tokenizer's model (an object)");
    bpe_ = std::make_unique<Bpe>(model, source);
    kind_ = "BPE";
    if (root.has("normalizer") && !root["normalizer"].json().is_null()) {
      normalizer_ = make_normalizer(root["normalizer"], source);
    }
    if (root.has("pre_tokenizer") && !root["pre_tokenizer"].json().is_null()) {
      pre_tokenizer_ = make_pre_tokenizer(root["pre_tokenizer"], source);
    }
    if (root.has("post_processor") && !root["post_processor"].json().is_null()) {
      read_post_processor(root["post_processor"], source, post_);
    }
    if (root.has("decoder") && !root["decoder"].json().is_null()) {
      decoder_ = make_decoder(root["decoder"], source);
      if (root["decoder"]["type"].string() == "ByteLevel") kind_ = "byte-level BPE";
    }
    if (kind_ == "BPE" && root.has("pre_tokenizer") && !root["pre_tokenizer"].json().is_null() &&
        root["pre_tokenizer"].json().dump().find("\"Metaspace\"") != std::string::npos) {
      kind_ = "SentencePiece-style BPE";
    }
    if (root.has("added_tokens")) read_added_tokens(root["added_tokens"]);
    vocab_size_ = static_cast<int64_t>(bpe_->tokens().size());
    for (const auto& [id, t] : added_by_id_) vocab_size_ = std::max(vocab_size_, id + 1);
    for (int64_t id : post_.before) check_id(id, root["post_processor"]);
    for (int64_t id : post_.after) check_id(id, root["post_processor"]);
  }

  std::vector<int64_t> encode(std::string_view text, bool add_special_tokens) const override {
    const std::string valid = utf8::repair(text);
    std::vector<Piece> pieces;
    // 1. Added tokens matched on the raw text (those with normalized = false).
    split_added(Piece{valid, -1, true}, raw_trie_, raw_tokens_, pieces);
    // 2. The rest normalized, then added tokens matched on the normalized text.
    std::vector<Piece> normalized;
    for (auto& piece : pieces) {
      if (piece.id >= 0) {
        normalized.push_back(std::move(piece));
        continue;
      }
      if (normalizer_) normalizer_->normalize(piece.text);
      split_added(piece, normalized_trie_, normalized_tokens_, normalized);
    }
    // 3. Pre-tokenize what is not an added token; 4. the model.
    std::vector<int64_t> ids(add_special_tokens ? post_.before : std::vector<int64_t>{});
    Bpe::Cache& cache = bpe_->thread_cache();
    std::vector<Piece> run;
    auto flush = [&] {
      if (run.empty()) return;
      if (pre_tokenizer_) pre_tokenizer_->apply(run);
      for (const auto& p : run) bpe_->tokenize(p.text, ids, cache);
      run.clear();
    };
    for (auto& piece : normalized) {
      if (piece.id >= 0) {
        flush();
        ids.push_back(piece.id);
      } else if (!piece.text.empty()) {
        run.push_back(std::move(piece));
      }
    }
    flush();
    if (add_special_tokens) ids.insert(ids.end(), post_.after.begin(), post_.after.end());
    return ids;
  }

  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const override {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (const int64_t id : ids) {
      const std::string* token = nullptr;
      const auto added = added_by_id_.find(id);
      if (added != added_by_id_.end()) {
        token = &added->second.decoded;
      } else if (id >= 0 && static_cast<size_t>(id) < bpe_->tokens().size() &&
                 !bpe_->tokens()[static_cast<size_t>(id)].empty()) {
        token = &bpe_->tokens()[static_cast<size_t>(id)];
      }
      if (token == nullptr) {
        throw Error("token id " + std::to_string(id) + " is outside the vocabulary of " +
                    describe() + ": the tokenizer does not match the model");
      }
      if (skip_special_tokens && special_contents_.count(*token)) continue;
      tokens.push_back(*token);
    }
    if (!decoder_) return join(tokens, " ");
    std::string out;
    for (const auto& t : decoder_->chain(std::move(tokens))) out += t;
    return out;
  }

  int64_t vocab_size() const override { return vocab_size_; }
  bool is_special(int64_t id) const override {
    const auto it = added_by_id_.find(id);
    return it != added_by_id_.end() && it->second.special;
  }
  int64_t token_id(const std::string& token) const override {
    const auto it = added_by_content_.find(token);
    if (it != added_by_content_.end()) return it->second;
    const auto id = bpe_->find(token);
    return id ? *id : -1;
  }
  std::string describe() const override {
    return kind_ + ", " + std::to_string(vocab_size_) + " tokens, '" + file_ + "'";
  }

 private:
  struct Added {
    std::string decoded;  // what decode() shows: the content, or its normalized form
    bool special = false;
  };

  void check_id(int64_t id, const JsonAt& where) const {
    if (id >= vocab_size_)
      where.fail("special tokens with ids in the vocabulary (id " + std::to_string(id) +
                 " is not)");
  }

  void read_added_tokens(const JsonAt& list) {
    int64_t next_id = static_cast<int64_t>(bpe_->vocab().size());
    for (const auto& t : list.items(1 << 20)) {
      AddedToken a;
      a.content = t["content"].string();
      a.special = t.boolean_or("special", false);
      a.single_word = t.boolean_or("single_word", false);
      a.lstrip = t.boolean_or("lstrip", false);
      a.rstrip = t.boolean_or("rstrip", false);
      a.normalized = t.boolean_or("normalized", !a.special);
      if (a.content.empty()) continue;
      if (!utf8::is_valid(a.content)) t["content"].fail("valid UTF-8");
      // Ids as the library gives them: the model's id when the content is in its vocabulary, else
      // the next after the largest id so far.
      if (const auto it = added_by_content_.find(a.content); it != added_by_content_.end()) {
        a.id = it->second;
      } else if (const auto model_id = bpe_->find(a.content)) {
        a.id = *model_id;
      } else {
        int64_t max_added = -1;
        for (const auto& [id, x] : added_by_id_) max_added = std::max(max_added, id);
        const int64_t vocab = static_cast<int64_t>(bpe_->vocab().size());
        next_id =
            max_added < 0 ? vocab : (max_added >= vocab || vocab == 0 ? max_added + 1 : vocab);
        a.id = next_id;
      }
      std::string pattern = a.content;
      if (a.normalized && normalizer_) normalizer_->normalize(pattern);
      added_by_content_[a.content] = a.id;
      if (a.special) special_contents_.insert(a.content);
      added_by_id_[a.id] = Added{a.normalized ? pattern : a.content, a.special};
      // A token listed again replaces the earlier one (same id).
      auto replace_in = [&](std::vector<AddedToken>& v) {
        v.erase(
            std::remove_if(v.begin(), v.end(), [&](const AddedToken& x) { return x.id == a.id; }),
            v.end());
      };
      replace_in(raw_tokens_);
      replace_in(normalized_tokens_);
      if (a.normalized) {
        AddedToken n = a;
        n.content = pattern;
        normalized_tokens_.push_back(n);
      } else {
        raw_tokens_.push_back(a);
      }
    }
    for (size_t k = 0; k < raw_tokens_.size(); ++k) raw_trie_.add(raw_tokens_[k].content, k);
    for (size_t k = 0; k < normalized_tokens_.size(); ++k) {
      if (!normalized_tokens_[k].content.empty())
        normalized_trie_.add(normalized_tokens_[k].content, k);
    }
  }

  // AddedVocabulary::find_matches over `piece`: its added-token parts get their ids.
  static void split_added(const Piece& piece, const TokenTrie& trie,
                          const std::vector<AddedToken>& tokens, std::vector<Piece>& out) {
    const std::string& s = piece.text;
    if (s.empty()) return;
    if (trie.empty()) {
      out.push_back(piece);
      return;
    }
    size_t start_offset = 0, i = 0;
    while (i < s.size()) {
      const auto [entry, end] = trie.longest_at(s, i);
      if (entry < 0) {
        ++i;
        continue;
      }
      const AddedToken& t = tokens[static_cast<size_t>(entry)];
      size_t start = i, stop = end;
      i = end;  // the next search starts after this match, kept or not
      if (t.single_word) {
        const bool start_space =
            start == 0 || !is_word_char(last_char(std::string_view(s).substr(0, start)));
        const bool stop_space =
            stop == s.size() || !is_word_char(first_char(std::string_view(s).substr(stop)));
        if (!start_space || !stop_space) continue;
      }
      if (t.lstrip) {
        size_t newstart = start;
        while (newstart > 0) {
          size_t k = newstart - 1;
          while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
          size_t kk = k;
          if (!is_white_space(utf8::next(s, kk))) break;
          newstart = k;
        }
        start = std::max(newstart, start_offset);
      }
      if (t.rstrip) {
        while (stop < s.size()) {
          size_t k = stop;
          if (!is_white_space(utf8::next(s, k))) break;
          stop = k;
        }
      }
      if (start_offset < start) {
        out.push_back({s.substr(start_offset, start - start_offset), -1,
                       piece.at_origin && start_offset == 0});
      }
      out.push_back({s.substr(start, stop - start), t.id, false});
      start_offset = stop;
    }
    if (start_offset < s.size()) {
      out.push_back({s.substr(start_offset), -1, piece.at_origin && start_offset == 0});
    }
  }

  std::string file_, kind_;
  std::unique_ptr<Bpe> bpe_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<Decoder> decoder_;
  PostProcessor post_;
  std::vector<AddedToken> raw_tokens_, normalized_tokens_;
  TokenTrie raw_trie_, normalized_trie_;
  std::map<int64_t, Added> added_by_id_;
  std::unordered_map<std::string, int64_t> added_by_content_;
  std::unordered_set<std::string> special_contents_;
  int64_t vocab_size_ = 0;
};

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer_json(const std::filesystem::path& file) {
  const std::string source = "'" + file.string() + "'";
  const std::string text =
      read_regular_file(file, "tokenizer file " + source, "a tokenizer.json file", 256u << 20);
  const nlohmann::json doc = parse_json_text(text, source);
  return std::make_unique<JsonTokenizer>(doc, source, file.string());
}

}  // namespace gengraph

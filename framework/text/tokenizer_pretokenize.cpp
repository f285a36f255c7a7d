// The steps of the native tokenizer.json reader before the model (tokenizer_pipeline.h): the
// normalizers and pre-tokenizers, with the characters, patterns and pieces they work on.
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <map>

#include "framework/text/tokenizer_pipeline.h"

namespace gengraph::tokenizer_detail {

[[noreturn]] void unsupported(const std::string& source, const std::string& what,
                              const std::string& type, const std::string& supported) {
  throw Error(std::string(kUnsupportedTokenizer) + source + ": " + what + " '" + type +
              "' is not supported natively (supported: " + supported + ")");
}

pcre2_match_context* regex_match_context() {
  static pcre2_match_context* const context = [] {
    pcre2_match_context* c = pcre2_match_context_create(nullptr);
    if (c == nullptr) throw Error("PCRE2: no memory for a match context");
    pcre2_set_match_limit(c, kRegexMatchLimit);
    pcre2_set_depth_limit(c, kRegexDepthLimit);
    pcre2_set_heap_limit(c, kRegexHeapLimitKiB);
    return c;
  }();
  return context;
}

void Regex::match_failed(int rc, size_t length, size_t pos) const {
  std::string why = error_text(rc);
  if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT) {
    why +=
        " (the pattern backtracks more than the " + std::to_string(kRegexMatchLimit) +
        " steps, or the memory, allowed for one search; the tokenizers library's engine gives up "
        "on such patterns too)";
  }
  throw Error(where_ + ": the regular expression " + JsonAt::quoted(pattern_) +
              " could not be matched on a text of " + std::to_string(length) +
              " bytes, from byte " + std::to_string(pos) + ": " + why);
}

void OutputBound::refuse(const std::string& step) const {
  throw Error(step + ": the output grows past " + std::to_string(max) + " bytes for a text of " +
              std::to_string(input) + " bytes (a tokenizer step may make at most " +
              std::to_string(kStepGrowth) + " times its input, or its input + " +
              std::to_string(kStepSlack) + " bytes); the text is refused");
}

std::string step_name(const std::string& source, const JsonAt& j, const std::string& type) {
  return source + ": " + j.path() + " (" + type + ")";
}

size_t total_bytes(const std::vector<Piece>& pieces) {
  size_t n = 0;
  for (const auto& p : pieces) n += p.text.size();
  return n;
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

// --- the string being tokenized ------------------------------------------------------------

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

class SequenceNormalizer : public Normalizer {
 public:
  std::vector<std::unique_ptr<Normalizer>> parts;
  void normalize(std::string& s, const OutputBound& bound) const override {
    for (const auto& p : parts) p->normalize(s, bound);
  }
};

class UnicodeNormalizer : public Normalizer {
 public:
  UnicodeNormalizer(const std::string& form, std::string step) : step_(std::move(step)) {
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
  void normalize(std::string& s, const OutputBound& bound) const override {
    UErrorCode status = U_ZERO_ERROR;
    if (n_->isNormalized(icu::UnicodeString::fromUTF8(s), status) && U_SUCCESS(status)) return;
    status = U_ZERO_ERROR;
    const icu::UnicodeString out = n_->normalize(icu::UnicodeString::fromUTF8(s), status);
    if (U_FAILURE(status))
      throw Error(step_ + ": ICU normalisation failed: " + u_errorName(status));
    s.clear();
    out.toUTF8String(s);
    bound.check(s.size(), step_);
  }

 private:
  const icu::Normalizer2* n_ = nullptr;
  std::string step_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  explicit LowercaseNormalizer(std::string step) : step_(std::move(step)) {}
  void normalize(std::string& s, const OutputBound& bound) const override {
    icu::UnicodeString u = icu::UnicodeString::fromUTF8(s);
    u.toLower(icu::Locale::getRoot());
    s.clear();
    u.toUTF8String(s);
    bound.check(s.size(), step_);
  }

 private:
  std::string step_;
};

class PrependNormalizer : public Normalizer {
 public:
  PrependNormalizer(std::string p, std::string step)
      : prepend(std::move(p)), step_(std::move(step)) {}
  std::string prepend;
  void normalize(std::string& s, const OutputBound& bound) const override {
    if (s.empty()) return;
    bound.check(s.size() + prepend.size(), step_);
    s.insert(0, prepend);
  }

 private:
  std::string step_;
};

class StripNormalizer : public Normalizer {
 public:
  bool left = false, right = false;
  void normalize(std::string& s, const OutputBound&) const override {
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
  const std::string step = step_name(source, j, type);
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    return std::make_unique<UnicodeNormalizer>(type, step);
  }
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>(step);
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(j["prepend"].string(), step);
  if (type == "Replace") {
    return std::make_unique<ReplaceNormalizer>(Pattern(j["pattern"], step), j["content"].string(),
                                               step);
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

const ByteLevelTables& byte_level() {
  static const ByteLevelTables tables;
  return tables;
}

class SequencePreTokenizer : public PreTokenizer {
 public:
  std::vector<std::unique_ptr<PreTokenizer>> parts;
  void apply(std::vector<Piece>& pieces, const OutputBound& bound) const override {
    for (const auto& p : parts) p->apply(pieces, bound);
  }
};

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex, const std::string& step)
      : add_prefix_space_(add_prefix_space), step_(step) {
    if (use_regex) regex_ = std::make_unique<Regex>(kGpt2Pattern, step);
  }
  void apply(std::vector<Piece>& pieces, const OutputBound& bound) const override {
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
    bound.check(total_bytes(out), step_);
    pieces = std::move(out);
  }

 private:
  bool add_prefix_space_;
  std::string step_;
  std::unique_ptr<Regex> regex_;
};

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(Pattern p, Behavior b, bool inv)
      : pattern_(std::move(p)), behavior_(b), invert_(inv) {}
  void apply(std::vector<Piece>& pieces, const OutputBound&) const override {
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
  void apply(std::vector<Piece>& pieces, const OutputBound&) const override {
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

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(char32_t replacement, PrependScheme scheme, bool split, std::string step)
      : replacement_(replacement), scheme_(scheme), split_(split), step_(std::move(step)) {
    utf8::append(rep_, replacement);
  }
  void apply(std::vector<Piece>& pieces, const OutputBound& bound) const override {
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
    bound.check(total_bytes(out), step_);
    pieces = std::move(out);
  }

 private:
  char32_t replacement_;
  std::string rep_;
  PrependScheme scheme_;
  bool split_;
  std::string step_;
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
  const std::string step = step_name(source, j, type);
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(j.boolean_or("add_prefix_space", true),
                                                   j.boolean_or("use_regex", true), step);
  }
  if (type == "Split") {
    return std::make_unique<SplitPreTokenizer>(Pattern(j["pattern"], step),
                                               behavior_of(j["behavior"]), j["invert"].boolean());
  }
  if (type == "Digits")
    return std::make_unique<DigitsPreTokenizer>(j["individual_digits"].boolean());
  if (type == "Metaspace") {
    return std::make_unique<MetaspacePreTokenizer>(single_char(j["replacement"]), prepend_scheme(j),
                                                   j.boolean_or("split", true), step);
  }
  unsupported(source, "pre-tokenizer", type, "Sequence, ByteLevel, Split, Digits, Metaspace");
}

}  // namespace gengraph::tokenizer_detail

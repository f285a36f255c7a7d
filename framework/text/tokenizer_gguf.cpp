// A tokenizer from a GGUF file's tokenizer.ggml.* metadata, as llama.cpp tokenizes with it
// (tokenizer_gguf.h). Byte-level BPE ("gpt2") is handed to the tokenizer.json pipeline as the
// document that says the same (vocabulary, merges, the pre-tokenizer's regular expressions as
// Isolated splits, then bytes to characters); SentencePiece ("llama") is merged here. What both
// share is done here as llama.cpp does it: special tokens found in the raw text first, BOS/EOS, and
// the way back to text token by token.
#include "framework/text/tokenizer_gguf.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "framework/text/tokenizer_pipeline.h"
#include "framework/text/utf8.h"
#include "framework/util/error.h"

namespace gengraph {
namespace {

using tokenizer_detail::byte_level;

// llama.cpp's token attributes, from tokenizer.ggml.token_type (1 NORMAL, 2 UNKNOWN, 3 CONTROL,
// 4 USER_DEFINED, 5 UNUSED, 6 BYTE; anything else UNDEFINED, no bit).
enum Attr : uint32_t {
  kUnknown = 1u << 0,
  kUnused = 1u << 1,
  kNormal = 1u << 2,
  kControl = 1u << 3,
  kUserDefined = 1u << 4,
  kByte = 1u << 5,
};

uint32_t attr_of_type(int32_t type) {
  switch (type) {
    case 1:
      return kNormal;
    case 2:
      return kUnknown;
    case 3:
      return kControl;
    case 4:
      return kUserDefined;
    case 5:
      return kUnused;
    case 6:
      return kByte;
    default:
      return 0;
  }
}

// --- byte-level BPE pre-tokenizers ----------------------------------------------------------

// The contractions, then letters, numbers, other symbols and whitespace, as GPT-2 splits words.
constexpr const char* kGpt2Words =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
// LLaMA 3's words: contractions in either case, a letter run with one leading non-letter, numbers
// of up to `digits` digits, symbols with the line breaks after them, whitespace. `digits` is
// "{1,3}" for LLaMA 3 and "" (one digit) for Qwen2.
std::string llama3_words(const std::string& digits) {
  return "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
         "\\p{N}" +
         digits + "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
}

struct PreTokenizerKind {
  std::vector<std::string> names;    // tokenizer.ggml.pre values
  std::vector<std::string> regexes;  // applied in turn, each splitting every piece (Isolated)
  bool ignore_merges = false;        // a word that is a token is taken whole
  bool add_bos = false;              // llama.cpp's default when add_bos_token is absent
};

const std::vector<PreTokenizerKind>& pre_tokenizer_kinds() {
  static const std::vector<PreTokenizerKind> kinds = {
      {{"default"},
       {"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2Words, "\\p{N}+", "[0-9][0-9][0-9]"},
       false,
       false},
      {{"gpt-2"}, {kGpt2Words}, false, false},
      {{"smollm", "starcoder"}, {"\\p{N}", kGpt2Words}, false, false},
      {{"llama-bpe", "llama3", "llama-v3"}, {llama3_words("{1,3}")}, true, true},
      {{"qwen2", "deepseek-r1-qwen"}, {llama3_words("")}, false, false},
  };
  return kinds;
}

std::string supported_pre_names() {
  std::string out;
  for (const auto& k : pre_tokenizer_kinds()) {
    for (const auto& n : k.names) out += (out.empty() ? "" : ", ") + n;
  }
  return out;
}

// `s` as a JSON string for messages; bytes that are not UTF-8 become U+FFFD.
std::string json_quoted(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

[[noreturn]] void refuse(const std::string& source, const std::string& what) {
  throw Error(std::string(kUnsupportedTokenizer) + "'" + source + "': " + what);
}

// The tokenizer.json document for a byte-level BPE vocabulary (no added tokens: those are found
// before the pipeline sees the text).
nlohmann::json bpe_document(const GgufVocabulary& v, const std::vector<std::string>& tokens,
                            const PreTokenizerKind& kind) {
  nlohmann::json vocab = nlohmann::json::object();
  for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
  // "A B" split at the first space after the first character (a token may begin with a space);
  // llama.cpp keeps the first rank of a pair listed twice.
  nlohmann::json merges = nlohmann::json::array();
  std::unordered_set<std::string> seen;
  for (size_t i = 0; i < v.merges.size(); ++i) {
    const std::string& m = v.merges[i];
    const size_t space = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (space == std::string::npos) {
      throw Error("'" + v.source + "': tokenizer.ggml.merges[" + std::to_string(i) +
                  "] is not a merge \"A B\": " + json_quoted(m));
    }
    if (!seen.insert(m).second) continue;
    merges.push_back({m.substr(0, space), m.substr(space + 1)});
  }
  nlohmann::json pre = nlohmann::json::array();
  for (const auto& r : kind.regexes) {
    pre.push_back({{"type", "Split"},
                   {"pattern", {{"Regex", r}}},
                   {"behavior", "Isolated"},
                   {"invert", false}});
  }
  pre.push_back({{"type", "ByteLevel"},
                 {"add_prefix_space", false},
                 {"trim_offsets", false},
                 {"use_regex", false}});
  // A byte whose character is not a token stays a symbol of its own in llama.cpp's merging, which
  // no merge joins, and is then dropped: the word is cut there. (The tokenizer.json BPE would drop
  // it first and merge across the gap.)
  std::string missing;
  for (int b = 0; b < 256; ++b) {
    const std::string& c = byte_level().byte_to_text[static_cast<size_t>(b)];
    if (vocab.contains(c)) continue;
    size_t k = 0;
    char hex[16];
    std::snprintf(hex, sizeof hex, "\\x{%X}", static_cast<unsigned>(utf8::next(c, k)));
    missing += hex;
  }
  if (!missing.empty()) {
    pre.push_back({{"type", "Split"},
                   {"pattern", {{"Regex", "[" + missing + "]"}}},
                   {"behavior", "Removed"},
                   {"invert", false}});
  }
  return {{"version", "1.0"},
          {"model",
           {{"type", "BPE"},
            {"vocab", std::move(vocab)},
            {"merges", std::move(merges)},
            {"ignore_merges", kind.ignore_merges}}},
          {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", std::move(pre)}}}};
}

// The texts llama.cpp takes for a role's token when the file gives the role no id (then typed
// CONTROL whatever the file says), and those it always takes to end a generation.
const std::map<std::string, std::vector<std::string>>& role_texts() {
  static const std::map<std::string, std::vector<std::string>> texts = {
      {"eot",
       {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
        "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>"}},
      {"eom", {"<|eom_id|>"}},
      {"fim_pre",
       {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
        "<|code_prefix|>", "<|prefix|>"}},
      {"fim_suf",
       {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
        "<|code_suffix|>", "<|suffix|>"}},
      {"fim_mid",
       {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
        "<|code_middle|>", "<|middle|>"}},
      {"fim_pad", {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}},
      {"fim_rep", {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}},
      {"fim_sep", {"<|file_sep|>"}},
      {"eog",
       {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
        "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]",
        "<｜end▁of▁sentence｜>", "<end_of_utterance>"}},
  };
  return texts;
}

const std::string kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  std::string out;
  size_t at = 0;
  for (size_t hit; (hit = s.find(from, at)) != std::string::npos; at = hit + from.size()) {
    out.append(s, at, hit - at);
    out += to;
  }
  out.append(s, at, std::string::npos);
  s = std::move(out);
}

class GgufTokenizer : public Tokenizer {
 public:
  explicit GgufTokenizer(const GgufVocabulary& v) : source_(v.source) {
    if (v.model == "llama") {
      spm_ = true;
    } else if (v.model != "gpt2") {
      refuse(v.source, "tokenizer.ggml.model '" + v.model +
                           "' is not supported natively (supported: gpt2, llama)");
    }
    if (v.tokens.empty()) throw Error("'" + v.source + "': tokenizer.ggml.tokens is empty");
    const size_t n = v.tokens.size();
    if (!v.scores.empty() && v.scores.size() < n) {
      throw Error("'" + v.source + "': tokenizer.ggml.scores has " +
                  std::to_string(v.scores.size()) + " entries for " + std::to_string(n) +
                  " tokens");
    }
    if (!v.token_types.empty() && v.token_types.size() < n) {
      throw Error("'" + v.source + "': tokenizer.ggml.token_type has " +
                  std::to_string(v.token_types.size()) + " entries for " + std::to_string(n) +
                  " tokens");
    }
    tokens_ = v.tokens;
    attrs_.assign(n, kNormal);
    scores_.assign(n, 0.0f);
    for (size_t i = 0; i < n; ++i) {
      if (tokens_[i].empty()) tokens_[i] = "[EMPTY_" + std::to_string(i) + "]";
      if (!v.scores.empty()) scores_[i] = v.scores[i];
      if (!v.token_types.empty()) attrs_[i] = attr_of_type(v.token_types[i]);
      if (!ids_.emplace(tokens_[i], static_cast<int64_t>(i)).second) {
        throw Error("'" + v.source + "': tokenizer.ggml.tokens lists " + json_quoted(tokens_[i]) +
                    " twice (ids " + std::to_string(ids_[tokens_[i]]) + " and " +
                    std::to_string(i) + ")");
      }
    }
    const PreTokenizerKind* kind = nullptr;
    if (spm_) {
      bos_ = 1, eos_ = 2;
      add_bos_ = true;
      add_space_prefix_ = true;
    } else {
      const std::string pre = v.pre.value_or("default");
      for (const auto& k : pre_tokenizer_kinds()) {
        if (std::find(k.names.begin(), k.names.end(), pre) != k.names.end()) kind = &k;
      }
      if (kind == nullptr) {
        refuse(v.source, "tokenizer.ggml.pre '" + pre + "' is not supported natively (supported: " +
                             supported_pre_names() + ")");
      }
      pre_ = pre;
      bos_ = 11, eos_ = 11;
      add_bos_ = kind->add_bos;
    }
    // Default ids outside the vocabulary mean none; a stated id outside it is ignored.
    if (bos_ >= static_cast<int64_t>(n)) bos_ = -1;
    if (eos_ >= static_cast<int64_t>(n)) eos_ = -1;
    if (v.bos_id && *v.bos_id >= 0 && *v.bos_id < static_cast<int64_t>(n)) bos_ = *v.bos_id;
    if (v.eos_id && *v.eos_id >= 0 && *v.eos_id < static_cast<int64_t>(n)) eos_ = *v.eos_id;
    add_bos_ = v.add_bos.value_or(add_bos_);
    add_eos_ = v.add_eos.value_or(false);
    add_space_prefix_ = v.add_space_prefix.value_or(add_space_prefix_);
    if ((add_bos_ && bos_ < 0) || (add_eos_ && eos_ < 0)) {
      throw Error("'" + v.source + "': tokenizer.ggml.add_" +
                  (add_bos_ && bos_ < 0 ? "bos" : "eos") +
                  "_token is true but the file has no such token in its " + std::to_string(n) +
                  "-token vocabulary");
    }
    mark_role_tokens(v);
    for (size_t i = 0; i < n; ++i) {
      if (attrs_[i] & (kControl | kUserDefined | kUnknown))
        specials_.push_back(static_cast<int64_t>(i));
    }
    std::stable_sort(specials_.begin(), specials_.end(),
                     [&](int64_t a, int64_t b) { return tokens_[a].size() > tokens_[b].size(); });
    pieces_.resize(n);
    for (size_t i = 0; i < n; ++i) pieces_[i] = piece_of(i);
    if (!spm_) {
      bpe_ =
          tokenizer_detail::load_tokenizer_json_document(bpe_document(v, tokens_, *kind), v.source);
    }
  }

  std::vector<int64_t> encode(std::string_view text, bool add_special_tokens) const override {
    const std::string valid = utf8::repair(text);
    std::vector<int64_t> out;
    if (add_special_tokens && add_bos_) out.push_back(bos_);
    bool prev_special = true;  // SentencePiece: a space before the text and after each token
    for (const auto& f : partition(valid)) {
      if (f.id >= 0) {
        out.push_back(f.id);
        prev_special = true;
        continue;
      }
      std::string_view part = std::string_view(valid).substr(f.begin, f.end - f.begin);
      if (!spm_) {
        const std::vector<int64_t> ids = bpe_->encode(part, false);
        out.insert(out.end(), ids.begin(), ids.end());
        continue;
      }
      std::string s = add_space_prefix_ && prev_special ? " " : "";
      s += part;
      replace_all(s, " ", kSpace);
      spm_tokenize(s, out);
      prev_special = false;
    }
    if (add_special_tokens && add_eos_) out.push_back(eos_);
    return out;
  }

  // llama_detokenize (remove_special false, unparse_special = !skip_special_tokens) without its
  // clean_spaces pass: the pieces llama_token_to_piece gives, one leading space dropped from the
  // first when the file adds a space prefix. The pass (" ," to ",", " 's" to "'s" for some
  // pre-tokenizers) is left out because it would make streamed text differ from the whole, and
  // llama.cpp's own server streams the pieces without it.
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const override {
    return utf8::repair(pieces_of(ids, skip_special_tokens));
  }

  // The pieces are bytes (a byte token's piece is its byte): the bytes at the end that begin a
  // character the ids leave incomplete are left out before the text is repaired.
  std::string decode_whole(const std::vector<int64_t>& ids, bool skip_special_tokens,
                           size_t& cut_bytes) const override {
    std::string out = pieces_of(ids, skip_special_tokens);
    const size_t whole = utf8::complete_prefix(out);
    cut_bytes = out.size() - whole;
    out.resize(whole);
    return utf8::repair(out);
  }

  // decode()'s bytes before their repair.
  std::string pieces_of(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
    std::string out;
    bool strip_space = add_space_prefix_;  // one leading space of the first piece
    for (const int64_t id : ids) {
      if (id < 0 || id >= static_cast<int64_t>(tokens_.size())) {
        throw Error("token id " + std::to_string(id) + " is outside the vocabulary of " +
                    describe() + ": the tokenizer does not match the model");
      }
      const auto i = static_cast<size_t>(id);
      std::string_view piece = pieces_[i];
      if (skip_special_tokens && (attrs_[i] & (kControl | kUnknown))) piece = {};
      if (strip_space && !piece.empty() && piece[0] == ' ') piece.remove_prefix(1);
      strip_space = false;
      out += piece;
    }
    return out;
  }

  int64_t vocab_size() const override { return static_cast<int64_t>(tokens_.size()); }
  bool is_special(int64_t id) const override {
    return id >= 0 && id < vocab_size() &&
           (attrs_[static_cast<size_t>(id)] & (kControl | kUnknown));
  }
  int64_t token_id(const std::string& token) const override {
    const auto it = ids_.find(token);
    return it == ids_.end() ? -1 : it->second;
  }
  std::string describe() const override {
    return std::string(spm_ ? "SentencePiece (GGUF llama)"
                            : "byte-level BPE (GGUF gpt2, pre '" + pre_ + "')") +
           ", " + std::to_string(tokens_.size()) + " tokens, '" + source_ + "'";
  }

 private:
  struct Fragment {
    size_t begin = 0, end = 0;
    int64_t id = -1;  // a special token's id, or -1 for text [begin, end)
  };

  // Where no id names a role, its usual texts become CONTROL (as llama.cpp's loader does), and the
  // end-of-generation texts always do.
  void mark_role_tokens(const GgufVocabulary& v) {
    for (const auto& [role, texts] : role_texts()) {
      if (role != "eog") {
        const auto it = v.role_ids.find(role);
        if (it != v.role_ids.end() && it->second >= 0 &&
            it->second < static_cast<int64_t>(tokens_.size()))
          continue;
      }
      for (const auto& t : texts) {
        const auto id = ids_.find(t);
        if (id != ids_.end()) attrs_[static_cast<size_t>(id->second)] |= kControl;
      }
    }
  }

  // What llama_token_to_piece gives for token i with special = true.
  std::string piece_of(size_t i) const {
    const std::string& t = tokens_[i];
    const uint32_t a = attrs_[i];
    if (a & (kControl | kUnknown | kUserDefined)) return t;
    if (a & kNormal) {
      if (spm_) {
        std::string s = t;
        replace_all(s, kSpace, " ");
        return s;
      }
      std::string s;
      size_t k = 0;
      const std::string valid = utf8::repair(t);
      while (k < valid.size()) {
        const size_t start = k;
        const char32_t c = utf8::next(valid, k);
        const auto b = byte_level().char_to_byte.find(c);
        if (b != byte_level().char_to_byte.end()) {
          s.push_back(static_cast<char>(b->second));
          continue;
        }
        s += "[UNK_BYTE_0x";
        for (size_t j = start; j < k; ++j) {
          static const char* hex = "0123456789abcdef";
          const auto byte = static_cast<unsigned char>(valid[j]);
          s += hex[byte >> 4];
          s += hex[byte & 15];
        }
        s += t + "]";
      }
      return s;
    }
    if (a & kByte) {
      if (t.size() < 5) return "";
      return std::string(1, static_cast<char>(std::strtol(t.substr(3, 2).c_str(), nullptr, 16)));
    }
    return "";
  }

  static size_t pair_of(char a, char b) {
    return (static_cast<size_t>(static_cast<unsigned char>(a)) << 8) |
           static_cast<unsigned char>(b);
  }

  // The special tokens in `text`, longest first: each splits every text fragment at each of its
  // occurrences, left to right (llama.cpp's tokenizer_st_partition with parse_special).
  std::vector<Fragment> partition(const std::string& text) const {
    std::vector<Fragment> frags;
    if (text.empty()) return frags;
    frags.push_back({0, text.size(), -1});
    // The byte pairs of the text: a token whose first two bytes never follow each other there is
    // passed over without a search (vocabularies may type thousands of tokens USER_DEFINED).
    std::vector<bool> pairs(1 << 16), bytes(256);
    for (size_t i = 0; i < text.size(); ++i) {
      bytes[static_cast<unsigned char>(text[i])] = true;
      if (i + 1 < text.size()) pairs[pair_of(text[i], text[i + 1])] = true;
    }
    std::vector<Fragment> next;
    for (const int64_t id : specials_) {
      const std::string& t = tokens_[static_cast<size_t>(id)];
      if (!(t.size() == 1 ? bytes[static_cast<unsigned char>(t[0])] : pairs[pair_of(t[0], t[1])]))
        continue;
      if (text.find(t) == std::string::npos) continue;
      next.clear();
      for (const auto& f : frags) {
        if (f.id >= 0) {
          next.push_back(f);
          continue;
        }
        const std::string_view within(text.data(), f.end);
        size_t at = f.begin;
        for (size_t hit; (hit = within.find(t, at)) != std::string_view::npos;
             at = hit + t.size()) {
          if (hit > at) next.push_back({at, hit, -1});
          next.push_back({hit, hit + t.size(), id});
        }
        if (at < f.end) next.push_back({at, f.end, -1});
      }
      frags.swap(next);
    }
    return frags;
  }

  // SentencePiece by llama.cpp's rule: start from characters, repeatedly merge the adjacent pair
  // whose concatenation is the best-scored token (the leftmost among equals); what is left and is
  // not a token becomes its bytes' <0xXX> tokens.
  void spm_tokenize(const std::string& text, std::vector<int64_t>& out) const {
    struct Symbol {
      int prev, next;
      size_t start, n;
    };
    struct Bigram {
      int left, right;
      float score;
      size_t size;
    };
    auto worse = [](const Bigram& a, const Bigram& b) {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    };
    std::vector<Symbol> symbols;
    for (size_t at = 0; at < text.size();) {
      const size_t n =
          std::min(utf8::char_length(static_cast<unsigned char>(text[at])), text.size() - at);
      const int index = static_cast<int>(symbols.size());
      symbols.push_back({index - 1, at + n == text.size() ? -1 : index + 1, at, n});
      at += n;
    }
    std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(worse);
    auto try_pair = [&](int left, int right) {
      if (left < 0 || right < 0) return;
      const std::string joined =
          text.substr(symbols[left].start, symbols[left].n + symbols[right].n);
      const auto it = ids_.find(joined);
      if (it == ids_.end()) return;
      queue.push({left, right, scores_[static_cast<size_t>(it->second)], joined.size()});
    };
    for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_pair(i - 1, i);
    while (!queue.empty()) {
      const Bigram b = queue.top();
      queue.pop();
      Symbol& l = symbols[b.left];
      Symbol& r = symbols[b.right];
      if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;
      l.n += r.n;
      r.n = 0;
      l.next = r.next;
      if (r.next >= 0) symbols[r.next].prev = b.left;
      try_pair(l.prev, b.left);
      try_pair(b.left, l.next);
    }
    for (int i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next) {
      const std::string piece = text.substr(symbols[i].start, symbols[i].n);
      const auto it = ids_.find(piece);
      if (it != ids_.end()) {
        out.push_back(it->second);
        continue;
      }
      for (const char c : piece) out.push_back(byte_token(static_cast<unsigned char>(c)));
    }
  }

  int64_t byte_token(unsigned char b) const {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    auto it = ids_.find(name);
    if (it == ids_.end()) it = ids_.find(std::string(1, static_cast<char>(b)));
    if (it == ids_.end()) {
      throw Error(describe() + ": the byte 0x" + std::string(name + 3, 2) +
                  " has no token (neither " + name + " nor the byte itself)");
    }
    return it->second;
  }

  std::string source_, pre_;
  bool spm_ = false, add_bos_ = false, add_eos_ = false, add_space_prefix_ = false;
  int64_t bos_ = -1, eos_ = -1;
  std::vector<std::string> tokens_, pieces_;
  std::vector<uint32_t> attrs_;
  std::vector<float> scores_;
  std::unordered_map<std::string, int64_t> ids_;
  std::vector<int64_t> specials_;  // CONTROL, USER_DEFINED and UNKNOWN tokens, longest first
  std::unique_ptr<Tokenizer> bpe_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_gguf_tokenizer(const GgufVocabulary& vocabulary) {
  return std::make_unique<GgufTokenizer>(vocabulary);
}

}  // namespace gengraph

// tokenizer.json, natively. The pipeline and each component follow the `tokenizers` library's
// definitions (added-token extraction, normalizer, pre-tokenizer, BPE model, post-processor;
// decoder chain for the way back); tests/framework/text checks the result token for token against
// the library on a corpus of 12,000 lines per tokenizer family.
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
#include "framework/text/tokenizer_bpe.h"
#include "framework/text/tokenizer_pipeline.h"
#include "framework/text/utf8.h"
#include "framework/util/error.h"
#include "framework/util/files.h"
#include "framework/util/json_at.h"
#include "framework/util/strings.h"
namespace gengraph {
namespace {

using namespace tokenizer_detail;  // NOLINT: this reader's own parts (tokenizer_pipeline.h)

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
    // The normalizer's output over all pieces is bounded by the text's size, the pre-tokenizer's
    // by the normalized text's (OutputBound).
    std::vector<Piece> normalized;
    OutputBound normalizer_bound(valid.size());
    size_t to_pre_tokenize = 0;
    for (auto& piece : pieces) {
      if (piece.id >= 0) {
        normalized.push_back(std::move(piece));
        continue;
      }
      if (normalizer_) normalizer_->normalize(piece.text, normalizer_bound);
      normalizer_bound.used += piece.text.size();
      to_pre_tokenize += piece.text.size();
      split_added(piece, normalized_trie_, normalized_tokens_, normalized);
    }
    // 3. Pre-tokenize what is not an added token; 4. the model.
    std::vector<int64_t> ids(add_special_tokens ? post_.before : std::vector<int64_t>{});
    Bpe::Cache& cache = bpe_->thread_cache();
    std::vector<Piece> run;
    OutputBound pre_tokenizer_bound(to_pre_tokenize);
    auto flush = [&] {
      if (run.empty()) return;
      if (pre_tokenizer_) {
        pre_tokenizer_->apply(run, pre_tokenizer_bound);
        pre_tokenizer_bound.used += total_bytes(run);
      }
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
    return chain(token_strings(ids, skip_special_tokens));
  }

  // A character cut at the end is found in the bytes of the last tokens (at most 3 bytes, so at
  // most 3 tokens hold it): byte-level tokens map to bytes through the ByteLevel table, <0xNN>
  // tokens are their byte, others their text. The byte-level decoder shows the cut bytes as one
  // U+FFFD at the end, which is dropped; byte-fallback shows one per byte token, which are left
  // out.
  std::string decode_whole(const std::vector<int64_t>& ids, bool skip_special_tokens,
                           size_t& cut_bytes) const override {
    cut_bytes = 0;
    std::vector<std::string> tokens = token_strings(ids, skip_special_tokens);
    if (!decoder_) return chain(std::move(tokens));
    const bool byte_level = kind_ == "byte-level BPE";
    const auto& table = tokenizer_detail::byte_level().char_to_byte;
    std::string bytes;
    size_t byte_tokens = 0;  // <0xNN> tokens at the end
    for (size_t k = tokens.size() > 4 ? tokens.size() - 4 : 0; k < tokens.size(); ++k) {
      const std::string& t = tokens[k];
      const auto b = byte_level ? std::nullopt : byte_token(t);
      byte_tokens = b ? byte_tokens + 1 : 0;
      if (b) {
        bytes.push_back(static_cast<char>(*b));
        continue;
      }
      std::string mapped;
      bool all = byte_level;
      for (size_t i = 0; all && i < t.size();) {
        const auto it = table.find(utf8::next(t, i));
        if (it == table.end()) all = false;
        if (all) mapped.push_back(static_cast<char>(it->second));
      }
      bytes += all ? mapped : t;
    }
    const size_t cut = bytes.size() - utf8::complete_prefix(bytes);
    if (cut == 0) return chain(std::move(tokens));
    if (!byte_level) {
      if (byte_tokens < cut) return chain(std::move(tokens));
      tokens.resize(tokens.size() - cut);
      cut_bytes = cut;
      return chain(std::move(tokens));
    }
    std::string text = chain(std::move(tokens));
    const std::string_view r = utf8::kReplacement;
    if (text.size() >= r.size() && text.compare(text.size() - r.size(), r.size(), r) == 0) {
      text.resize(text.size() - r.size());
      cut_bytes = cut;
    }
    return text;
  }

  // The strings decode() hands its decoder: each id's token (special ones left out when asked).
  std::vector<std::string> token_strings(const std::vector<int64_t>& ids,
                                         bool skip_special_tokens) const {
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
    return tokens;
  }

  std::string chain(std::vector<std::string> tokens) const {
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

  // The library gives each added token its id (below) and ignores the one the file states; a file
  // whose stated id differs (-1, 10^9, a hole) would have its token silently renumbered, so it is
  // refused, naming the key, the valid range and the id the token gets.
  void read_added_tokens(const JsonAt& list) {
    int64_t next_id = static_cast<int64_t>(bpe_->vocab().size());
    const std::vector<JsonAt> items = list.items(1 << 20);
    const int64_t most = static_cast<int64_t>(bpe_->vocab().size() + items.size()) - 1;
    for (const auto& t : items) {
      const int64_t stated =
          t["id"].integer_in(0, most,
                             "a token id from 0 to " + std::to_string(most) + " (the model's " +
                                 std::to_string(bpe_->vocab().size()) + " entries and " +
                                 std::to_string(items.size()) + " added tokens)");
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
      if (stated != a.id) {
        t["id"].fail(std::to_string(a.id) +
                     ", the id this token gets (its id in the model's vocabulary, " +
                     "else the next after the model's entries and the added tokens before it)");
      }
      std::string pattern = a.content;
      if (a.normalized && normalizer_) normalizer_->normalize(pattern, OutputBound(pattern.size()));
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

std::unique_ptr<Tokenizer> tokenizer_detail::load_tokenizer_json_document(const nlohmann::json& doc,
                                                                          const std::string& name) {
  return std::make_unique<JsonTokenizer>(doc, "'" + name + "'", name);
}

}  // namespace gengraph

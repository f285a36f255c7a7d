// The native tokenizer.json reader's BPE model (merges, byte fallback, the per-thread word cache),
// included by tokenizer_json.cpp only. Internal to framework/text.
#pragma once

#include <limits>
#include <queue>
#include <set>
#include <unordered_set>

#include "framework/text/tokenizer_pipeline.h"

namespace gengraph::tokenizer_detail {

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

}  // namespace gengraph::tokenizer_detail

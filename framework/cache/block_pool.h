// The blocks of a paged KV cache (<gengraph/ext/paged_cache.h>): which are free, how many
// sequences hold each (a reference count), and the prefix index that lets a sequence share the
// blocks another one filled with the same tokens.
//
// A block is published to the index once it is full: under the hash of every token up to its end
// (a chain over the blocks before it) together with its own tokens, which a lookup compares, so a
// hash collision cannot hand a sequence another one's keys. A published block is never written
// again. When no sequence holds it any more it stays in the index, free to be reused: allocate()
// takes never-used blocks first, then the least recently released published ones (evicting them
// from the index). Blocks a sequence holds are never evicted.
//
// The scheduler holds one pool; its counters (in use, cached, hits, tokens reused) are what the
// serving report and the leak checks read.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <unordered_map>
#include <vector>

namespace gengraph {

class BlockPool {
 public:
  BlockPool(int64_t blocks, int64_t block_size);

  int64_t blocks() const { return static_cast<int64_t>(refs_.size()); }
  int64_t block_size() const { return block_size_; }
  // Blocks some sequence holds (reference count above 0).
  int64_t in_use() const { return in_use_; }
  // Blocks no sequence holds that keep a published prefix (reusable, and allocatable).
  int64_t cached() const { return static_cast<int64_t>(lru_.size()); }
  // Blocks allocate() can hand out now: never used, or cached.
  int64_t available() const { return static_cast<int64_t>(free_.size()) + cached(); }

  // A block for a sequence to write, reference count 1; nullopt when every block is held.
  std::optional<int64_t> allocate();
  void retain(int64_t block);
  void release(int64_t block);

  // What a sequence whose tokens begin with `tokens` can reuse: the published blocks that hold
  // its first positions, whole (each retained for the caller), and then, in the next published
  // block that shares some leading tokens with it, how many (`partial`: positions to copy into a
  // block of the caller's own, 0 when none; `partial_block` is not retained). At most
  // `max_tokens` positions are reused in all.
  struct Match {
    std::vector<int64_t> blocks;
    int64_t partial_block = -1;
    int64_t partial = 0;
    int64_t tokens() const;  // positions reused (whole blocks and the partial copy)
    int64_t block_size = 0;
  };
  Match match(const std::vector<int64_t>& tokens, int64_t max_tokens);
  // How many leading positions of `tokens` published blocks hold, whole blocks only; retains
  // nothing (what a policy ranks by).
  int64_t cached_prefix(const std::vector<int64_t>& tokens) const;

  // Block `index` of a sequence (its positions index * block_size ..) is full with `tokens`'
  // positions up to its end: published under them unless an equal block already is. `block` must
  // be held by the caller.
  void publish(const std::vector<int64_t>& tokens, int64_t index, int64_t block);

  // The chain hashes of the first `count` whole blocks of `tokens` (what the index files them
  // under): a scheduler compares a waiting prompt's blocks with those a running one is computing.
  std::vector<uint64_t> block_hashes(const std::vector<int64_t>& tokens, int64_t count) const;

  // Counters for the report: sequences that reused any position, and the positions reused.
  int64_t hits() const { return hits_; }
  int64_t tokens_reused() const { return tokens_reused_; }
  void count_hit(int64_t tokens);

 private:
  struct Entry {
    uint64_t hash = 0;          // the chain hash up to the block's end
    int64_t parent = -1;        // the block before it in its sequence (-1: the first)
    std::vector<int64_t> toks;  // its own block_size tokens
    std::list<int64_t>::iterator lru;
    bool in_lru = false;
  };
  static uint64_t chain(uint64_t parent, const int64_t* tokens, int64_t n);
  // The published block with this chain hash, parent and tokens (block_size of them), or -1.
  int64_t find(uint64_t hash, int64_t parent, const int64_t* tokens) const;
  void evict(int64_t block);

  int64_t block_size_;
  std::vector<int64_t> refs_;
  std::vector<int64_t> free_;  // never used (or evicted), a stack
  int64_t in_use_ = 0;
  std::list<int64_t> lru_;  // cached and free to reuse, least recently released first
  std::unordered_map<int64_t, Entry> published_;        // block -> entry
  std::unordered_multimap<uint64_t, int64_t> by_hash_;  // chain hash -> block
  std::unordered_multimap<int64_t, int64_t> children_;  // parent block -> block
  int64_t hits_ = 0, tokens_reused_ = 0;
};

}  // namespace gengraph

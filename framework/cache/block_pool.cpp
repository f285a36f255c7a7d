#include "framework/cache/block_pool.h"

#include <algorithm>
#include <string>

#include "framework/util/error.h"

namespace gengraph {

BlockPool::BlockPool(int64_t blocks, int64_t block_size) : block_size_(block_size) {
  if (blocks < 1 || block_size < 1) {
    throw Error("BlockPool: expected at least one block of at least one position, found " +
                std::to_string(blocks) + " blocks of " + std::to_string(block_size));
  }
  refs_.assign(static_cast<size_t>(blocks), 0);
  free_.reserve(static_cast<size_t>(blocks));
  for (int64_t b = blocks - 1; b >= 0; --b) free_.push_back(b);  // block 0 first
}

int64_t BlockPool::Match::tokens() const {
  return static_cast<int64_t>(blocks.size()) * block_size + partial;
}

uint64_t BlockPool::chain(uint64_t parent, const int64_t* tokens, int64_t n) {
  // FNV-1a over the parent's hash and the tokens' bytes: a lookup compares the tokens anyway, so
  // the hash only has to spread.
  uint64_t h = 1469598103934665603ull ^ parent;
  const auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(parent);
  for (int64_t i = 0; i < n; ++i) mix(static_cast<uint64_t>(tokens[i]));
  return h;
}

int64_t BlockPool::find(uint64_t hash, int64_t parent, const int64_t* tokens) const {
  for (auto [lo, hi] = by_hash_.equal_range(hash); lo != hi; ++lo) {
    const Entry& e = published_.at(lo->second);
    if (e.parent == parent && std::equal(e.toks.begin(), e.toks.end(), tokens)) return lo->second;
  }
  return -1;
}

std::optional<int64_t> BlockPool::allocate() {
  int64_t b = -1;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    b = lru_.front();
    evict(b);
  } else {
    return std::nullopt;
  }
  refs_[static_cast<size_t>(b)] = 1;
  ++in_use_;
  return b;
}

void BlockPool::evict(int64_t block) {
  auto it = published_.find(block);
  if (it == published_.end()) return;
  std::vector<int64_t> kids;
  for (auto [lo, hi] = children_.equal_range(block); lo != hi; ++lo) kids.push_back(lo->second);
  Entry& e = it->second;
  if (e.in_lru) lru_.erase(e.lru);
  for (auto [lo, hi] = by_hash_.equal_range(e.hash); lo != hi; ++lo) {
    if (lo->second == block) {
      by_hash_.erase(lo);
      break;
    }
  }
  for (auto [lo, hi] = children_.equal_range(e.parent); lo != hi; ++lo) {
    if (lo->second == block) {
      children_.erase(lo);
      break;
    }
  }
  published_.erase(it);
  // Its descendants leave the index with it: no match reaches them any more, and this block's
  // number, reused, must not lead to them. Cached ones become plain free blocks; held ones are
  // freed as plain blocks when released.
  for (int64_t kid : kids) {
    const bool cached = published_.count(kid) && published_.at(kid).in_lru;
    evict(kid);
    if (cached) free_.push_back(kid);
  }
}

void BlockPool::retain(int64_t block) {
  int64_t& r = refs_.at(static_cast<size_t>(block));
  if (r == 0) {
    auto it = published_.find(block);
    if (it == published_.end() || !it->second.in_lru) {
      throw Error("BlockPool::retain: block " + std::to_string(block) +
                  " is neither held nor cached");
    }
    lru_.erase(it->second.lru);
    it->second.in_lru = false;
    ++in_use_;
  }
  ++r;
}

void BlockPool::release(int64_t block) {
  int64_t& r = refs_.at(static_cast<size_t>(block));
  if (r <= 0) {
    throw Error("BlockPool::release: block " + std::to_string(block) + " is not held");
  }
  if (--r > 0) return;
  --in_use_;
  auto it = published_.find(block);
  if (it == published_.end()) {
    free_.push_back(block);
    return;
  }
  it->second.lru = lru_.insert(lru_.end(), block);
  it->second.in_lru = true;
}

BlockPool::Match BlockPool::match(const std::vector<int64_t>& tokens, int64_t max_tokens) {
  Match m;
  m.block_size = block_size_;
  const int64_t bs = block_size_;
  const int64_t limit = std::min<int64_t>(max_tokens, static_cast<int64_t>(tokens.size()));
  uint64_t h = 0;
  int64_t parent = -1;
  int64_t at = 0;
  while (at + bs <= limit) {
    const uint64_t next = chain(h, tokens.data() + at, bs);
    const int64_t found = find(next, parent, tokens.data() + at);
    if (found < 0) break;
    retain(found);
    m.blocks.push_back(found);
    h = next;
    parent = found;
    at += bs;
  }
  // The next block: the published child of the last match sharing the most leading tokens.
  int64_t best = 0;
  for (auto [lo, hi] = children_.equal_range(parent); lo != hi; ++lo) {
    const Entry& e = published_.at(lo->second);
    int64_t same = 0;
    while (same < bs && at + same < limit &&
           e.toks[static_cast<size_t>(same)] == tokens[static_cast<size_t>(at + same)]) {
      ++same;
    }
    if (same > best) {
      best = same;
      m.partial_block = lo->second;
    }
  }
  m.partial = best;
  if (best == 0) m.partial_block = -1;
  return m;
}

std::vector<uint64_t> BlockPool::block_hashes(const std::vector<int64_t>& tokens,
                                              int64_t count) const {
  const int64_t bs = block_size_;
  count = std::min<int64_t>(count, static_cast<int64_t>(tokens.size()) / bs);
  std::vector<uint64_t> out;
  uint64_t h = 0;
  for (int64_t i = 0; i < count; ++i) {
    h = chain(h, tokens.data() + i * bs, bs);
    out.push_back(h);
  }
  return out;
}

int64_t BlockPool::cached_prefix(const std::vector<int64_t>& tokens) const {
  const int64_t bs = block_size_, n = static_cast<int64_t>(tokens.size());
  uint64_t h = 0;
  int64_t parent = -1, at = 0;
  while (at + bs <= n) {
    const uint64_t next = chain(h, tokens.data() + at, bs);
    const int64_t found = find(next, parent, tokens.data() + at);
    if (found < 0) break;
    h = next;
    parent = found;
    at += bs;
  }
  return at;
}

void BlockPool::count_hit(int64_t tokens) {
  if (tokens <= 0) return;
  ++hits_;
  tokens_reused_ += tokens;
}

void BlockPool::publish(const std::vector<int64_t>& tokens, int64_t index, int64_t block) {
  const int64_t bs = block_size_;
  if (static_cast<int64_t>(tokens.size()) < (index + 1) * bs) {
    throw Error("BlockPool::publish: block " + std::to_string(index) + " is not full");
  }
  if (refs_.at(static_cast<size_t>(block)) <= 0) {
    throw Error("BlockPool::publish: block " + std::to_string(block) + " is not held");
  }
  if (published_.count(block)) return;  // shared from the index already
  uint64_t h = 0;
  int64_t parent = -1;
  // The chain up to this block: every earlier block of the sequence must be published (they are
  // published in order as they fill), found by their tokens.
  for (int64_t i = 0; i <= index; ++i) {
    const int64_t* t = tokens.data() + i * bs;
    const uint64_t next = chain(h, t, bs);
    if (i == index) {
      if (find(next, parent, t) >= 0) return;  // a twin is published already
      Entry e;
      e.hash = next;
      e.parent = parent;
      e.toks.assign(t, t + bs);
      published_.emplace(block, std::move(e));
      by_hash_.emplace(next, block);
      children_.emplace(parent, block);
      return;
    }
    const int64_t found = find(next, parent, t);
    if (found < 0) return;  // an earlier block was evicted: this one cannot be reached
    h = next;
    parent = found;
  }
}

}  // namespace gengraph

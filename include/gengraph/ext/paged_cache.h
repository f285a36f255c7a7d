// A KV cache in blocks, a public header (<gengraph/extension.h> includes it): one preallocated pool
// of fixed-size blocks for every layer's keys and values, and a block table per sequence saying
// which blocks hold its positions (PagedAttention's layout, vLLM). Continuous batching
// (docs/serving.md) keeps every request's cache in one such pool; eager's `cache: paged` keeps a
// generation's rows in it too, so that a request's solo run and its batched run take the same
// kernels.
//
// The cache attends itself (KVCache::attends): each query reads the keys of its own sequence,
// positions first..last, through the block table, with gengraph's paged attention kernel
// (framework/kernels/paged_attention.h), whose per-query sums do not depend on the other queries,
// on how a prompt is split into chunks, or on where the blocks lie in the pool.
#pragma once

#include <ATen/Tensor.h>
#include <c10/core/TensorOptions.h>
#include <gengraph/ext/cache.h>

#include <cstdint>
#include <utility>

namespace gengraph {

struct PagedLayout {
  int64_t layers = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t blocks = 0;      // blocks in the pool
  int64_t block_size = 0;  // positions per block
};

class PagedCache final : public KVCache {
 public:
  PagedCache(const PagedLayout& layout, const at::TensorOptions& options);

  // What the step's N tokens (the forward's rows x T, row by row) write and read, set before each
  // forward by whoever lays out the step (the scheduler, eager's paged cache):
  struct Step {
    at::Tensor write_slots;   // [N] int64: the pool slot (block * block_size + offset) of each
                              // token's key and value
    at::Tensor block_tables;  // [S, max_blocks] int64: each sequence's blocks, in order
    at::Tensor seq;           // [N] int64: each token's sequence, a row of block_tables
    at::Tensor first, last;   // [N] int64: the positions of its sequence it reads (last: its own)
  };
  void set_step(Step step);
  const Step& step() const { return step_; }

  void write_validity(const at::Tensor& slots, const at::Tensor& token_valid) override;
  // Stores k_new, v_new ([rows, kv_heads, T, hd]) at the step's write slots; returns them.
  std::pair<at::Tensor, at::Tensor> update(int64_t layer, const at::Tensor& k_new,
                                           const at::Tensor& v_new,
                                           const at::Tensor& slots) override;
  at::Tensor validity() const override { return {}; }
  bool attends() const override { return true; }
  at::Tensor attend(int64_t layer, const at::Tensor& q, double scale, int64_t window) override;
  // Rows laid out block-contiguously (set_row_blocks): row r continues row parent_rows[r], its
  // blocks copied. A pool shared by requests is never reordered (it throws).
  void reorder(const at::Tensor& parent_rows, int64_t written = -1) override;
  // Nothing to forget: a query reads its own positions only, and the next write reuses the slots.
  void truncate(int64_t /*length*/) override {}

  // Eager's layout: row r owns blocks r * n .. r * n + n - 1 (what reorder() moves).
  void set_row_blocks(int64_t n) { row_blocks_ = n; }
  // Copies the first `count` positions of block `from` into block `to`, every layer: a shared
  // block copied before a sequence writes into it (copy on write).
  void copy_block(int64_t from, int64_t to, int64_t count);

  const PagedLayout& layout() const { return layout_; }
  // [layers, blocks * block_size, kv_heads, head_dim]
  const at::Tensor& keys() const { return keys_; }
  const at::Tensor& values() const { return values_; }

 private:
  PagedLayout layout_;
  at::Tensor keys_, values_;
  Step step_;
  int64_t row_blocks_ = 0;
};

}  // namespace gengraph

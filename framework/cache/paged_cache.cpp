#include <ATen/ATen.h>
#include <gengraph/ext/paged_cache.h>

#include <string>

#include "framework/kernels/paged_attention.h"
#include "framework/util/error.h"

namespace gengraph {

at::Tensor KVCache::attend(int64_t /*layer*/, const at::Tensor& /*q*/, double /*scale*/,
                           int64_t /*window*/) {
  throw Error("internal: KVCache::attend called on a cache that does not attend itself");
}

PagedCache::PagedCache(const PagedLayout& layout, const at::TensorOptions& options)
    : layout_(layout) {
  if (layout.layers < 1 || layout.kv_heads < 1 || layout.head_dim < 1 || layout.blocks < 1 ||
      layout.block_size < 1) {
    throw Error(
        "PagedCache: expected layers, kv_heads, head_dim, blocks and block_size >= 1, "
        "found " +
        std::to_string(layout.layers) + ", " + std::to_string(layout.kv_heads) + ", " +
        std::to_string(layout.head_dim) + ", " + std::to_string(layout.blocks) + ", " +
        std::to_string(layout.block_size));
  }
  // Zeros, not garbage: a slot never written is never read, but NaN bytes in one would still be
  // multiplied by an exact zero weight in a kernel that does not skip it.
  keys_ = at::zeros(
      {layout.layers, layout.blocks * layout.block_size, layout.kv_heads, layout.head_dim},
      options);
  values_ = at::zeros_like(keys_);
}

void PagedCache::set_step(Step step) {
  const int64_t n = step.write_slots.numel();
  for (const at::Tensor* t : {&step.seq, &step.first, &step.last}) {
    if (!t->defined() || t->numel() != n) {
      throw Error("PagedCache::set_step: expected seq, first and last of " + std::to_string(n) +
                  " tokens (as write_slots)");
    }
  }
  if (!step.block_tables.defined() || step.block_tables.dim() != 2) {
    throw Error("PagedCache::set_step: expected block_tables [sequences, max_blocks]");
  }
  step_ = std::move(step);
}

void PagedCache::write_validity(const at::Tensor& /*slots*/, const at::Tensor& /*token_valid*/) {}

std::pair<at::Tensor, at::Tensor> PagedCache::update(int64_t layer, const at::Tensor& k_new,
                                                     const at::Tensor& v_new,
                                                     const at::Tensor& /*slots*/) {
  const int64_t rows = k_new.size(0), kv = k_new.size(1), t = k_new.size(2), hd = k_new.size(3);
  if (rows * t != step_.write_slots.numel()) {
    throw Error("PagedCache: a step of " + std::to_string(rows) + " x " + std::to_string(t) +
                " tokens, but set_step laid out " + std::to_string(step_.write_slots.numel()));
  }
  // Token-major, as the pool: [rows * T, kv_heads, hd].
  const auto tokens = [&](const at::Tensor& x) {
    return x.transpose(1, 2).reshape({rows * t, kv, hd});
  };
  keys_.select(0, layer).index_copy_(0, step_.write_slots, tokens(k_new));
  values_.select(0, layer).index_copy_(0, step_.write_slots, tokens(v_new));
  return {k_new, v_new};
}

at::Tensor PagedCache::attend(int64_t layer, const at::Tensor& q, double scale, int64_t window) {
  const int64_t rows = q.size(0), heads = q.size(1), t = q.size(2), hd = q.size(3);
  const at::Tensor qt = q.transpose(1, 2).reshape({rows * t, heads, hd});  // token-major
  at::Tensor first = step_.first;
  if (window > 0) first = at::maximum(first, step_.last - (window - 1));
  const at::Tensor out = kernels::paged_attention(
      qt, keys_.select(0, layer), values_.select(0, layer), step_.block_tables, step_.seq, first,
      step_.last, layout_.block_size, scale);
  return out.view({rows, t, heads * hd});
}

void PagedCache::reorder(const at::Tensor& parent_rows, int64_t /*written*/) {
  if (row_blocks_ < 1) {
    throw Error(
        "PagedCache: a pool shared by requests is not reordered (beam search runs on "
        "eager's own caches)");
  }
  const int64_t n = row_blocks_, bs = layout_.block_size;
  const at::Tensor parents = parent_rows.to(keys_.device(), at::kLong);
  const int64_t rows = parents.numel();
  // Row r's slots are r * n * bs .. (r + 1) * n * bs - 1: gather the parents' into a temporary,
  // then copy back over the rows' own.
  const at::Tensor src =
      (parents.unsqueeze(1) * (n * bs) + at::arange(n * bs, parents.options()).unsqueeze(0))
          .reshape({-1});
  for (at::Tensor* pool : {&keys_, &values_}) {
    const at::Tensor moved = pool->index_select(1, src);
    pool->narrow(1, 0, rows * n * bs).copy_(moved);
  }
  count_reorder(2 * keys_.size(0) * rows * n * bs * keys_.size(2) * keys_.size(3) *
                keys_.element_size() * 2);
}

void PagedCache::copy_block(int64_t from, int64_t to, int64_t count) {
  const int64_t bs = layout_.block_size;
  if (from < 0 || to < 0 || from >= layout_.blocks || to >= layout_.blocks || count < 0 ||
      count > bs) {
    throw Error("PagedCache::copy_block: block " + std::to_string(from) + " -> " +
                std::to_string(to) + " (" + std::to_string(count) +
                " positions) outside a pool of " + std::to_string(layout_.blocks) + " blocks of " +
                std::to_string(bs));
  }
  if (count == 0 || from == to) return;
  for (at::Tensor* pool : {&keys_, &values_}) {
    pool->narrow(1, to * bs, count).copy_(pool->narrow(1, from * bs, count));
  }
}

}  // namespace gengraph

#include "framework/cache/kv_cache.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <string>

#include "framework/util/error.h"

namespace gengraph {

at::Tensor KVCache::expand_prefill(const at::Tensor& logits, int64_t copies, int64_t written,
                                   int64_t cache_rows) {
  const int64_t inputs = logits.size(0), rows = inputs * copies;
  const auto l = logits.options().dtype(at::kLong);
  at::Tensor parents = at::arange(inputs, l).repeat_interleave(copies);
  if (cache_rows > rows) parents = at::cat({parents, at::arange(rows, cache_rows, l)});
  const int64_t bytes = reorder_bytes_, n = reorders_;
  reorder(parents, written);
  reorder_bytes_ = bytes;
  reorders_ = n;
  return logits.index_select(0, parents.narrow(0, 0, rows));
}

void GrowingCache::write_validity(const at::Tensor& slots, const at::Tensor& token_valid) {
  valid_ = valid_.defined() ? at::cat({valid_, token_valid}, 1) : token_valid.clone();
  rings_.write_validity(slots, token_valid);
}

int64_t GrowingCache::bytes() const {
  int64_t n = valid_.defined() ? static_cast<int64_t>(valid_.nbytes()) : 0;
  for (const auto* layers : {&keys_, &values_})
    for (const at::Tensor& t : *layers)
      if (t.defined()) n += static_cast<int64_t>(t.nbytes());
  return n + rings_.bytes();
}

namespace {

// `buffer`'s first `length` positions moved into a new buffer of `room` positions, shaped and
// typed like `like` ([rows, heads, T, head_dim]).
at::Tensor regrown(const at::Tensor& buffer, int64_t length, int64_t room, const at::Tensor& like) {
  at::Tensor grown = at::empty({like.size(0), like.size(1), room, like.size(3)}, like.options());
  if (length > 0) grown.narrow(2, 0, length).copy_(buffer.narrow(2, 0, length));
  return grown;
}

}  // namespace

std::pair<at::Tensor, at::Tensor> GrowingCache::update(int64_t layer, const at::Tensor& k_new,
                                                       const at::Tensor& v_new,
                                                       const at::Tensor& /*slots*/) {
  if (rings_.holds(layer)) return rings_.update(layer, k_new, v_new);
  auto& k = keys_.at(layer);
  auto& v = values_.at(layer);
  int64_t& length = lengths_.at(layer);
  const int64_t t = k_new.size(2);
  if (k.defined() &&
      (k.size(0) != k_new.size(0) || k.size(1) != k_new.size(1) || k.size(3) != k_new.size(3))) {
    throw Error("GrowingCache: layer " + std::to_string(layer) + " holds rows x heads x head_dim " +
                std::to_string(k.size(0)) + " x " + std::to_string(k.size(1)) + " x " +
                std::to_string(k.size(3)) + ", a step wrote " + std::to_string(k_new.size(0)) +
                " x " + std::to_string(k_new.size(1)) + " x " + std::to_string(k_new.size(3)));
  }
  if (!k.defined() || length + t > k.size(2)) {
    // The backend's max_length when the write fits in it (what the memory estimate counts);
    // doubling only past it.
    const int64_t need = length + t;
    const int64_t room = need <= capacity_ ? capacity_ : std::max(capacity_, 2 * need);
    k = regrown(k, length, room, k_new);
    v = regrown(v, length, room, v_new);
  }
  k.narrow(2, length, t).copy_(k_new);
  v.narrow(2, length, t).copy_(v_new);
  length += t;
  return {k.narrow(2, 0, length), v.narrow(2, 0, length)};
}

void GrowingCache::truncate(int64_t length) {
  for (int64_t& l : lengths_) l = std::min(l, length);
  if (valid_.defined()) valid_ = valid_.narrow(1, 0, std::min(length, valid_.size(1)));
  rings_.truncate(length);
}

void GrowingCache::reorder(const at::Tensor& parent_rows, int64_t /*written: all of it is*/) {
  // A gather of the written positions into new buffers of the same room: each byte read once and
  // written once.
  int64_t bytes = 0;
  for (size_t layer = 0; layer < keys_.size(); ++layer) {
    for (at::Tensor* buffer : {&keys_[layer], &values_[layer]}) {
      if (!buffer->defined()) continue;
      const at::Tensor written = buffer->narrow(2, 0, lengths_[layer]);
      at::Tensor moved =
          at::empty({parent_rows.size(0), buffer->size(1), buffer->size(2), buffer->size(3)},
                    buffer->options());
      at::Tensor into = moved.narrow(2, 0, lengths_[layer]);
      at::index_select_out(into, written, 0, parent_rows);
      bytes += 2 * static_cast<int64_t>(into.numel() * into.element_size());
      *buffer = std::move(moved);
    }
  }
  valid_ = valid_.index_select(0, parent_rows);
  bytes += rings_.reorder(parent_rows);
  count_reorder(bytes + 2 * static_cast<int64_t>(valid_.nbytes()));
}

namespace {

// Per layer: its place among the layers held at max_len, or -1 for a layer in a ring.
std::vector<int64_t> full_layer_index(int64_t layers, const WindowRings& rings) {
  std::vector<int64_t> index;
  int64_t next = 0;
  for (int64_t i = 0; i < layers; ++i) index.push_back(rings.holds(i) ? -1 : next++);
  return index;
}

}  // namespace

StaticCache::StaticCache(const CacheShape& s, const at::TensorOptions& options, Reorder mode)
    : shape_(s), rings_(s.windows), mode_(mode) {
  if (rings_.active() && static_cast<int64_t>(s.windows.layers.size()) != s.layers) {
    throw Error("StaticCache: the window layout names " + std::to_string(s.windows.layers.size()) +
                " layers, the cache holds " + std::to_string(s.layers));
  }
  index_ = full_layer_index(s.layers, rings_);
  const int64_t full = s.layers - s.windows.count();
  keys_ = at::zeros({full, s.rows, s.kv_heads, s.max_len, s.head_dim}, options);
  values_ = at::zeros({full, s.rows, s.kv_heads, s.max_len, s.head_dim}, options);
  valid_ = at::zeros({s.rows, s.max_len}, options.dtype(at::kBool));
  rings_.allocate(s.rows, s.kv_heads, s.head_dim, options);
}

StaticCache::StaticCache(at::Tensor keys, at::Tensor values, at::Tensor valid)
    : keys_(std::move(keys)), values_(std::move(values)), valid_(std::move(valid)) {
  shape_ =
      CacheShape{keys_.size(0), keys_.size(1), keys_.size(2), keys_.size(3),
                 keys_.size(4), WindowLayout{}};  // stacked buffers: every layer at full length
  index_ = full_layer_index(keys_.size(0), rings_);
}

StaticCache StaticCache::first_rows(int64_t rows) const {
  StaticCache c = *this;
  c.keys_ = keys_.narrow(1, 0, rows);
  c.values_ = values_.narrow(1, 0, rows);
  c.valid_ = valid_.narrow(0, 0, rows);
  c.rings_ = rings_.first_rows(rows);
  c.shape_.rows = rows;
  c.spare_keys_ = c.spare_values_ = at::Tensor();
  return c;
}

int64_t StaticCache::bytes() const {
  int64_t n = 0;
  for (const at::Tensor* t : {&keys_, &values_, &valid_, &spare_keys_, &spare_values_})
    if (t->defined()) n += static_cast<int64_t>(t->nbytes());
  return n + rings_.bytes();
}

void StaticCache::write_validity(const at::Tensor& slots, const at::Tensor& token_valid) {
  valid_.index_copy_(1, slots, token_valid);
  rings_.write_validity(slots, token_valid);
}

std::pair<at::Tensor, at::Tensor> StaticCache::update(int64_t layer, const at::Tensor& k_new,
                                                      const at::Tensor& v_new,
                                                      const at::Tensor& slots) {
  if (rings_.holds(layer)) return rings_.update(layer, k_new, v_new);
  at::Tensor k = keys_.select(0, index_.at(layer));  // views: writes land in the stacked buffers
  at::Tensor v = values_.select(0, index_.at(layer));
  k.index_copy_(2, slots, k_new);
  v.index_copy_(2, slots, v_new);
  return {k, v};
}

std::optional<std::pair<at::Tensor, at::Tensor>> StaticCache::layer_buffers(int64_t layer) {
  if (rings_.holds(layer)) return std::nullopt;  // written at slot % ring, by update()
  return std::make_pair(keys_.select(0, index_.at(layer)), values_.select(0, index_.at(layer)));
}

void StaticCache::reorder(const at::Tensor& parent_rows, int64_t written) {
  // A step that ran with autograd on may have left the buffers requiring grad (a Python trace
  // writes its parameters' products into them in place); the reorder is no part of any graph, and
  // index_select_out and in-place copies refuse such tensors.
  const at::AutoGradMode no_grad(false);
  const int64_t n = written < 0 ? max_len() : std::min(written, max_len());
  // Only the written slots: the others are invalid until a step writes them, so whatever they
  // hold is never read.
  const at::Tensor k = keys_.narrow(3, 0, n), v = values_.narrow(3, 0, n);
  int64_t moved = static_cast<int64_t>(k.numel() + v.numel()) * keys_.element_size();
  if (mode_ == Reorder::kSwap) {
    if (!spare_keys_.defined()) {
      // Zeros, as the first buffers: attention masks unwritten slots, but a masked score is still
      // computed, and garbage (NaN, inf) there would poison the softmax.
      spare_keys_ = at::zeros_like(keys_);
      spare_values_ = at::zeros_like(values_);
    }
    at::Tensor k_out = spare_keys_.narrow(3, 0, n), v_out = spare_values_.narrow(3, 0, n);
    at::index_select_out(k_out, k, 1, parent_rows);
    at::index_select_out(v_out, v, 1, parent_rows);
    std::swap(keys_, spare_keys_);
    std::swap(values_, spare_values_);
    moved *= 2;  // read once, written once
  } else {
    // In place, so the buffers keep their addresses (a captured graph reads them by address).
    k.copy_(k.index_select(1, parent_rows));
    v.copy_(v.index_select(1, parent_rows));
    moved *= 4;  // gathered into a temporary, then copied back
  }
  valid_.copy_(valid_.index_select(0, parent_rows));
  moved += rings_.reorder(parent_rows);
  count_reorder(moved + 4 * static_cast<int64_t>(valid_.nbytes()));
}

void StaticCache::truncate(int64_t length) {
  // The slots from `length` on are no longer read; the next write overwrites them.
  valid_.narrow(1, length, valid_.size(1) - length).fill_(false);
  rings_.truncate(length);
}

void StaticCache::reset() {
  valid_.fill_(false);
  rings_.reset();
  reset_reorder_count();
}

StaticCache& reuse_or_allocate(std::unique_ptr<StaticCache>& cache, const CacheShape& shape,
                               const at::TensorOptions& options, Reorder mode) {
  if (cache) {
    const CacheShape& s = cache->shape();
    const at::Tensor& k = cache->keys();
    if (s.layers == shape.layers && s.rows == shape.rows && s.kv_heads == shape.kv_heads &&
        s.max_len == shape.max_len && s.head_dim == shape.head_dim && s.windows == shape.windows &&
        k.options().dtype() == options.dtype() && k.device() == options.device() &&
        cache->mode() == mode) {
      cache->reset();  // same shape: reuse the buffers
      return *cache;
    }
  }
  cache.reset();  // the old buffers go before the new ones are allocated
  cache = std::make_unique<StaticCache>(shape, options, mode);
  return *cache;
}

at::Tensor attention_mask(const at::Tensor& valid, const at::Tensor& slots) {
  const auto key_index = at::arange(valid.size(1), slots.options());  // [L]
  const auto q = slots.unsqueeze(1);                                  // [T, 1]
  const auto causal = key_index.unsqueeze(0).le(q);                   // [T, L]
  const auto self = key_index.unsqueeze(0).eq(q);                     // [T, L]
  // [rows, 1, 1, L] & [1, 1, T, L] | [1, 1, T, L]
  return valid.unsqueeze(1)
      .unsqueeze(1)
      .logical_and(causal.unsqueeze(0).unsqueeze(0))
      .logical_or(self.unsqueeze(0).unsqueeze(0));
}

}  // namespace gengraph

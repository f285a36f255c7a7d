#include "framework/cache/kv_cache.h"

#include <ATen/ATen.h>

namespace gengraph {

void GrowingCache::write_validity(const at::Tensor& /*slots*/, const at::Tensor& token_valid) {
  valid_ = valid_.defined() ? at::cat({valid_, token_valid}, 1) : token_valid.clone();
}

std::pair<at::Tensor, at::Tensor> GrowingCache::update(int64_t layer, const at::Tensor& k_new,
                                                       const at::Tensor& v_new,
                                                       const at::Tensor& /*slots*/) {
  auto& k = keys_.at(layer);
  auto& v = values_.at(layer);
  k = k.defined() ? at::cat({k, k_new}, 2) : k_new;
  v = v.defined() ? at::cat({v, v_new}, 2) : v_new;
  return {k, v};
}

void GrowingCache::reorder(const at::Tensor& parent_rows) {
  for (auto& k : keys_) k = k.index_select(0, parent_rows);
  for (auto& v : values_) v = v.index_select(0, parent_rows);
  valid_ = valid_.index_select(0, parent_rows);
}

StaticCache::StaticCache(const CacheShape& s, const at::TensorOptions& options)
    : keys_(at::zeros({s.layers, s.rows, s.kv_heads, s.max_len, s.head_dim}, options)),
      values_(at::zeros({s.layers, s.rows, s.kv_heads, s.max_len, s.head_dim}, options)),
      valid_(at::zeros({s.rows, s.max_len}, options.dtype(at::kBool))) {}

StaticCache::StaticCache(at::Tensor keys, at::Tensor values, at::Tensor valid)
    : keys_(std::move(keys)), values_(std::move(values)), valid_(std::move(valid)) {}

void StaticCache::write_validity(const at::Tensor& slots, const at::Tensor& token_valid) {
  valid_.index_copy_(1, slots, token_valid);
}

std::pair<at::Tensor, at::Tensor> StaticCache::update(int64_t layer, const at::Tensor& k_new,
                                                      const at::Tensor& v_new,
                                                      const at::Tensor& slots) {
  at::Tensor k = keys_.select(0, layer);  // views: writes land in the stacked buffers
  at::Tensor v = values_.select(0, layer);
  k.index_copy_(2, slots, k_new);
  v.index_copy_(2, slots, v_new);
  return {k, v};
}

void StaticCache::reorder(const at::Tensor& parent_rows) {
  // In place, so the buffers keep their addresses (a captured graph reads them by address).
  keys_.copy_(keys_.index_select(1, parent_rows));
  values_.copy_(values_.index_select(1, parent_rows));
  valid_.copy_(valid_.index_select(0, parent_rows));
}

void StaticCache::reset() { valid_.fill_(false); }

StaticCache& reuse_or_allocate(std::unique_ptr<StaticCache>& cache, const CacheShape& shape,
                               const at::TensorOptions& options) {
  const auto& k = cache ? cache->keys() : at::Tensor();
  if (cache && k.size(0) == shape.layers && k.size(1) == shape.rows &&
      k.size(2) == shape.kv_heads && k.size(3) == shape.max_len && k.size(4) == shape.head_dim &&
      k.options().dtype() == options.dtype() && k.device() == options.device()) {
    cache->reset();  // same shape: reuse the buffers
    return *cache;
  }
  cache.reset();  // the old buffers go before the new ones are allocated
  cache = std::make_unique<StaticCache>(shape, options);
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

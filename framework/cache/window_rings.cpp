// WindowRings: a cache's sliding-window layers held in rings of window + spare slots
// (<gengraph/ext/cache.h>).
#include <ATen/ATen.h>
#include <gengraph/ext/cache.h>

#include <algorithm>
#include <string>

#include "framework/util/error.h"

namespace gengraph {

int64_t WindowLayout::count() const {
  return window > 0 ? static_cast<int64_t>(std::count(layers.begin(), layers.end(), true)) : 0;
}

WindowRings::WindowRings(WindowLayout layout) : layout_(std::move(layout)) {
  if (layout_.window <= 0) return;
  if (layout_.spare < 0) {
    throw Error("WindowRings: expected a spare of at least 0 slots, found " +
                std::to_string(layout_.spare));
  }
  int64_t rings = 0;
  for (const bool windowed : layout_.layers) index_.push_back(windowed ? rings++ : -1);
  if (rings == 0) layout_ = WindowLayout{};  // no layer is windowed: nothing to hold
}

void WindowRings::allocate(int64_t rows, int64_t kv_heads, int64_t head_dim,
                           const at::TensorOptions& options) {
  if (!active()) return;
  const int64_t ring = layout_.ring();
  // Zeros, as the static cache's buffers: a masked score is still computed, and garbage (NaN)
  // there would poison the softmax.
  keys_ = at::zeros({layout_.count(), rows, kv_heads, ring, head_dim}, options);
  values_ = at::zeros_like(keys_);
  if (!valid_.defined()) {
    valid_ = at::zeros({rows, ring}, options.dtype(at::kBool));
    held_ = at::full({ring}, -1, options.dtype(at::kLong));
  }
}

void WindowRings::write_validity(const at::Tensor& slots, const at::Tensor& token_valid) {
  if (!active()) return;
  const int64_t ring = layout_.ring(), window = layout_.window, t = slots.size(0);
  if (!valid_.defined()) {  // a growing cache's first write
    valid_ = at::zeros({token_valid.size(0), ring}, token_valid.options());
    held_ = at::full({ring}, -1, slots.options());
  }
  const at::Tensor q = slots.unsqueeze(1);  // [T, 1]
  // Reads of key slots `k` ([1, K]) by the step's queries: the causal window.
  const auto near = [&](const at::Tensor& k) { return k.le(q).logical_and((q - k).lt(window)); };
  const auto rows_mask = [](const at::Tensor& valid, const at::Tensor& reads) {
    return valid.unsqueeze(1).unsqueeze(1).logical_and(reads.unsqueeze(0).unsqueeze(0));
  };
  beside_ = t > layout_.spare + 1;
  if (!beside_) {
    // Written first, then read: the T tokens overwrite slots at least `window` behind the
    // step's first query, which none of its queries reads.
    write_at_ = slots.remainder(ring);
    kept_from_ = 0;
    held_.index_copy_(0, write_at_, slots);
    valid_.index_copy_(1, write_at_, token_valid);
    const at::Tensor k = held_.unsqueeze(0);  // [1, ring]
    // A query may always read itself, so rows of pure padding stay finite (attention_mask's rule).
    mask_ = rows_mask(valid_, near(k)).logical_or(k.eq(q).unsqueeze(0).unsqueeze(0));
    return;
  }
  // The ring as it was (the slots before this step's) beside the step's own keys.
  const at::Tensor old = held_.unsqueeze(0);
  const at::Tensor own = slots.unsqueeze(0);
  const at::Tensor self = at::eye(t, token_valid.options()).unsqueeze(0).unsqueeze(0);
  mask_ = at::cat({rows_mask(valid_, near(old).logical_and(old.lt(q))),
                   rows_mask(token_valid, near(own)).logical_or(self)},
                  -1);
  // Then the last ring() tokens are kept.
  kept_from_ = std::max<int64_t>(0, t - ring);
  const at::Tensor kept = slots.narrow(0, kept_from_, t - kept_from_);
  write_at_ = kept.remainder(ring);
  held_.index_copy_(0, write_at_, kept);
  valid_.index_copy_(1, write_at_, token_valid.narrow(1, kept_from_, t - kept_from_));
}

std::pair<at::Tensor, at::Tensor> WindowRings::update(int64_t layer, const at::Tensor& k_new,
                                                      const at::Tensor& v_new) {
  if (!keys_.defined()) {
    allocate(k_new.size(0), k_new.size(1), k_new.size(3), k_new.options());
  }
  const int64_t i = index_.at(layer), t = k_new.size(2);
  at::Tensor k = keys_.select(0, i), v = values_.select(0, i);  // views of the stacked rings
  if (!beside_) {
    k.index_copy_(2, write_at_, k_new);
    v.index_copy_(2, write_at_, v_new);
    return {k, v};
  }
  // Read before written: the concatenation copies the ring as it was.
  at::Tensor keys = at::cat({k, k_new}, 2), values = at::cat({v, v_new}, 2);
  k.index_copy_(2, write_at_, k_new.narrow(2, kept_from_, t - kept_from_));
  v.index_copy_(2, write_at_, v_new.narrow(2, kept_from_, t - kept_from_));
  return {keys, values};
}

int64_t WindowRings::reorder(const at::Tensor& parent_rows) {
  if (!active() || !valid_.defined()) return 0;
  // In place where the rows stay as many: the buffers keep their addresses (a captured graph
  // reads them by address); a growing cache's shared prefill makes more rows than it ran.
  const bool in_place = parent_rows.size(0) == valid_.size(0);
  const auto gather = [&](at::Tensor& t, int64_t dim) {
    at::Tensor moved = t.index_select(dim, parent_rows);
    if (in_place) {
      t.copy_(moved);
    } else {
      t = moved;
    }
    return (in_place ? 4 : 2) * static_cast<int64_t>(t.nbytes());
  };
  int64_t bytes = 0;
  for (at::Tensor* t : {&keys_, &values_})
    if (t->defined()) bytes += gather(*t, 1);
  return bytes + gather(valid_, 0);
}

void WindowRings::truncate(int64_t length) {
  if (!active() || !valid_.defined()) return;
  valid_.masked_fill_(held_.ge(length).unsqueeze(0), false);
  held_.masked_fill_(held_.ge(length), -1);
  // The next query (at `length`) reads slots length - window + 1 .. length - 1: each must still be
  // held (a step longer than spare + 1 tokens overwrote older slots it may have needed).
  const int64_t first = std::max<int64_t>(0, length - layout_.window + 1);
  if (length <= first) return;
  const int64_t held = held_.ge(first).logical_and(held_.lt(length)).sum().item<int64_t>();
  if (held < length - first) {
    throw Error("KV cache: rewinding to " + std::to_string(length) +
                " positions needs the sliding window's last " + std::to_string(length - first) +
                " slots, but its ring of " + std::to_string(layout_.ring()) + " holds " +
                std::to_string(held) + " of them (a step longer than the ring's spare of " +
                std::to_string(layout_.spare) +
                " + 1 tokens is being taken back); raise the backend's option ring_spare or "
                "propose fewer tokens per step");
  }
}

void WindowRings::reset() {
  if (!valid_.defined()) return;
  valid_.fill_(false);
  held_.fill_(-1);
}

WindowRings WindowRings::first_rows(int64_t rows) const {
  WindowRings r = *this;
  if (!active() || !valid_.defined()) return r;
  if (keys_.defined()) {
    r.keys_ = keys_.narrow(1, 0, rows);
    r.values_ = values_.narrow(1, 0, rows);
  }
  r.valid_ = valid_.narrow(0, 0, rows);
  return r;  // held_ is the same tensor: the rows share their slots
}

int64_t WindowRings::bytes() const {
  int64_t n = 0;
  for (const at::Tensor* t : {&keys_, &values_, &valid_, &held_})
    if (t->defined()) n += static_cast<int64_t>(t->nbytes());
  return n;
}

}  // namespace gengraph

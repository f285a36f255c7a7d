// Key/value caches, a public header (<gengraph/extension.h> includes it): what a forward backend
// keeps between steps and hands to the model (run_forward_step, <gengraph/ext/model.h>). Two kinds
// share one interface so that every architecture works with both:
//  - GrowingCache: appends along the sequence axis (concatenation); attention reads only what was
//    written. The natural eager choice.
//  - StaticCache: preallocated [layers, rows, kv_heads, max_len, head_dim] for keys and for values,
//    written in place with index_copy_ at slots given as a tensor. Shapes never change, which is
//    what a trace or a CUDA graph needs; unwritten slots are masked out by the validity mask.
// Both track which cache slots hold real tokens (left padding does not), so attention can mask
// them. Either can hold its sliding-window layers (Mistral, Qwen2, Gemma 3's local layers) in
// rings of window + spare positions instead of the whole length (WindowRings).
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace gengraph {

// The sliding-window layers a cache holds in rings, and the rings' room. A windowed layer's query
// at cache slot s reads the slots s - window + 1 .. s, so its layer needs no more than the last
// `window` slots; a ring keeps window + spare of them, written at slot % ring.
struct WindowLayout {
  int64_t window = 0;        // slots a windowed layer's query reads, its own included (0: no rings)
  int64_t spare = 0;         // room past the window: a step of up to spare + 1 tokens (a decode, a
                             // speculative verify) writes the ring first and attends over it; a
                             // longer one (a prompt) attends over the ring beside its own keys
  std::vector<bool> layers;  // per layer: whether it is held in a ring
  int64_t ring() const { return window + spare; }
  int64_t count() const;  // layers held in rings
  bool operator==(const WindowLayout& o) const {
    return window == o.window && spare == o.spare && layers == o.layers;
  }
};

struct CacheShape {
  int64_t layers = 0;
  int64_t rows = 0;
  int64_t kv_heads = 0;
  int64_t max_len = 0;
  int64_t head_dim = 0;
  WindowLayout windows;  // none by default: every layer holds max_len slots
};

class KVCache {
 public:
  virtual ~KVCache() = default;

  // Records which of the T slots written in this step hold real tokens.
  //   slots:       [T] int64, the cache positions this step writes
  //   token_valid: [rows, T] bool, false for left padding
  virtual void write_validity(const at::Tensor& slots, const at::Tensor& token_valid) = 0;

  // Stores one layer's new keys/values and returns what attention reads.
  //   k_new, v_new: [rows, kv_heads, T, head_dim]
  //   returns:      [rows, kv_heads, L, head_dim] (L = written length, or max_len when static)
  virtual std::pair<at::Tensor, at::Tensor> update(int64_t layer, const at::Tensor& k_new,
                                                   const at::Tensor& v_new,
                                                   const at::Tensor& slots) = 0;

  // [rows, L] bool: which cache slots attention may read (before the causal constraint).
  virtual at::Tensor validity() const = 0;

  // For a cache that holds sliding-window layers in rings: this step's mask for those layers,
  // [rows, 1, T, K] bool over the K keys update() returns for them (made by write_validity);
  // undefined otherwise (the models then narrow attn_mask to the window themselves).
  virtual at::Tensor window_mask() const { return {}; }

  // One layer's key and value buffers, [rows, kv_heads, L, head_dim] views that a kernel may write
  // at the step's slots in place of update() (kernels::rotary_qkv_into), and that attention then
  // reads as update() would return them; nullopt when update() must be called (a growing cache
  // concatenates).
  virtual std::optional<std::pair<at::Tensor, at::Tensor>> layer_buffers(int64_t layer) {
    return std::nullopt;
  }

  // A cache that computes attention itself, over its own layout (PagedCache: keys and values in
  // blocks, each query over its own sequence's). The models then attend through attend() after
  // update() has stored the step's keys and values, instead of over update()'s tensors with
  // ForwardBatch::attn_mask (left undefined for such a cache).
  virtual bool attends() const { return false; }
  // Attention of the step's queries over what the cache holds, for a cache that attends().
  //   q: [rows, heads, T, hd]; window: the layer's sliding window in positions (0: none)
  //   -> [rows, T, heads * hd]
  virtual at::Tensor attend(int64_t layer, const at::Tensor& q, double scale, int64_t window);

  // Beam search: row r continues the history of row parent_rows[r]. parent_rows: [rows] int64.
  // `written`: how many leading cache slots hold tokens (the backend's length()); only those are
  // moved. -1: all of them (a captured graph, which cannot know the length).
  virtual void reorder(const at::Tensor& parent_rows, int64_t written = -1) = 0;

  // Speculative decoding: forgets every slot from `length` on (the candidates not kept), so that
  // attention no longer reads them and the next write reuses them.
  virtual void truncate(int64_t length) = 0;

  // After a prefill of one row per input in the first rows (ForwardBackend shared prefills):
  // each input's `written` slots copied to the `copies` consecutive rows it stands for, as a
  // reorder does but without counting as a beam step's; rows past inputs x copies up to
  // `cache_rows` (bucket padding) keep themselves. Returns the logits of the inputs x copies rows.
  //   logits: [inputs, vocab] -> [inputs * copies, vocab]
  at::Tensor expand_prefill(const at::Tensor& logits, int64_t copies, int64_t written,
                            int64_t cache_rows);

  // Bytes one reorder read and wrote (keys, values and validity, every layer), on average over
  // those since the cache was made or reset; 0 without any: the traffic a beam step adds to the
  // weights' (the results' bytes_moved_per_step).
  double reorder_bytes_per_step() const {
    return reorders_ ? static_cast<double>(reorder_bytes_) / static_cast<double>(reorders_) : 0.0;
  }

 protected:
  void count_reorder(int64_t bytes) {
    reorder_bytes_ += bytes;
    ++reorders_;
  }
  void reset_reorder_count() { reorder_bytes_ = reorders_ = 0; }

 private:
  int64_t reorder_bytes_ = 0, reorders_ = 0;
};

// The rings of a cache's sliding-window layers (WindowLayout): keys and values of ring() slots per
// layer, the cache slot each ring slot holds (shared by the rows), and which rows hold a real
// token there. write_validity() records a step and makes its mask; update() stores a layer's keys.
//  - A step of T <= spare + 1 tokens writes them at slot % ring, then its queries read the ring:
//    the T tokens overwrite slots at least window + spare - T + 1 >= window behind, which no query
//    of the step reads. Shapes never change, so a trace or a CUDA graph captures it.
//  - A longer step (a prompt) reads the ring as it was beside its own T keys (ring + T of them),
//    then keeps its last ring() tokens.
// A step's slots are consecutive (every caller writes them so).
class WindowRings {
 public:
  WindowRings() = default;
  explicit WindowRings(WindowLayout layout);
  bool active() const { return layout_.window > 0; }
  bool holds(int64_t layer) const { return active() && index_.at(layer) >= 0; }
  const WindowLayout& layout() const { return layout_; }
  // The buffers now (a static cache, whose buffers a captured graph reads by address); a growing
  // cache leaves them to its first write.
  void allocate(int64_t rows, int64_t kv_heads, int64_t head_dim, const at::TensorOptions& options);
  void write_validity(const at::Tensor& slots, const at::Tensor& token_valid);
  const at::Tensor& mask() const { return mask_; }
  std::pair<at::Tensor, at::Tensor> update(int64_t layer, const at::Tensor& k_new,
                                           const at::Tensor& v_new);
  // Beam search: returns the bytes moved (gathered into a temporary, copied back in place).
  int64_t reorder(const at::Tensor& parent_rows);
  // Forgets the slots from `length` on; throws when the ring no longer holds a slot that the next
  // query (at `length`) reads, i.e. a step longer than spare + 1 tokens is being taken back.
  void truncate(int64_t length);
  void reset();
  // Views of the first `rows` rows (a shared prefill's), written in place.
  WindowRings first_rows(int64_t rows) const;
  int64_t bytes() const;  // keys, values, validity and slots held

 private:
  WindowLayout layout_;
  std::vector<int64_t> index_;  // per layer: its ring, or -1
  at::Tensor keys_, values_;    // [rings, rows, kv_heads, ring, head_dim]
  at::Tensor valid_;            // [rows, ring] bool
  at::Tensor held_;             // [ring] int64: the cache slot each ring slot holds, -1 for none
  at::Tensor mask_;             // this step's [rows, 1, T, ring or ring + T]
  at::Tensor write_at_;         // this step: the ring slots its kept tokens go to
  int64_t kept_from_ = 0;       // this step: its tokens from this index on are kept
  bool beside_ = false;         // this step reads the ring beside its own keys
};

// A growing cache keeps each layer's keys and values in a buffer with room along the sequence
// axis: a step writes its new positions in place and attention reads a view of the written ones,
// so a decode step copies one position, not the whole history (concatenating copied it all, every
// layer, every step). The room is `capacity` positions (the
// backend's max_length) when given, and doubles when a write does not fit.
class GrowingCache final : public KVCache {
 public:
  // `windows`: its sliding-window layers held in rings (allocated at the first write).
  explicit GrowingCache(int64_t layers, int64_t capacity = 0, WindowLayout windows = {})
      : keys_(layers),
        values_(layers),
        lengths_(layers, 0),
        capacity_(capacity),
        rings_(std::move(windows)) {}
  void write_validity(const at::Tensor& slots, const at::Tensor& token_valid) override;
  std::pair<at::Tensor, at::Tensor> update(int64_t layer, const at::Tensor& k_new,
                                           const at::Tensor& v_new,
                                           const at::Tensor& slots) override;
  at::Tensor validity() const override { return valid_; }
  at::Tensor window_mask() const override { return rings_.mask(); }
  void reorder(const at::Tensor& parent_rows, int64_t written = -1) override;
  void truncate(int64_t length) override;
  int64_t bytes() const;  // keys, values and validity held, rings included

 private:
  std::vector<at::Tensor> keys_;    // per layer [rows, kv_heads, room, head_dim]
  std::vector<at::Tensor> values_;  // per layer [rows, kv_heads, room, head_dim]
  std::vector<int64_t> lengths_;    // per layer: positions written (L)
  int64_t capacity_;
  at::Tensor valid_;  // [rows, L] bool
  WindowRings rings_;
};

// How a static cache reorders its rows for beam search:
//  - kSwap: gathers the written slots into a second buffer and swaps the two (each byte read once
//    and written once, at the cost of a second buffer); keys() and values() alternate between the
//    two, so a step must take them afresh each call (eager, trace, aoti do).
//  - kInPlace: gathers into a temporary and copies back (twice the traffic); the buffers never
//    move, which a captured CUDA graph needs.
enum class Reorder { kSwap, kInPlace };

class StaticCache final : public KVCache {
 public:
  // With shape.windows: the windowed layers in rings of windows.ring() slots, the others in
  // keys()/values() at max_len.
  StaticCache(const CacheShape& shape, const at::TensorOptions& options,
              Reorder mode = Reorder::kInPlace);
  // Wraps existing buffers (a traced graph's inputs), written in place, without rings:
  //   keys, values: [layers, rows, kv_heads, max_len, head_dim]; valid: [rows, max_len] bool
  StaticCache(at::Tensor keys, at::Tensor values, at::Tensor valid);

  void write_validity(const at::Tensor& slots, const at::Tensor& token_valid) override;
  std::pair<at::Tensor, at::Tensor> update(int64_t layer, const at::Tensor& k_new,
                                           const at::Tensor& v_new,
                                           const at::Tensor& slots) override;
  at::Tensor validity() const override { return valid_; }
  at::Tensor window_mask() const override { return rings_.mask(); }
  std::optional<std::pair<at::Tensor, at::Tensor>> layer_buffers(int64_t layer) override;
  void reorder(const at::Tensor& parent_rows, int64_t written = -1) override;
  void truncate(int64_t length) override;
  // Marks every slot invalid so the buffers can serve a new batch without reallocation.
  void reset();
  Reorder mode() const { return mode_; }
  const CacheShape& shape() const { return shape_; }

  // The layers held at max_len (every layer without rings), stacked.
  const at::Tensor& keys() const { return keys_; }
  const at::Tensor& values() const { return values_; }
  // A cache over the first `rows` rows of these buffers (views, written in place): where a shared
  // prefill runs the prompts.
  StaticCache first_rows(int64_t rows) const;
  int64_t rows() const { return valid_.size(0); }
  int64_t max_len() const { return valid_.size(1); }
  int64_t bytes() const;  // keys, values and validity held, rings included

 private:
  CacheShape shape_;
  at::Tensor keys_;             // [layers not in rings, rows, kv_heads, max_len, head_dim]
  at::Tensor values_;           // [layers not in rings, rows, kv_heads, max_len, head_dim]
  at::Tensor valid_;            // [rows, max_len] bool
  std::vector<int64_t> index_;  // per layer: its place in keys_/values_ (-1: in a ring)
  WindowRings rings_;
  Reorder mode_ = Reorder::kInPlace;
  at::Tensor spare_keys_, spare_values_;  // kSwap: the second buffers, made on the first reorder
};

// The static cache every backend that needs one uses (eager's `cache: static`, trace, aoti,
// cuda_graph): `cache` itself, reset, when it already has `shape` and `mode`; otherwise a new one.
StaticCache& reuse_or_allocate(std::unique_ptr<StaticCache>& cache, const CacheShape& shape,
                               const at::TensorOptions& options, Reorder mode = Reorder::kInPlace);

// The attention mask for T queries written at `slots` over a cache with validity `valid`:
// query i may read key j when j is valid and j <= slots[i]; it may always read itself, so rows of
// pure padding stay finite. Pure tensor ops, so it traces and captures.
//   valid: [rows, L] bool, slots: [T] int64  ->  [rows, 1, T, L] bool
at::Tensor attention_mask(const at::Tensor& valid, const at::Tensor& slots);

}  // namespace gengraph

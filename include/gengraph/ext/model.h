// The model a forward backend drives, a public header (<gengraph/extension.h> includes it).
//
// gengraph's model class, CausalLM, is internal: it holds the weights in the form the loader chose
// (fused or not, quantized or not) and each architecture's forward. A backend receives it by
// pointer (BackendInfo::create, ForwardBackend::model()) and reads what a forward step needs
// through the functions below: the model's figures, device and dtype, the shape of a static cache
// for it, and one forward over a KV cache.
#pragma once

#include <ATen/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <gengraph/ext/cache.h>

#include <cstdint>
#include <string>

namespace gengraph {

class CausalLM;  // gengraph's model; held by pointer or reference outside the framework

// One forward call over T new tokens per row.
struct ForwardBatch {
  at::Tensor input_ids;  // [rows, T] int64
  at::Tensor positions;  // [rows, T] int64, position ids as transformers computes them
  at::Tensor slots;      // [T] int64, cache slots these tokens are written to
  at::Tensor attn_mask;  // [rows, 1, T, L] bool, true where a query may read a cache slot;
                         // undefined for a cache that attends itself (KVCache::attends)
  // [rows, 1, T, K] bool: the sliding-window layers' mask over the K keys their cache's update()
  // returns, where the cache holds them in rings (KVCache::window_mask); undefined otherwise, and
  // those layers narrow attn_mask to their window.
  at::Tensor window_mask;
  // Logits of every position ([rows, T, vocab], speculative decoding's verify) instead of the
  // last one's.
  bool all_positions = false;
  // The positions whose logits come back, [K] int64 indices into T ([rows, K, vocab]): a ragged
  // batch's last token of each sequence (ForwardBackend::forward_ragged). Undefined: the last
  // position's, or every position's with all_positions.
  at::Tensor logit_positions;
};

// The figures of a model that a backend sizes its buffers by, as loaded (config.json's).
struct ModelShape {
  std::string model_type;  // config.json's "model_type": "gpt2", "llama", ...
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;  // == num_heads without grouped-query attention
  int64_t head_dim = 0;
  int64_t max_positions = 0;  // the model's context length
};

ModelShape model_shape(const CausalLM& model);
// The dtype the model computes in and the device its weights are on.
at::ScalarType model_dtype(const CausalLM& model);
at::Device model_device(const CausalLM& model);
// The shape of a static cache of `rows` rows and `max_len` slots for this model (StaticCache,
// reuse_or_allocate). `ring_spare` >= 0: its sliding-window layers, if any, in rings of window +
// ring_spare slots (WindowLayout) where that is fewer than max_len; -1: every layer at max_len.
CacheShape model_cache_shape(const CausalLM& model, int64_t rows, int64_t max_len,
                             int64_t ring_spare = -1);
// The window layout alone (a growing cache's: GrowingCache(layers, capacity, windows)).
WindowLayout model_window_layout(const CausalLM& model, int64_t max_len, int64_t ring_spare);
// The ring spare the built-in backends use unless their option ring_spare says otherwise: a
// speculative verify of up to 65 tokens rewrites the ring in place.
constexpr int64_t kDefaultRingSpare = 64;

// Runs the decoder over `batch`, writing its keys/values into `cache` (the caller has already
// recorded the slots' validity and built attn_mask). Returns the last position's logits,
// [rows, vocab], in the model dtype (every position's, [rows, T, vocab], with all_positions).
at::Tensor model_forward(const CausalLM& model, const ForwardBatch& batch, KVCache& cache);

// One decoding step of any backend over either cache: record validity, build the mask, run the
// model.
//   token_valid: [rows, T] bool. Returns [rows, vocab] logits ([rows, T, vocab] with
//   all_positions).
at::Tensor run_forward_step(const CausalLM& model, KVCache& cache, const at::Tensor& input_ids,
                            const at::Tensor& positions, const at::Tensor& slots,
                            const at::Tensor& token_valid, bool all_positions = false);

}  // namespace gengraph

// Small tensor functions the architectures' layers share: activations, attention, rotary
// embeddings, GPT-2's Conv1D. The projections (Projection) are framework/quant/projection.h.
#pragma once

#include <ATen/Tensor.h>

#include <string>
#include <vector>

namespace gengraph {

class KVCache;
struct ForwardBatch;

enum class Activation { kGeluNew, kGeluExact, kRelu, kSilu, kQuickGelu };

// Maps transformers' activation names (ACT2FN keys); throws naming `source` for unknown ones.
Activation parse_activation(const std::string& name, const std::string& source);
at::Tensor activate(const at::Tensor& x, Activation a);

// nn.Linear with an optional bias (undefined: none).  x: [..., in] -> [..., out]
at::Tensor linear_maybe_bias(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// Narrows an attention mask to a sliding window over cache slots, as transformers' mask counts
// them (padding included): the query at slot i reads slot j only when i - j < window.
//   mask: [rows, 1, T, L] bool, slots: [T] int64 -> [rows, 1, T, L] bool
at::Tensor sliding_window_mask(const at::Tensor& mask, const at::Tensor& slots, int64_t window);
// The mask of a sliding-window layer: the cache's own (ForwardBatch::window_mask, over its rings)
// where it holds such layers in rings; otherwise attn_mask narrowed to `window` (attn_mask itself
// without a window).
at::Tensor window_layer_mask(const ForwardBatch& b, int64_t window);

// transformers' Conv1D: x @ weight + bias with weight stored [in, out].
//   x: [..., in] -> [..., out]
at::Tensor conv1d_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// Checkpoint keys of the GPT-2 family (GPT-2, GPT-J) that are not weights: the causal-mask
// buffers of older checkpoints, and a tied head weight saved anyway.
bool gpt2_family_ignorable(const std::string& key);

// Scaled dot-product attention of q over the cache.
//   q: [rows, heads, T, hd]; k, v: [rows, kv_heads, L, hd]; mask: [rows, 1, T, L] bool
//   -> [rows, T, heads * hd]
at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const at::Tensor& mask, double scale);

// attend() for layer `layer`, whose keys and values `cache` holds: the cache's own attention when
// it attends itself (a paged cache, KVCache::attends: k, v and mask are then not read; `window` is
// the layer's sliding window, 0 for none, which the mask carries otherwise), else attend().
at::Tensor attend_cached(KVCache& cache, int64_t layer, const at::Tensor& q, const at::Tensor& k,
                         const at::Tensor& v, const at::Tensor& mask, double scale,
                         int64_t window = 0);

// The positions of h ([rows, T, d]) whose logits the forward returns, as ForwardBatch asks: the
// last ([rows, d]), every one (all_positions) or logit_positions ([rows, K, d]).
at::Tensor output_positions(const at::Tensor& h, const ForwardBatch& b);

// The same attention with an additive mask (0 where a query may read, -inf elsewhere) in the
// compute dtype, made once per step by additive_mask(): SDPA then adds it as it is instead of
// converting a boolean mask in every layer. An undefined mask (a cache that attends itself) stays
// undefined.
//   mask: [rows, 1, T, L] bool -> [rows, 1, T, L] dtype
at::Tensor additive_mask(const at::Tensor& mask, at::ScalarType dtype);

// The activation as one kernel where LibTorch has one with transformers' formula: gelu_new (the
// tanh approximation, which transformers writes term by term) becomes at::gelu(tanh).
at::Tensor activate_fused(const at::Tensor& x, Activation a);

// Rotary embedding of q and k together, in one pass: x * cos + swap(x) * sin_signed, where swap
// exchanges the partner dimensions (GPT-J's neighbouring pairs, or LLaMA's halves) and sin_signed
// carries rotate_every_two's / rotate_half's minus signs. Dimensions past the rotary ones have
// cos 1 and sin 0, so they pass unchanged; every value equals transformers' term by term.
//   x: [rows, T, heads, hd]; cos, sin_signed: [rows, T, 1, hd] -> [rows, T, heads, hd]
enum class RotaryPairs { kNeighbours, kHalves };
at::Tensor rotate_fused(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin_signed,
                        RotaryPairs pairs);

// A fused layer's attention inputs from its q/k/v projection: q and k rotated (rotate_fused), the
// heads split, k and v stored in the cache. On CPU in float32 one kernel does it
// (kernels::rotary_qkv; with a static cache it also writes k and v in place, rotary_qkv_into), with
// rotate_fused's values; elsewhere op by op.
//   y: [rows, T, (heads + 2 kv_heads) * hd] (a view with a contiguous last dimension is fine);
//   cos, sin_signed: [rows, T, 1, hd]
struct AttentionInputs {
  at::Tensor q;             // [rows, heads, T, hd]
  at::Tensor keys, values;  // what attention reads: [rows, kv_heads, L, hd]
};
AttentionInputs rotate_and_store(const at::Tensor& y, const at::Tensor& cos,
                                 const at::Tensor& sin_signed, int64_t heads, int64_t kv_heads,
                                 RotaryPairs pairs, KVCache& cache, int64_t layer,
                                 const at::Tensor& slots);

}  // namespace gengraph

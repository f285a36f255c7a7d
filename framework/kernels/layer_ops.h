// Two steps of a LLaMA-family decoder layer as one CPU kernel each, where LibTorch runs several
// operators: the rotary embedding of q and k with q, k and v split into heads (and, with a static
// cache, k and v written straight into the cache), and the SwiGLU gate. Registered as
// gengraph::rotary_qkv, gengraph::rotary_qkv_into and gengraph::silu_mul, so that a TorchScript
// trace records them. float32 on CPU; callers use the op-by-op forms otherwise (*_applies).
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <tuple>

namespace gengraph::kernels {

// Which dimensions rotate together: GPT-J's neighbouring pairs (2i, 2i+1) or LLaMA's halves
// (i, i + hd/2).
enum class RotaryLayout { kNeighbours, kHalves };

// The fused q/k/v projection's output split into heads, with q and k rotated:
//   out[d] = x[d] * cos[d] + x[partner(d)] * sin_signed[d]
// each product rounded and then the sum, exactly as rotate_fused (architectures/layer_functions.h)
// computes it op by op, so the values are equal bit for bit; sin_signed carries rotate_half's /
// rotate_every_two's minus signs.
//   y: [rows, T, (heads + 2 kv_heads) * hd] (q, then k, then v); cos, sin_signed: [rows, T, hd]
//   or the models' [rows, T, 1, hd]
//   -> q [rows, heads, T, hd], k [rows, kv_heads, T, hd], v [rows, kv_heads, T, hd], contiguous
std::tuple<at::Tensor, at::Tensor, at::Tensor> rotary_qkv(const at::Tensor& y,
                                                          const at::Tensor& cos,
                                                          const at::Tensor& sin_signed,
                                                          int64_t heads, int64_t kv_heads,
                                                          RotaryLayout layout);

// The same, with the rotated k and v written into one layer of a static cache at `slots` (as
// StaticCache::update's index_copy_ writes them) instead of returned; returns q.
//   keys, values: [rows, kv_heads, L, hd] (views into the cache are fine); slots: [T] int64 in
//   [0, L)
at::Tensor rotary_qkv_into(const at::Tensor& y, const at::Tensor& cos, const at::Tensor& sin_signed,
                           int64_t heads, int64_t kv_heads, RotaryLayout layout,
                           const at::Tensor& keys, const at::Tensor& values,
                           const at::Tensor& slots);

// Whether rotary_qkv takes these tensors: float32 CPU y [rows, T, (heads + 2 kv) * hd] with a
// contiguous last dimension, cos and sin [rows, T, hd] or [rows, T, 1, hd] float32 CPU, hd even.
bool rotary_qkv_applies(const at::Tensor& y, const at::Tensor& cos, int64_t heads,
                        int64_t kv_heads);

// SwiGLU's gate on the fused gate/up projection's output: silu(g) * u with
//   silu(g) = g / (1 + exp(-g))
// rounded as at::silu and then the product as at::mul round them. Where the CPU has AVX2 the exp is
// the one LibTorch's own AVX2 silu kernel calls (SLEEF's 1-ulp expf), so on a machine where
// LibTorch dispatches AVX2 the values of every whole 8-float vector equal at::silu(g) * u bit for
// bit (tested with SmolLM2's width, 1536); the values past a row's last whole vector, and every
// value elsewhere, may differ from it in the last bit.
//   gate_up: [..., 2 * inner] (gate, then up), float32 CPU, last dimension contiguous
//   -> [..., inner] contiguous
at::Tensor silu_mul(const at::Tensor& gate_up);

bool silu_mul_applies(const at::Tensor& gate_up);

// Attention of a decode step, one query per row, over the cache, as one CPU kernel (registered as
// gengraph::decode_attention): per row and head, the scores q . k_l * scale plus the mask (an
// additive float mask as it is, a boolean one as 0 or -inf), their softmax (the maximum taken off
// before the exponentials) and the weighted sum of the values, divided by the exponentials' sum.
// LibTorch's CPU flash kernel runs two small GEMMs per row and head through MKL, whose per-call
// cost dominated a batch-8 decode step's attention. The sums run in another order than LibTorch's,
// so the values may differ from at::scaled_dot_product_attention's in the last bits. Masked
// positions (-inf) add exact zeros wherever they are, so a static cache's step over all its slots
// gives the values of the same step over only the positions written (a growing cache), to the bit.
//   q: [rows, heads, 1, hd]; k, v: [rows, kv_heads, L, hd] (heads a multiple of kv_heads, the
//   last dimension contiguous: views of a cache are fine); mask: undefined or [rows | 1, 1, 1, L]
//   bool or float32 -> [rows, 1, heads * hd]
at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& mask, double scale);
// x.argmax(-1) for x [rows, n]: the index of each row's first maximum, a NaN counting as larger
// than any number (so the first NaN where a row has one), as torch.argmax answers. A contiguous
// float32 CPU x takes gengraph's kernel (AVX2 where the CPU has it, rows in parallel): LibTorch's
// CPU argmax compares element by element on one thread (its cost is recorded in
// docs/results/measurements-from-comments.md); anything else takes at::argmax.
at::Tensor argmax_rows(const at::Tensor& x);
// Whether decode_attention takes these tensors: float32 CPU, the shapes above.
bool decode_attention_applies(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const at::Tensor& mask);

// For tests: whether the AVX2 form of silu_mul runs on this CPU (and is not switched off by
// kernels::use_plain_loops).
bool silu_mul_vectorized();

}  // namespace gengraph::kernels

// Small tensor functions shared by architectures.
#pragma once

#include <ATen/Tensor.h>

#include <string>
#include <vector>

#include "framework/model/model_config.h"

namespace gengraph {

class KVCache;

enum class Activation { kGeluNew, kGeluExact, kRelu, kSilu, kQuickGelu };

// Maps transformers' activation names (ACT2FN keys); throws naming `source` for unknown ones.
Activation parse_activation(const std::string& name, const std::string& source);
at::Tensor activate(const at::Tensor& x, Activation a);

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

// The same attention with an additive mask (0 where a query may read, -inf elsewhere) in the
// compute dtype, made once per step by additive_mask(): SDPA then adds it as it is instead of
// converting a boolean mask in every layer.
//   mask: [rows, 1, T, L] bool -> [rows, 1, T, L] dtype
at::Tensor additive_mask(const at::Tensor& mask, at::ScalarType dtype);

// A projection x W^T + b over a contiguous [out, in] weight. On CPU in float32, a decode step's
// few rows stream the weight through gengraph's kernel (streams()); otherwise, for weights of
// 2 MB and more, it runs through oneDNN (LibTorch's mkldnn::_linear_pointwise), which LibTorch
// ships beside MKL and which streams a decode step's weights about 1.6x as fast as at::linear's
// MKL GEMM here (docs/benchmarks.md#cpu-gemms); elsewhere at::linear.
//
// With a quantized WeightFormat (ModelConfig::weights) the weight is held as the format says and
// the product runs through weight-only kernels (docs/quantization.md): on CPU gengraph's own
// (framework/kernels/weight_only.h: float32 activations, the stored weight widened in registers)
// for int8 (one scale per output channel), int4 (groups along the input channels) and bfloat16;
// on CUDA LibTorch's at::_weight_int8pack_mm for int8, at::_weight_int4pack_mm for int4 (bfloat16
// activations: pack_int4_cuda), and for bfloat16 a bfloat16 GEMM with the activations cast.
struct Projection {
  Projection() = default;
  Projection(at::Tensor weight, at::Tensor bias, const WeightFormat& format = {});

  at::Tensor weight;  // [out, in], contiguous (undefined when quantized)
  at::Tensor bias;    // [out], or undefined
  bool onednn = false;
  int64_t out_features = 0;  // the weight's rows
  WeightFormat format;
  at::Tensor qweight;  // int8 [out, in]; int4: kernels::pack_int4's [out, in / 2] (on CUDA:
                       // Int4Cuda's packed); bf16 [out, in]
  at::Tensor scales;   // int8: [out] (float32 on CPU); int4: [out, in / group] float16 (on CUDA:
                       // Int4Cuda's scales_and_zeros)
  at::Tensor zeros;    // int4 on CPU: [out, in / group] float16, the value of level 0

  // Whether a float32 product on CPU streams the weight through gengraph's kernel
  // (kernels::linear_f32: fewer than kernels::kStreamRows rows, as in a decode step), which reads
  // a decode step's weights faster than either GEMM library here (docs/quantization.md#speed).
  bool streams(const at::Tensor& x) const;
  at::Tensor operator()(const at::Tensor& x) const;  // [..., in] -> [..., out]
  // residual + (x W^T + b) in one kernel: oneDNN's sum post-op, or, without a bias, the GEMM's
  // accumulator (addmm).
  at::Tensor add_to(const at::Tensor& residual, const at::Tensor& x) const;
};

// The weight-only formats' quantization, exposed for tests: int8 per output channel (symmetric,
// absmax / 127, round half to even); int4 in groups of `group` input channels (asymmetric: 16
// levels from the group's minimum to its maximum, decided on that float32 grid; value = q * scale
// + zero with the step and the minimum stored as float16, rounded to nearest, as Q4_1 stores
// them). dequantize_* give the float weight the kernels multiply by.
struct Int8Weight {
  at::Tensor q;       // int8 [out, in]
  at::Tensor scales;  // [out], the weight's dtype
};
Int8Weight quantize_int8(const at::Tensor& weight);
at::Tensor dequantize_int8(const Int8Weight& w);
struct Int4Weight {
  at::Tensor q;       // int32 [out, in], values 0..15 (before packing)
  at::Tensor scales;  // float16 [out, in / group]
  at::Tensor zeros;   // float16 [out, in / group]
  int64_t group = 32;
};
Int4Weight quantize_int4(const at::Tensor& weight, int64_t group);
at::Tensor dequantize_int4(const Int4Weight& w);
// int4 on CUDA: LibTorch's kernel (at::_weight_int4pack_mm, tinygemm) takes the levels packed by
// at::_convert_weight_to_int4pack and, per group and output channel, a bfloat16 scale and zero with
// value = (q - 8) x scale + zero. The levels are the CPU format's; the step and the minimum
// (float16) become that bfloat16 pair, so CUDA's weights differ from CPU's by bfloat16's rounding
// of them.
struct Int4Cuda {
  at::Tensor packed;            // the kernel's layout (int32 tiles)
  at::Tensor scales_and_zeros;  // bfloat16 [in / group, out rounded up to 8, 2]; the product's
                                // outputs past the weight's (Projection::out_features) are cut
};
Int4Cuda pack_int4_cuda(const Int4Weight& w);
// The weight the CUDA kernel multiplies by, in float32 (for tests; any device).
at::Tensor dequantize_int4_cuda(const Int4Weight& w);

// The output head's format: the model's, or as loaded when lm_head is false.
// int4 with int8_head: int8 (its int8 activations as the model's).
inline WeightFormat head_format(const WeightFormat& f) {
  if (!f.lm_head) return WeightFormat{};
  if (f.int8_head && f.kind == WeightFormat::Kind::kInt4) {
    WeightFormat h = f;
    h.kind = WeightFormat::Kind::kInt8;
    h.int8_head = false;
    return h;
  }
  return f;
}

// Whether a weight's GEMMs go through oneDNN: CPU, float32, at least 2^19 elements, LibTorch
// built with it.
bool onednn_gemm(const at::Tensor& weight);

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

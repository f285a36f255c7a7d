// A model's linear layers: a projection x W^T + b in the weight format the model asks for
// (framework/quant/weight_format.h), dispatched to the kernel that format and device take.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>

#include "framework/quant/quantize.h"
#include "framework/quant/weight_format.h"

namespace gengraph {

// A projection x W^T + b over a contiguous [out, in] weight. On CPU in float32, a decode step's
// few rows stream the weight through gengraph's kernel (streams()); otherwise, for weights of
// 2 MB and more, it runs through oneDNN (LibTorch's mkldnn::_linear_pointwise), which LibTorch
// ships beside MKL and which streamed a decode step's weights faster than at::linear's MKL GEMM
// where it was measured (docs/benchmarks.md#cpu-gemms); elsewhere at::linear.
//
// With a quantized WeightFormat (ModelConfig::weights) the weight is held as the format says and
// the product runs through weight-only kernels (docs/quantization.md): on CPU gengraph's own
// (framework/quant/kernels.h: float32 activations, the stored weight widened in registers)
// for int8 (one scale per output channel, or with group_size a float16 scale per block of that
// many input channels), int4 (groups along the input channels) and bfloat16; on CUDA LibTorch's
// at::_weight_int8pack_mm for int8 (per channel: int8 in blocks is refused there by name),
// at::_weight_int4pack_mm for int4 (bfloat16 activations: pack_int4_cuda), and for bfloat16 a
// bfloat16 GEMM with the activations cast.
struct Projection {
  Projection() = default;
  // `stored`: for int4, levels, scales and zeros the file already holds on this format's grid
  // (a GGUF's Q4_0 / Q4_1 blocks), taken as they are instead of quantizing `weight`, which must be
  // their dequantized values (it sizes the projection).
  // `stored_int8`: the same for int8 in blocks (a GGUF's Q8_0 blocks under group_size 32).
  Projection(at::Tensor weight, at::Tensor bias, const WeightFormat& format = {},
             const Int4Weight* stored = nullptr, const Int8Blocks* stored_int8 = nullptr);

  at::Tensor weight;  // [out, in], contiguous (undefined when quantized)
  at::Tensor bias;    // [out], or undefined
  bool onednn = false;
  int64_t out_features = 0;  // the weight's rows
  WeightFormat format;
  at::Tensor qweight;  // int8 [out, in]; int4: kernels::pack_int4's [out, in / 2] (on CUDA:
                       // Int4Cuda's packed); bf16 [out, in]
  at::Tensor scales;   // int8: [out] (float32 on CPU), in blocks [out, in / group_size] float16;
                       // int4: [out, in / group] float16 (on CUDA:
                       // Int4Cuda's scales_and_zeros)
  at::Tensor zeros;    // int4 on CPU: [out, in / group] float16, the value of level 0

  // Whether a float32 product on CPU streams the weight through gengraph's kernel
  // (kernels::linear_f32: fewer than kernels::kStreamRows rows, as in a decode step, or any rows
  // under kernels::BatchInvariant), which reads
  // a decode step's weights faster than either GEMM library where it was measured
  // (docs/quantization.md#speed).
  bool streams(const at::Tensor& x) const;
  at::Tensor operator()(const at::Tensor& x) const;  // [..., in] -> [..., out]
  // residual + (x W^T + b) in one kernel: oneDNN's sum post-op, or, without a bias, the GEMM's
  // accumulator (addmm).
  at::Tensor add_to(const at::Tensor& residual, const at::Tensor& x) const;
};

// The output head's format: the model's, or as loaded when lm_head is false.
// int4 with int8_head (its default): int8 with a scale per output channel (its int8 activations
// as the model's).
inline WeightFormat head_format(const WeightFormat& f) {
  if (!f.lm_head) return WeightFormat{};
  if (f.head_int8()) {
    WeightFormat h = f;
    h.kind = WeightFormat::Kind::kInt8;
    h.group_size = 0;
    h.int8_head = false;
    return h;
  }
  return f;
}

// Whether a weight's GEMMs go through oneDNN: CPU, float32, at least 2^19 elements, LibTorch
// built with it.
bool onednn_gemm(const at::Tensor& weight);

}  // namespace gengraph

// The weight formats' quantization: int8 per output channel or in blocks, int4 in groups (packed
// for gengraph's CPU kernels by kernels::pack_int4, or for LibTorch's CUDA kernel by
// pack_int4_cuda), and the dequantized weights the kernels multiply by (for tests).
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>

namespace gengraph {

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
// int8 in blocks of `block` input channels of a row (model.weights int8 with group_size; at 32
// llama.cpp's Q8_0 layout, whose tensors map onto it bit for bit): per block the scale is its
// absolute maximum / 127 rounded to float16 (to nearest; a block of zeros gets 1), and the levels
// are decided against that float16's value, q = round(w / float(scale)) half to even, clamped to
// [-127, 127], so that the weight the kernels multiply by is q * float(scale) exactly.
struct Int8Blocks {
  at::Tensor q;       // int8 [out, in]
  at::Tensor scales;  // float16 [out, in / block]
  int64_t block = 32;
};
Int8Blocks quantize_int8_blocks(const at::Tensor& weight, int64_t block);
at::Tensor dequantize_int8_blocks(const Int8Blocks& w);  // float32 [out, in]
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

}  // namespace gengraph

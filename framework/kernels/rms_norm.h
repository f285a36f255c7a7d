// RMSNorm as one CPU kernel (LibTorch 2.11 has a fused RMSNorm on CUDA only; on CPU
// at::rms_norm is a composite of several operators, and transformers' formula written op by op
// is seven). Registered as gengraph::rms_norm so that a TorchScript trace records it.
#pragma once

#include <ATen/Tensor.h>

namespace gengraph::kernels {

// transformers' LlamaRMSNorm for float32 activations on CPU, in one pass per row:
//   weight * (x * rsqrt(mean(x^2) + eps))
// with the two products rounded in that order as the op-by-op formula rounds them; only the sum
// of squares is accumulated in another order (in float64, then rounded), so results may differ
// from the op-by-op formula's in the last bit.
//   x: [..., d] float32 CPU; weight: [d] float32 -> [..., d]
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// Whether rms_norm takes these tensors (float32, CPU, weight [d] matching x's last dimension);
// callers use the op-by-op formula otherwise.
bool rms_norm_applies(const at::Tensor& x, const at::Tensor& weight);

}  // namespace gengraph::kernels

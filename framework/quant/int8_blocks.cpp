// int8 weights with a float16 scale per block of B input channels of each row (model.weights int8
// with group_size B; at B = 32 llama.cpp's Q8_0): the operators' CPU kernels for that layout.
// linear_int8 and linear_w8a8 send here the weights whose scales are [N, K / B] float16 (a
// per-channel weight's are [N] float32).
//   weight-only: the plain loop or AVX2 (int8_blocks_avx2.cpp) streams the weight for a decode's
//     few rows; from kStreamRows rows (outside BatchInvariant) the weight is widened to float32
//     a panel at a time, q * float(scale), and LibTorch's GEMM takes the product (widened_linear);
//   W8A8: the activations quantized in blocks of B too (the same B), then per block the exact
//     int32 dot of the levels times the activation block's scale times the weight block's, summed
//     in float32 in block order (w8a8_blocks_plain): AVX-512 VNNI, AVX2 or the plain loops, the
//     same floats to the bit. AMX does not take these weights (its tiles apply one scale per
//     output channel after the sums): where the CPU has AMX, the VNNI tile runs them. From
//     kIntegerGemmRows rows outside BatchInvariant on a CPU without AMX: LibTorch's GEMM of the
//     dequantized levels by the weight widened a panel at a time (integer_rows_by_float_gemm).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <string>

#include "framework/quant/kernels.h"
#include "framework/quant/kernels_internal.h"

namespace gengraph::kernels::detail {
namespace {

// An int8 weight [N, K] with float16 scales [N, K / B], B a multiple of 32; returns B.
int64_t check_int8_blocks(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scales,
                          const char* op) {
  TORCH_CHECK(q.dim() == 2 && q.scalar_type() == at::kChar && q.is_contiguous(), op,
              ": weight must be a contiguous 2-D int8 tensor");
  const int64_t N = q.size(0), K = q.size(1);
  TORCH_CHECK(scales.dim() == 2 && scales.size(0) == N && scales.size(1) > 0 &&
                  scales.scalar_type() == at::kHalf && scales.is_contiguous(),
              op, ": scales per block must be contiguous float16 [", N,
              ", blocks] (a scale per output channel is float32 [", N, "]), got ", scales.sizes(),
              " ", scales.scalar_type());
  const int64_t blocks = scales.size(1);
  TORCH_CHECK(K % blocks == 0 && (K / blocks) % 32 == 0, op, ": ", blocks,
              " scales a row do not make blocks of a multiple of 32 of the ", K, " input channels");
  check_x(x, K, op);
  return K / blocks;
}

}  // namespace

at::Tensor linear_int8_blocks_cpu(const at::Tensor& x, const at::Tensor& q,
                                  const at::Tensor& scales) {
  const int64_t block = check_int8_blocks(x, q, scales, "gengraph::linear_int8");
  if (widens(x.size(0))) {
    return widened_linear(x, q.size(0), [&](int64_t n0, int64_t n1, float* dst) {
      widen_int8_block_rows(q, scales, block, n0, n1, dst);
    });
  }
  const int64_t M = x.size(0), K = x.size(1), N = q.size(0);
  at::Tensor y = at::empty({M, N}, x.options());
  if (M == 0 || N == 0) return y;
  const float* xp = x.data_ptr<float>();
  const int8_t* qp = q.data_ptr<int8_t>();
  const at::Half* sp = scales.data_ptr<at::Half>();
  float* yp = y.data_ptr<float>();
  const bool avx2 = cpu_has_avx2();
  at::parallel_for(0, N, grain_rows(N, K), [&](int64_t n0, int64_t n1) {
#ifdef GENGRAPH_X86_AVX2
    if (avx2) return int8_blocks_avx2(xp, M, K, qp, sp, block, n0, n1, yp, N);
#endif
    (void)avx2;
    int8_blocks_plain(xp, M, K, qp, sp, block, n0, n1, yp, N);
  });
  return y;
}

at::Tensor linear_w8a8_weight_blocks_cpu(const at::Tensor& x, const at::Tensor& q,
                                         const at::Tensor& scales, int64_t block) {
  const int64_t wblock = check_int8_blocks(x, q, scales, "gengraph::linear_w8a8");
  TORCH_CHECK(block == wblock, "gengraph::linear_w8a8: int8 weights in blocks of ", wblock,
              " take activation blocks of ", wblock,
              " (model.int8_activation_block = model.group_size), got ", block);
  return linear_w8a8_blocks(x, q, scales, block, scales.data_ptr<at::Half>());
}

}  // namespace gengraph::kernels::detail

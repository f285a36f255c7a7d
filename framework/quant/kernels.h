// gengraph's own CPU kernels for weight-only quantized projections (docs/quantization.md).
//
// LibTorch 2.11's weight-only kernels (_weight_int8pack_mm, _weight_int4pack_mm_for_cpu) are
// vectorized on x86 only for bfloat16 activations: with float32 activations they run a scalar
// loop, slower than the float32 GEMM they replace (docs/results/quant-notes-from-comments.md).
// These kernels take float32 activations,
// widen the stored weights to float32 in registers (AVX2 + FMA where the CPU has them, a plain
// loop elsewhere) and accumulate in float32, so a decode step reads a quarter (int8), an eighth
// (int4) or half (bfloat16) of float32's bytes. For many activation rows (a prefill) they widen
// the weight once and use LibTorch's float32 GEMM instead.
//
// Each is also an operator of the dispatcher (gengraph::linear_int8, gengraph::linear_int4,
// gengraph::linear_bf16), so a TorchScript trace of a quantized model records and replays them.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>

namespace gengraph::kernels {

// y = x W^T with W[n, k] = q[n, k] * scales[n].
//   x: [M, K] float32, contiguous; q: [N, K] int8; scales: [N] float32 -> [M, N] float32
// int8 in blocks (model.group_size with int8; llama.cpp's Q8_0 at B = 32): scales float16
// [N, K / B], B a multiple of 32, and W[n, k] = q[n, k] * scales[n, k / B] (int8_blocks.cpp).
at::Tensor linear_int8(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scales);

// The same product with the activations quantized too (W8A8). A change of arithmetic, opted into
// with model.int8_activation_rows (docs/quantization.md#int8-activations).
//   block 0: each row of x to int8 with its own scale (absolute maximum / 127, round half to
//     even), an integer GEMM with int32 sums, then y[m, n] = sum * row_scale[m] * scales[n]:
//     AMX tiles from 4 rows where the CPU has AMX-INT8, gengraph's VNNI / AVX2 tiles below 32
//     rows, LibTorch's _int_mm otherwise; the same floats to the bit on every path.
//   block B (a multiple of 32 dividing K; model.int8_activation_block): each block of B channels
//     of a row gets its own scale the same way; per block the integer sum (exact in int32) times
//     the block's scale, summed in float32, times scales[n]. gengraph's kernels compute it: AVX-512
//     VNNI where the CPU has it, AVX2 otherwise, the plain loops elsewhere.
//   x: [M, K] float32; q: [N, K] int8; scales: [N] float32 -> [M, N] float32
// With scales float16 [N, K / B] (int8 in blocks), block must be B: per block the exact integer
// sum times the activation block's scale times the weight block's (their float32 product), summed
// in float32 in block order, y = that sum; the same floats on VNNI, AVX2 and the plain loops (AMX
// does not take these weights: the VNNI tile runs them where the CPU has AMX).
at::Tensor linear_w8a8(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scales,
                       int64_t block = 0);
// Whether linear_w8a8's block kernels run AVX-512 VNNI on this CPU (false under use_plain_loops
// or allow_vnni(false), which leaves them AVX2 where the CPU has it: for tests and benchmarks).
bool integer_dot_vnni();
void allow_vnni(bool allowed);
// Whether linear_w8a8 with a scale per row takes the integer sums with AMX tiles (Intel AMX-INT8,
// Sapphire Rapids on: signed int8 by signed int8, int32 sums, the same floats to the bit as the
// VNNI path and _int_mm's), where the CPU has it and Linux grants the process its tile state;
// false under use_plain_loops, allow_vnni(false) or allow_amx(false).
bool integer_dot_amx();
void allow_amx(bool allowed);

// The int4 layout these kernels read: per output row, K / 32 blocks of 16 bytes; byte i of block
// b holds element 32 b + i in its low nibble and element 32 b + 16 + i in its high nibble.
//   q: [N, K] integers 0..15 (K a multiple of 32) -> [N, K / 2] uint8
at::Tensor pack_int4(const at::Tensor& q);
// The inverse of pack_int4, for tests: [N, K / 2] uint8 -> [N, K] int32.
at::Tensor unpack_int4(const at::Tensor& packed);

// y = x W^T with W[n, k] = packed_q[n, k] * scales[n, g] + zeros[n, g], g = k / group.
//   x: [M, K] float32; packed: [N, K / 2] uint8 (pack_int4); scales, zeros: [N, K / group]
//   float16 (read as the float32 they are exactly: a decode step reads 2 bytes a group for each
//   instead of 4); group a multiple of 32 dividing K -> [M, N] float32
at::Tensor linear_int4(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scales,
                       const at::Tensor& zeros, int64_t group);

// The same product with the activations quantized too (W4A8): each block of 32 channels of a row
// to int8 with its own scale (as linear_w8a8's blocks), then per block the exact integer sums of
// levels by activation levels and of the activation levels, combined in float32 with the group's
// scale and zero in one fixed order (framework/quant/plain_loops.cpp, w4a8_plain): the same
// floats to the bit on every path (AMX from 16 rows, AVX-512 VNNI, AVX2, the plain loops) and
// whatever the rows beside a row. A change of arithmetic, opted into with
// model.int8_activation_rows on int4 weights (docs/quantization.md#w4a8).
//   x: [M, K] float32; packed, scales, zeros, group as linear_int4 (group at most 256)
at::Tensor linear_w4a8(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scales,
                       const at::Tensor& zeros, int64_t group);

// y = x W^T with W bfloat16, products and sums in float32.
//   x: [M, K] float32; w: [N, K] bfloat16 -> [M, N] float32
at::Tensor linear_bf16(const at::Tensor& x, const at::Tensor& w);

// The same streaming kernel over a float32 weight, for comparison with the float32 GEMMs (and a
// decode step's projections where it streams faster, docs/quantization.md#speed).
//   x: [M, K] float32; w: [N, K] float32 -> [M, N] float32
at::Tensor linear_f32(const at::Tensor& x, const at::Tensor& w);

// The sum of a contiguous float32 CPU tensor's values, read once across the threads (each thread
// a contiguous share, AVX2 vector loads into four sums where the CPU has them): the fastest read
// stream gengraph has, which the read-bandwidth probe times (experiments/results/bandwidth.h).
// The order of the additions depends on the thread count and the path.
float read_sum(const at::Tensor& t);

// Whether the vectorized (AVX2 + FMA) paths run on this CPU; the plain loops otherwise.
bool vectorized();
// Makes every call take the plain loops (true) or the CPU's best path again (false): for tests
// and benchmarks that compare the two on one machine.
void use_plain_loops(bool plain);

// Up to this many activation rows linear_f32 streams the weight; from it on (outside
// BatchInvariant) LibTorch's GEMM takes the product (a prefill's many rows make the GEMM's
// blocking worth it).
constexpr int64_t kStreamRows = 32;

// The same for the stored int8, int4 and bfloat16 weights (weight-only): up to this many rows the
// kernels above stream the stored weight, widened in registers; from it on (outside
// BatchInvariant) they widen it to float32, a panel of output channels at a time (the whole weight
// from 256 rows), for LibTorch's GEMM. Widening costs the GEMM a write and a read of four bytes a
// weight that float32 does not pay: on a Zen 3 (AVX2, 2 threads) SmolLM2's projections at 32 rows
// streamed in 0.4-0.8 ms against 0.5-1.2 in panels and float32's GEMM's 0.4-0.9, and the two were
// about level at 128 (bench kernels/int8, kernels/int8_invariant, kernels/float). A CPU without
// AVX2 streams with the plain loops, so there the widened weight takes kStreamRows rows and more.
constexpr int64_t kWidenRows = 128;

// From this many activation rows, outside BatchInvariant, on an x86 CPU with AVX2 and without
// AMX, W8A8 with activation blocks and W4A8 take the float GEMM below instead of their integer
// tiles. On a Zen 3 (AVX2, 2 threads) the tiles took GPT-2's and SmolLM2's projections 1.3-3x
// faster than the GEMM path at 32 rows, about level at 128 (either one ahead by up to 1.4x,
// shape by shape), and the GEMM path was mostly ahead at 256 (bench kernels/<format> and
// kernels/<format>_invariant, docs/quantization.md#integer-prefill-gemm).
constexpr int64_t kIntegerGemmRows = 128;

// Whether a product of `rows` activation rows in W8A8 with activation blocks, or in W4A8, on this
// thread now, is LibTorch's float32 GEMM of the activations' levels times their block scales by
// the widened weight: from kIntegerGemmRows rows, outside BatchInvariant, on an x86 CPU with AVX2
// and without AMX. (W8A8 with a scale per row keeps its integer kernels at every row count: its
// AVX2 tiles outrun the GEMM.) The values multiplied are the quantized ones, but their products are
// summed in the GEMM's order, not exactly per block, so a row's floats then depend on the path and
// on the rows beside it. When the integer kernels took the blocks one activation row at a time
// without AMX, a 2,048-token SmolLM2 prefill on a Zen 3 (AVX2) took 23.0 s in W8A8 blocks of 32
// and 38.8 s in W4A8 against float32's 6.6 s (docs/results/prefill_smollm2_cpu_before.txt); their
// AVX2 tiles now take up to four activation rows, and the GEMM stays the faster of the two for many
// rows.
bool integer_rows_by_float_gemm(int64_t rows);

// Hands back the OpenMP worker threads this thread's parallel regions keep (libgomp's pool, through
// omp_pause_resource_all); the next region starts them again. For a thread about to hand the
// model's work to another one (the scheduler's): with more OpenMP threads alive than CPUs,
// libgomp's workers spin only briefly before they sleep, and every parallel region then wakes
// them through the kernel. On a 2-core Zen 3 that took the scheduler's one-request decode step
// from 13-14 ms (the engine's own loop) to 31-45 ms. A no-op where the build has no OpenMP.
void release_openmp_threads();

// Batch invariance (docs/serving.md#batch-invariance): while a BatchInvariant guard lives on a
// thread, the products that thread runs stream their weights whatever the row count, instead of
// handing kStreamRows rows and more to LibTorch's GEMM (whose blocking, and so whose sums' order,
// changes with the rows), W8A8 and W4A8 keep their integer kernels at every row count, and int4's
// one-row path takes the many-row path's arithmetic. Each output element is then summed in one
// order whatever rows share the call: a request's logits do not depend on its batch. Nested
// guards restore the state they found.
class BatchInvariant {
 public:
  explicit BatchInvariant(bool on = true);
  ~BatchInvariant();
  BatchInvariant(const BatchInvariant&) = delete;
  BatchInvariant& operator=(const BatchInvariant&) = delete;
  static bool active();

 private:
  bool saved_;
};

}  // namespace gengraph::kernels

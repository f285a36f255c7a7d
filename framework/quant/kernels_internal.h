// What gengraph's quantized and streaming CPU kernels (framework/quant/kernels.h) share between
// their files: the activation rows' quantized forms, the plain loops' helpers, which instruction
// sets this CPU runs, and each path's entry points. One file per path and instruction set:
//   kernel_support.cpp  the CPU's instruction sets, float16 scales widened, rows per task
//   plain_loops.cpp     every path's plain loops (any CPU; the reference the others equal) and the
//                       activations' quantization
//   stream_avx2.cpp     float32, int8 and bfloat16 weights streamed with float32 activations, AVX2
//   int4_avx2.cpp       int4 weights with float32 activations, AVX2
//   w8a8_avx2.cpp       int8 by int8 (W8A8) tiles, AVX2; the activations' quantization, AVX2
//   w8a8_vnni.cpp       W8A8 tiles, AVX-512 VNNI
//   w8a8_amx.cpp        W8A8 on AMX-INT8 tiles
//   int8_blocks.cpp     int8 weights with a float16 scale per block (Q8_0 at 32): the operators'
//                       CPU kernels for that layout, weight-only and W8A8, and the plain loop
//   int8_blocks_avx2.cpp  those weights streamed with float32 activations, AVX2
//   w4a8_avx2.cpp       int4 by int8 (W4A8), AVX2
//   w4a8_vnni.cpp       W4A8, AVX-512 VNNI
//   w4a8_amx.cpp        W4A8 on AMX-INT8 tiles
//   widened_gemm.cpp    a stored weight widened to float32 a panel at a time for LibTorch's GEMM
//   kernels.cpp         the operators' CPU kernels: argument checks and the choice of path
//   operators.cpp       the dispatcher's schemas and CPU and Meta registrations
// Each vectorized function is compiled for its instructions with a target attribute (the
// GENGRAPH_*_FN macros), whatever the build's flags, and runs only where the CPU reports them.
#pragma once

#include <ATen/Tensor.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <type_traits>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define GENGRAPH_X86_AVX2 1
#define GENGRAPH_AMX_FN __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw")))
#define GENGRAPH_AVX2_FN __attribute__((target("avx2,fma,f16c")))
#define GENGRAPH_VNNI_FN __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
#endif

namespace gengraph::kernels::detail {

// ---- The plain loops: any CPU, and the reference the vectorized paths are tested against. ----

inline float widen(float v) { return v; }
inline float widen(int8_t v) { return static_cast<float>(v); }
inline float widen(uint16_t bf16) {
  const uint32_t bits = static_cast<uint32_t>(bf16) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// out[m, n] = sum_k x[m, k] * w[n, k] over rows [n0, n1).
template <typename W>
void dot_rows_plain(const float* x, int64_t M, int64_t K, const W* w, int64_t n0, int64_t n1,
                    float* out, int64_t ldo) {
  for (int64_t n = n0; n < n1; ++n) {
    const W* wr = w + n * K;
    for (int64_t m = 0; m < M; ++m) {
      const float* xr = x + m * K;
      float s = 0.f;
      for (int64_t k = 0; k < K; ++k) s += xr[k] * widen(wr[k]);
      out[m * ldo + n] = s;
    }
  }
}

// The int4 level of channel k in a row of the pack_int4 layout.
inline int int4_level(const uint8_t* row, int64_t k) {
  const uint8_t byte = row[(k / 32) * 16 + k % 16];
  return (k % 32) < 16 ? (byte & 0x0F) : (byte >> 4);
}

// Whether this CPU runs each path (false under use_plain_loops, allow_vnni(false),
// allow_amx(false)): kernel_support.cpp.
bool cpu_has_avx2();  // and F16C
bool cpu_has_avx512_vnni();
bool cpu_has_amx();
// Output rows per task: enough work to be worth a thread, and every thread busy.
int64_t grain_rows(int64_t N, int64_t K);

// int4's float16 scales and zeros as float32 (every float16 is a float32 exactly): the kernels
// read a pass's rows of them in this form, so the arithmetic below is float32 throughout.
void halves_to_floats(const at::Half* h, int64_t n, float* dst);

// Rows [n, n + rows) of an int4 weight's scales and zeros ([N, groups] float16) as float32: a
// thread's buffers, grown as needed and kept for its next pass.
struct GroupParams {
  std::vector<float> s, z;
  void load(const at::Half* scales, const at::Half* zeros, int64_t n, int64_t rows,
            int64_t groups) {
    const size_t need = static_cast<size_t>(rows * groups);
    if (s.size() < need) {
      s.resize(need);
      z.resize(need);
    }
    halves_to_floats(scales + n * groups, rows * groups, s.data());
    halves_to_floats(zeros + n * groups, rows * groups, z.data());
  }
};

// ---- W8A8 with block scales: activations quantized per block of `block` channels. ----

// The activation rows quantized for the integer products: per row m, q[m K + k] = round(x / s)
// (half to even) with s the absolute maximum of k's block / 127 (1 for a block of zeros), each
// block's scale (one block a row: the row's scale), and -128 times the sum of levels per lane of
// four channels (an int32 lane of the vector kernels) and per block (the VNNI path multiplies
// unsigned weights, w + 128: this takes the 128 back).
struct BlockRows {
  int64_t M = 0, K = 0, block = 0;
  std::vector<int8_t> q;            // [M, K]
  std::vector<float> block_scale;   // [M, K / block]
  std::vector<int32_t> lane_bias;   // [M, K / 4]
  std::vector<int32_t> block_bias;  // [M, K / block]
};

// With blocks (fewer than the whole row), every path (AMX, AVX-512 VNNI, AVX2, the plain loops)
// gives the same floats to the bit, whatever the number of rows in the call: each block's integer
// sum S_b is exact in int32, and the blocks are taken in order,
//   acc = fma(float(S_b), s_b, acc)   for b = 0, 1, ..., then y = acc * scales[n].
// With weight scales per block too (`wblock`, float16 [N, K / block]: int8 in blocks, llama.cpp's
// Q8_0 by Q8_0 at 32), the weight block's scale w_b joins the activation block's, and there is no
// per-channel scale:
//   acc = fma(float(S_b), s_b * w_b, acc)   for b = 0, 1, ..., then y = acc
// (s_b * w_b a float32 product, rounded). The AMX path takes no weight blocks (VNNI runs them).
// A row's outputs do not depend on the path or on the rows beside it.

// The whole-row (scale per row) kernels, VNNI and AMX, sum a row's products in int32: up to 2^16
// channels they cannot overflow (|sum| <= 127 * 128 * K).
constexpr int64_t kWholeRowMaxK = int64_t{1} << 16;

// ---- W4A8: int4 weights (pack_int4) by activations quantized in blocks of 32 channels. ----
//
// Every path (AMX, AVX-512 VNNI, AVX2, the plain loops) gives the same floats to the bit, whatever
// the number of rows in the call. Per activation row m and weight row n:
//   per block b of 32 channels, exact in int32: S_b = sum_k level[n, k] xq[m, k] (the weight's
//     levels 0..15, the block's activation levels) and A_b = sum_k xq[m, k];
//   t_b = fma(float(S_b), scales[n, g], float(A_b) * zeros[n, g]), g = b / (group / 32): the
//     block's product by W = level * scale + zero, before the activations' scale;
//   16 partial sums, lane l taking the blocks b = l, l + 16, l + 32, ... in order:
//     acc_l = fma(t_b, s_b, acc_l), s_b the activation block's scale (quantize_blocks);
//   y = the lanes folded in halves: acc_i + acc_{i+8}, then + 4, + 2, + 1.
// The activation levels are kept twice: in channel order (a.q, for the plain loops) and in the
// int4 layout's order (`order`): per run of four blocks (the last run may have fewer, r), the
// low halves (channels 0-15 of each block) of the r blocks, then their high halves, so that one
// load of 16 r packed bytes meets its activations in two loads.
struct W4A8Rows {
  BlockRows a;                // blocks of 32
  std::vector<int8_t> order;  // [M, K] in the int4 layout's order
  std::vector<int32_t> sums;  // [M, K / 32]: A_b
};

// The plain loops (plain_loops.cpp).
void int4_rows_plain(const float* x, int64_t M, int64_t K, const uint8_t* q, const at::Half* scales,
                     const at::Half* zeros, const float* xsum, int64_t group, int64_t n0,
                     int64_t n1, float* out, int64_t ldo);
// Fills `r` (its buffers grown as needed, never shrunk: a thread's buffers serve its next call)
// for M rows of K channels, rows in parallel when there are many.
void quantize_blocks(const float* x, int64_t M, int64_t K, int64_t block, BlockRows& r);
// y[m, n] with the blocks in order, as above: the reference the vectorized paths equal. `scales`
// per output channel, or (wblock set) the weight's float16 scales per block, [N, K / a.block].
void w8a8_blocks_plain(const BlockRows& a, const int8_t* w, const float* scales,
                       const at::Half* wblock, int64_t n0, int64_t n1, float* out, int64_t ldo);
// int8 weights with a float16 scale per block (int8_blocks.cpp), weight-only: y[m, n] = per block
// b the float32 dot of the activations and the levels, times the block's scale, summed over the
// blocks; rows [n0, n1) for every activation row.
void int8_blocks_plain(const float* x, int64_t M, int64_t K, const int8_t* q,
                       const at::Half* scales, int64_t block, int64_t n0, int64_t n1, float* out,
                       int64_t ldo);
void quantize_w4a8(const float* x, int64_t M, int64_t K, W4A8Rows& r);
// y[m, n] as above, channel by channel: the reference the vectorized path equals.
void w4a8_plain(const W4A8Rows& r, const uint8_t* q, const at::Half* scales, const at::Half* zeros,
                int64_t group, int64_t n0, int64_t n1, float* out, int64_t ldo);

// From this many activation rows the W8A8 product with a scale per row takes AMX tiles rather than
// the VNNI tile (at one row, where both stream the weight, AMX is no faster), and a prefill's
// rows take them rather than _int_mm (docs/results/quant-notes-from-comments.md,
// docs/results/w8a8_kernels_bench_cpu.txt).
constexpr int64_t kAmxMinRows = 4;
// From this many rows (a whole tile) W4A8 takes AMX: faster for a prefill's rows, slower than the
// VNNI kernel for a batch-8 decode step's 8 rows, where an 8-row tile pays the whole epilogue
// (docs/results/quant-notes-from-comments.md).
constexpr int64_t kW4A8AmxMinRows = 16;

// x a contiguous 2-D float32 CPU tensor of K channels, or an error naming `op` (kernels.cpp).
void check_x(const at::Tensor& x, int64_t K, const char* op);

// The operators' CPU kernels (kernels.cpp), registered in operators.cpp.
at::Tensor linear_int8_cpu(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scales);
at::Tensor linear_w8a8_cpu(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scales,
                           int64_t block);
at::Tensor linear_int4_cpu(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scales,
                           const at::Tensor& zeros, int64_t group);
at::Tensor linear_w4a8_cpu(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scales,
                           const at::Tensor& zeros, int64_t group);
at::Tensor linear_bf16_cpu(const at::Tensor& x, const at::Tensor& w);
at::Tensor linear_f32_cpu(const at::Tensor& x, const at::Tensor& w);
// int8 with float16 scales per block ([N, K / B] scales: linear_int8_cpu and linear_w8a8_cpu send
// such weights here), int8_blocks.cpp.
at::Tensor linear_int8_blocks_cpu(const at::Tensor& x, const at::Tensor& q,
                                  const at::Tensor& scales);
at::Tensor linear_w8a8_weight_blocks_cpu(const at::Tensor& x, const at::Tensor& q,
                                         const at::Tensor& scales, int64_t block);
// ---- A stored weight widened to float32 for LibTorch's GEMM (widened_gemm.cpp). ----

// Rows [n0, n1) of a weight as float32, written to dst as [n1 - n0, K].
using WidenRows = std::function<void(int64_t n0, int64_t n1, float* dst)>;
// The bytes of float32 weight a panel takes: a thread's panel stays in the core's cache (L2 and
// its share of L3) while its GEMM reads it, and holds enough output channels (80 at GPT-2's 3,072
// input channels) that the GEMM's packing of x is not repeated for every few of them.
constexpr int64_t kPanelBytes = 1024 * 1024;
// From this many activation rows the whole weight is widened and one GEMM on every thread takes
// the product: in panels a thread's single-threaded GEMM packs all of x again for every panel,
// which for a long prompt (GPT-2's 3,072-channel projection at 2,048 rows) cost more than the
// widened weight's write and read.
constexpr int64_t kWholeWidenRows = 256;
// A whole widened weight up to this many floats (64 MB) goes to a buffer the calling thread keeps
// (a fresh allocation that size is fresh pages, faulted in and zeroed every call); a larger one
// (an output head) is allocated each call.
constexpr int64_t kKeptWidenedFloats = int64_t{16} << 20;
// Whether a weight-only product of `rows` activation rows on this thread now takes the widened
// weight's GEMM: from kWidenRows rows where the streamed tiles are vectorized (AVX2), from
// kStreamRows where only the plain loops would stream it; never under BatchInvariant.
bool widens(int64_t rows);
// Output channels a panel of a [N, K] weight takes (at least 16, at most N).
int64_t panel_rows(int64_t N, int64_t K);
// y = x W^T for W [N, K] given by `widen`, by LibTorch's GEMM: below kWholeWidenRows rows the
// weight widened a panel of output channels at a time into a buffer of the thread's, each
// thread's panels multiplied on that thread (the widened weight stays in cache, where the whole
// weight widened first writes and reads four bytes a weight more than float32's own GEMM); from
// kWholeWidenRows rows the whole weight widened, then one GEMM.
at::Tensor widened_linear(const at::Tensor& x, int64_t N, const WidenRows& widen);
// The widened weights: an int8 weight times its scale per output channel or per block of `block`
// input channels (float16 [N, K / block]), each product rounded once; int4 levels as level *
// scale + zero (each product rounded before the sum); bfloat16's bits as float32's.
void widen_int8_rows(const at::Tensor& q, const at::Tensor& scales, int64_t n0, int64_t n1,
                     float* dst);
void widen_int8_block_rows(const at::Tensor& q, const at::Tensor& scales, int64_t block, int64_t n0,
                           int64_t n1, float* dst);
void widen_int4_rows(const at::Tensor& packed, const at::Tensor& scales, const at::Tensor& zeros,
                     int64_t group, int64_t n0, int64_t n1, float* dst);
void widen_bf16_rows(const at::Tensor& w, int64_t n0, int64_t n1, float* dst);
// x's int8 levels in blocks of `block` channels (quantize_blocks) times their block's scale, as
// float32 [M, K] (each product rounded once; a block with a NaN or an infinity gives NaN).
at::Tensor dequantized_levels(const at::Tensor& x, int64_t block);
// The checks of linear_w8a8's block and the W8A8 product with activation blocks (kernels.cpp);
// `wblock` the weight's float16 block scales or null (then `scales` per output channel).
at::Tensor linear_w8a8_blocks(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scales,
                              int64_t block, const at::Half* wblock = nullptr);

#ifdef GENGRAPH_X86_AVX2
constexpr int64_t kPrefetchBytes = 8192;

GENGRAPH_AVX2_FN inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Lane i of the result: lanes 2i and 2i + 1 of a and b side by side (a's 16, then b's), summed.
GENGRAPH_VNNI_FN inline __m512i pair_sums(__m512i a, __m512i b) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  return _mm512_add_epi32(_mm512_permutex2var_epi32(a, even, b),
                          _mm512_permutex2var_epi32(a, odd, b));
}

// The vectorized paths' entry points, each in its instruction set's file.
// stream_avx2.cpp: rows [n0, n1) for every activation row (W: float, int8_t, uint16_t bfloat16).
template <typename W>
GENGRAPH_AVX2_FN void dot_rows_avx2(const float* x, int64_t M, int64_t K, const W* w, int64_t n0,
                                    int64_t n1, float* out, int64_t ldo);
extern template void dot_rows_avx2<float>(const float*, int64_t, int64_t, const float*, int64_t,
                                          int64_t, float*, int64_t);
extern template void dot_rows_avx2<int8_t>(const float*, int64_t, int64_t, const int8_t*, int64_t,
                                           int64_t, float*, int64_t);
extern template void dot_rows_avx2<uint16_t>(const float*, int64_t, int64_t, const uint16_t*,
                                             int64_t, int64_t, float*, int64_t);
// int4_avx2.cpp: one int4 row widened to float32 (level * scale + zero, `scales` and `zeros` the
// row's per group as float32) into dst[K]; kFused: in one FMA, otherwise each product rounded
// before the sum (widened_gemm.cpp's, instantiated for it).
template <bool kFused>
GENGRAPH_AVX2_FN void int4_widen_row(const uint8_t* q, const float* scales, const float* zeros,
                                     int64_t K, int64_t group, float* dst);
extern template void int4_widen_row<false>(const uint8_t*, const float*, const float*, int64_t,
                                           int64_t, float*);
// stream_avx2.cpp: the sum of n floats, read in vectors into four sums (kernels::read_sum).
GENGRAPH_AVX2_FN float read_sum_avx2(const float* p, int64_t n);
// int4_avx2.cpp: with xsum null (or M >= 2) the weights are widened to float32 and multiplied
// (dot_rows_avx2); with one row and its group sums the levels are multiplied as they are.
GENGRAPH_AVX2_FN void int4_rows_avx2(const float* x, int64_t M, int64_t K, const uint8_t* q,
                                     const at::Half* scales, const at::Half* zeros,
                                     const float* xsum, int64_t group, int64_t n0, int64_t n1,
                                     float* out, int64_t ldo);
// w8a8_avx2.cpp
GENGRAPH_AVX2_FN void quantize_block_avx2(const float* xb, int64_t block, int8_t* qb, float* scale,
                                          int32_t* lane_bias);
template <int MB, int NB>
GENGRAPH_AVX2_FN void w8a8_rows_avx2_tile(const BlockRows& a, int64_t m0, const int8_t* w,
                                          const float* scales, float* out, int64_t ldo);
// MB activation rows by `rows` (at most 8) weight rows. wcol: the weight rows' block scales as
// float32, block b's at wcol + b * 16, or null.
template <int MB>
GENGRAPH_AVX2_FN void w8a8_blocks_avx2_tile(const BlockRows& a, int64_t m0, const int8_t* w,
                                            int64_t rows, const float* scales, const float* wcol,
                                            float* out, int64_t ldo);
// int8_blocks_avx2.cpp: weight rows [n0, n1) for every activation row, weight-only.
GENGRAPH_AVX2_FN void int8_blocks_avx2(const float* x, int64_t M, int64_t K, const int8_t* q,
                                       const at::Half* scales, int64_t block, int64_t n0,
                                       int64_t n1, float* out, int64_t ldo);
// w8a8_vnni.cpp
template <int MB, int NB>
GENGRAPH_VNNI_FN void w8a8_rows_vnni_tile(const BlockRows& a, int64_t m0, const int8_t* w,
                                          const float* scales, float* out, int64_t ldo);
// wcol: the `rows` weight rows' block scales as float32, transposed: [K / a.block][16] (rows past
// `rows` 0), or null.
GENGRAPH_VNNI_FN void w8a8_blocks_vnni_tile(const BlockRows& a, int64_t m, const int8_t* w,
                                            int64_t rows, const float* scales, const float* wcol,
                                            float* out, int32_t* sums);
// w4a8_avx2.cpp, w4a8_vnni.cpp: weight rows [n0, n1) for every activation row.
GENGRAPH_AVX2_FN void w4a8_avx2_rows(const W4A8Rows& r, const uint8_t* q, const at::Half* scales,
                                     const at::Half* zeros, int64_t group, int64_t n0, int64_t n1,
                                     float* out, int64_t ldo);
GENGRAPH_VNNI_FN void w4a8_vnni_rows(const W4A8Rows& r, const uint8_t* q, const at::Half* scales,
                                     const at::Half* zeros, int64_t group, int64_t n0, int64_t n1,
                                     float* out, int64_t ldo);
// w8a8_amx.cpp, w4a8_amx.cpp
bool amx_granted();
void pack_amx(const BlockRows& a, int64_t m0, int64_t mt, int32_t* out);
void pack_amx_pairs(const BlockRows& a, int64_t mt, int32_t* out);
void pack_amx_scales(const BlockRows& a, int64_t m0, int64_t mt, float* out);
GENGRAPH_AMX_FN void amx_load_config(std::initializer_list<int> c, std::initializer_list<int> a,
                                     std::initializer_list<int> b, int64_t mt, int64_t kstep);
GENGRAPH_AMX_FN void w8a8_amx_rows(const BlockRows& a, const int32_t* b, const int8_t* w,
                                   const float* scales, int64_t n0, int64_t n1, float* y,
                                   int64_t ldo);
GENGRAPH_AMX_FN void w8a8_amx_blocks(const BlockRows& a, const int32_t* b, const float* bscales,
                                     const int8_t* w, const float* scales, int64_t n0, int64_t n1,
                                     float* y, int64_t ldo, bool pairs);
GENGRAPH_AMX_FN void w4a8_amx(const W4A8Rows& r, const int32_t* b, const float* bscales,
                              const int32_t* bsums, const uint8_t* q, const at::Half* scales,
                              const at::Half* zeros, int64_t group, int64_t n0, int64_t n1,
                              float* y, int64_t ldo);

// Activation rows in tiles of up to 4: f(std::integral_constant<int, MB>{}, m) for m = 0, 4, 8,
// ... below M, with MB = min(4, M - m) known at compile time (the kernels' tile templates).
template <typename F>
inline void for_row_tiles(int64_t M, F&& f) {
  for (int64_t m = 0; m < M; m += 4) {
    switch (std::min<int64_t>(4, M - m)) {
      case 1:
        f(std::integral_constant<int, 1>{}, m);
        break;
      case 2:
        f(std::integral_constant<int, 2>{}, m);
        break;
      case 3:
        f(std::integral_constant<int, 3>{}, m);
        break;
      default:
        f(std::integral_constant<int, 4>{}, m);
        break;
    }
  }
}

// Rows [n0, n1) of the product for every activation row: weight rows in passes of 16 (they stay
// in L1 across the activation rows), in tiles of up to 4 activation rows; with blocks on VNNI one
// activation row at a time (16 weight rows a tile), on AVX2 up to 4 by 8 weight rows.
// wblock: the weight's float16 scales per block ([N, K / a.block]; blocks only), or null.
template <bool kVnni, bool kWholeRow>
void w8a8_blocks_rows(const BlockRows& a, const int8_t* w, const float* scales,
                      const at::Half* wblock, int64_t n0, int64_t n1, float* out, int64_t ldo) {
  constexpr int64_t kRowsPerPass = 16;
  const int64_t K = a.K, nblk = K / a.block;
  // The pass's weight block scales as float32, widened once a pass, [nblk][16] (the 16 rows side
  // by side, rows past the pass 0); the pass's first row is nb.
  static thread_local std::vector<float> wrow, wcol;
  auto tile = [&](auto mb, int64_t m, int64_t nb, int64_t ne) {
    constexpr int MB = decltype(mb)::value;
    int64_t n = nb;
    float* o = out + m * ldo;
    if constexpr (!kWholeRow) {
      if constexpr (kVnni) {
        // The tile's block sums, [groups][16 weight rows][16 blocks].
        static thread_local std::vector<int32_t> sums;
        const size_t need = static_cast<size_t>((K / a.block + 15) / 16 * 256);
        if (sums.size() < need) sums.resize(need);
        for (int r = 0; r < MB; ++r) {
          w8a8_blocks_vnni_tile(a, m + r, w + n * K, ne - nb, scales + n,
                                wblock ? wcol.data() : nullptr, o + r * ldo + n, sums.data());
        }
      } else {
        for (; n < ne; n += 8) {
          w8a8_blocks_avx2_tile<MB>(a, m, w + n * K, std::min<int64_t>(8, ne - n), scales + n,
                                    wblock ? wcol.data() + (n - nb) : nullptr, o + n, ldo);
        }
      }
    } else if constexpr (kVnni) {
      for (; n + 4 <= ne; n += 4)
        w8a8_rows_vnni_tile<MB, 4>(a, m, w + n * K, scales + n, o + n, ldo);
      for (; n < ne; ++n) w8a8_rows_vnni_tile<MB, 1>(a, m, w + n * K, scales + n, o + n, ldo);
    } else {
      constexpr int NB = MB == 1 ? 4 : 2;
      for (; n + NB <= ne; n += NB) {
        w8a8_rows_avx2_tile<MB, NB>(a, m, w + n * K, scales + n, o + n, ldo);
      }
      for (; n < ne; ++n) w8a8_rows_avx2_tile<MB, 1>(a, m, w + n * K, scales + n, o + n, ldo);
    }
  };
  for (int64_t nb = n0; nb < n1; nb += kRowsPerPass) {
    const int64_t ne = std::min(n1, nb + kRowsPerPass);
    if (wblock != nullptr) {
      const size_t need = static_cast<size_t>(kRowsPerPass * nblk);
      if (wrow.size() < need) wrow.resize(need);
      if (wcol.size() < need) wcol.resize(need);
      halves_to_floats(wblock + nb * nblk, (ne - nb) * nblk, wrow.data());
      for (int64_t b = 0; b < nblk; ++b) {
        for (int64_t r = 0; r < kRowsPerPass; ++r) {
          wcol[b * kRowsPerPass + r] = r < ne - nb ? wrow[r * nblk + b] : 0.f;
        }
      }
    }
    for_row_tiles(a.M, [&](auto mb, int64_t m) { tile(mb, m, nb, ne); });
  }
}

// Instantiated in w8a8_vnni.cpp (kVnni) and w8a8_avx2.cpp, beside the tiles they call.
extern template void w8a8_blocks_rows<true, true>(const BlockRows&, const int8_t*, const float*,
                                                  const at::Half*, int64_t, int64_t, float*,
                                                  int64_t);
extern template void w8a8_blocks_rows<true, false>(const BlockRows&, const int8_t*, const float*,
                                                   const at::Half*, int64_t, int64_t, float*,
                                                   int64_t);
extern template void w8a8_blocks_rows<false, true>(const BlockRows&, const int8_t*, const float*,
                                                   const at::Half*, int64_t, int64_t, float*,
                                                   int64_t);
extern template void w8a8_blocks_rows<false, false>(const BlockRows&, const int8_t*, const float*,
                                                    const at::Half*, int64_t, int64_t, float*,
                                                    int64_t);
#endif  // GENGRAPH_X86_AVX2

}  // namespace gengraph::kernels::detail

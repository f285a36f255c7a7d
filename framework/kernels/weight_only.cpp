#include "framework/kernels/weight_only.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <string>
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

namespace gengraph::kernels {
namespace {

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

bool cpu_has_avx2();  // and F16C, and not under use_plain_loops (below)

#ifdef GENGRAPH_X86_AVX2
GENGRAPH_AVX2_FN void halves_f16c(const at::Half* h, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
  }
  for (; i < n; ++i) dst[i] = _cvtsh_ss(h[i].x);
}
#endif

// int4's float16 scales and zeros as float32 (every float16 is a float32 exactly): the kernels
// read a pass's rows of them in this form, so the arithmetic below is float32 throughout.
void halves_to_floats(const at::Half* h, int64_t n, float* dst) {
#ifdef GENGRAPH_X86_AVX2
  if (cpu_has_avx2()) return halves_f16c(h, n, dst);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(h[i]);
}

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

void int4_rows_plain(const float* x, int64_t M, int64_t K, const uint8_t* q, const at::Half* scales,
                     const at::Half* zeros, const float* xsum, int64_t group, int64_t n0,
                     int64_t n1, float* out, int64_t ldo) {
  const int64_t groups = K / group;
  static thread_local GroupParams params;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* qr = q + n * (K / 2);
    params.load(scales, zeros, n, 1, groups);
    for (int64_t m = 0; m < M; ++m) {
      const float* xr = x + m * K;
      float y = 0.f;
      for (int64_t g = 0; g < groups; ++g) {
        float p = 0.f;
        for (int64_t k = g * group; k < (g + 1) * group; ++k) {
          p += xr[k] * static_cast<float>(int4_level(qr, k));
        }
        y += p * params.s[g] + params.z[g] * xsum[m * groups + g];
      }
      out[m * ldo + n] = y;
    }
  }
}

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
// A row's outputs do not depend on the path or on the rows beside it.

// The whole-row (scale per row) kernels, VNNI and AMX, sum a row's products in int32: up to 2^16
// channels they cannot overflow (|sum| <= 127 * 128 * K).
constexpr int64_t kWholeRowMaxK = int64_t{1} << 16;

// One block of `block` channels (a multiple of 32) of one row, with the plain loops.
void quantize_block_plain(const float* xb, int64_t block, int8_t* qb, float* scale,
                          int32_t* lane_bias) {
  float amax = 0.f;
  bool finite = true;
  for (int64_t i = 0; i < block; ++i) {
    amax = std::max(amax, std::fabs(xb[i]));
    finite = finite && std::isfinite(xb[i]);
  }
  const float s = amax > 0.f ? amax / 127.0f : 1.0f;
  for (int64_t i = 0; i < block; ++i) {
    // Within [-127, 127] by construction for finite activations. A NaN or an infinity gets
    // level 0 (no undefined conversion) and its block the scale NaN, so that the row's
    // outputs are NaN, as the float product's would be.
    const float v = std::nearbyint(xb[i] / s);
    qb[i] = v >= -127.f && v <= 127.f ? static_cast<int8_t>(v) : int8_t{0};
  }
  *scale = finite ? s : std::numeric_limits<float>::quiet_NaN();
  for (int64_t l = 0; l < block / 4; ++l) {
    lane_bias[l] = -128 * (qb[4 * l] + qb[4 * l + 1] + qb[4 * l + 2] + qb[4 * l + 3]);
  }
}

#ifdef GENGRAPH_X86_AVX2
// Eight activations' levels: x / s rounded half to even, as int32.
GENGRAPH_AVX2_FN inline __m256i levels8(const float* p, __m256 sv) {
  return _mm256_cvtps_epi32(_mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(p), sv),
                                            _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// The same with AVX2, the same values: the absolute maximum (exact in any order), the scale
// divided in scalar as above, each level x / s (an IEEE division, as the scalar one) rounded half
// to even. A block with a NaN or an infinity gets the scale NaN and levels 0.
GENGRAPH_AVX2_FN void quantize_block_avx2(const float* xb, int64_t block, int8_t* qb, float* scale,
                                          int32_t* lane_bias) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 zero = _mm256_setzero_ps();
  __m256 amax = zero, bad = zero;
  for (int64_t i = 0; i < block; i += 8) {
    const __m256 v = _mm256_loadu_ps(xb + i);
    amax = _mm256_max_ps(amax, _mm256_and_ps(v, abs_mask));
    const __m256 z = _mm256_mul_ps(v, zero);  // NaN exactly where v is not finite
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(z, z, _CMP_UNORD_Q));
  }
  if (_mm256_movemask_ps(bad) != 0) {
    std::memset(qb, 0, static_cast<size_t>(block));
    for (int64_t l = 0; l < block / 4; ++l) lane_bias[l] = 0;
    *scale = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  alignas(32) float m8[8];
  _mm256_store_ps(m8, amax);
  float a = 0.f;
  for (float v : m8) a = std::max(a, v);
  const float s = a > 0.f ? a / 127.0f : 1.0f;
  const __m256 sv = _mm256_set1_ps(s);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m256i ones8 = _mm256_set1_epi8(1);
  const __m256i ones16 = _mm256_set1_epi16(1);
  for (int64_t i = 0; i < block; i += 32) {
    const __m256i lo = _mm256_packs_epi32(levels8(xb + i, sv), levels8(xb + i + 8, sv));
    const __m256i hi = _mm256_packs_epi32(levels8(xb + i + 16, sv), levels8(xb + i + 24, sv));
    const __m256i q = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(lo, hi), order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb + i), q);
    // Each lane's sum of its four levels (bytes 4l..4l+3), times -128.
    const __m256i fours = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(lane_bias + i / 4),
                        _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(fours, 7)));
  }
  *scale = s;
}
#endif

// Fills `r` (its buffers grown as needed, never shrunk: a thread's buffers serve its next call)
// for M rows of K channels, rows in parallel when there are many.
void quantize_blocks(const float* x, int64_t M, int64_t K, int64_t block, BlockRows& r) {
  r.M = M;
  r.K = K;
  r.block = block;
  const auto grow = [](auto& v, int64_t n) {
    if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
  };
  grow(r.q, M * K);
  grow(r.block_scale, M * (K / block));
  grow(r.lane_bias, M * K / 4);
  grow(r.block_bias, M * (K / block));
  const bool vec = cpu_has_avx2();
  int8_t* q = r.q.data();
  float* bs = r.block_scale.data();
  int32_t* lb = r.lane_bias.data();
  int32_t* bb = r.block_bias.data();
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(1, K));
  at::parallel_for(0, M, grain, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      for (int64_t b0 = 0; b0 < K; b0 += block) {
        const int64_t at = m * K + b0;
        float* scale = bs + m * (K / block) + b0 / block;
#ifdef GENGRAPH_X86_AVX2
        if (vec) {
          quantize_block_avx2(x + at, block, q + at, scale, lb + at / 4);
        } else
#endif
        {
          quantize_block_plain(x + at, block, q + at, scale, lb + at / 4);
        }
        if (block == K) continue;  // one block a row: its kernels add the lanes' biases
        int32_t sum = 0;
        for (int64_t l = at / 4; l < (at + block) / 4; ++l) sum += lb[l];
        bb[m * (K / block) + b0 / block] = sum;
      }
    }
  });
}

// y[m, n] with the blocks in order, as above: the reference the vectorized paths equal.
void w8a8_blocks_plain(const BlockRows& a, const int8_t* w, const float* scales, int64_t n0,
                       int64_t n1, float* out, int64_t ldo) {
  const int64_t K = a.K, block = a.block, nb = K / block;
  for (int64_t n = n0; n < n1; ++n) {
    const int8_t* wr = w + n * K;
    for (int64_t m = 0; m < a.M; ++m) {
      const int8_t* xr = a.q.data() + m * K;
      const float* bs = a.block_scale.data() + m * nb;
      float acc = 0.f;
      for (int64_t b = 0; b < nb; ++b) {
        int32_t s = 0;
        for (int64_t k = b * block; k < (b + 1) * block; ++k) s += int32_t{xr[k]} * int32_t{wr[k]};
        acc = std::fma(static_cast<float>(s), bs[b], acc);
      }
      out[m * ldo + n] = acc * scales[n];
    }
  }
}

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

void quantize_w4a8(const float* x, int64_t M, int64_t K, W4A8Rows& r) {
  quantize_blocks(x, M, K, 32, r.a);
  const int64_t nb = K / 32;
  if (r.order.size() < static_cast<size_t>(M * K)) r.order.resize(static_cast<size_t>(M * K));
  if (r.sums.size() < static_cast<size_t>(M * nb)) r.sums.resize(static_cast<size_t>(M * nb));
  for (int64_t m = 0; m < M; ++m) {
    const int8_t* q = r.a.q.data() + m * K;
    int8_t* o = r.order.data() + m * K;
    for (int64_t b0 = 0; b0 < nb; b0 += 4) {
      const int64_t run = std::min<int64_t>(4, nb - b0);
      for (int64_t i = 0; i < run; ++i) {
        const int8_t* blk = q + (b0 + i) * 32;
        std::memcpy(o + b0 * 32 + 16 * i, blk, 16);
        std::memcpy(o + b0 * 32 + 16 * (run + i), blk + 16, 16);
        int32_t s = 0;
        for (int64_t k = 0; k < 32; ++k) s += blk[k];
        r.sums[m * nb + b0 + i] = s;
      }
    }
  }
}

// y[m, n] as above, channel by channel: the reference the vectorized path equals.
void w4a8_plain(const W4A8Rows& r, const uint8_t* q, const at::Half* scales, const at::Half* zeros,
                int64_t group, int64_t n0, int64_t n1, float* out, int64_t ldo) {
  const int64_t K = r.a.K, nb = K / 32, groups = K / group, per = group / 32;
  static thread_local GroupParams params;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = q + n * (K / 2);
    params.load(scales, zeros, n, 1, groups);
    for (int64_t m = 0; m < r.a.M; ++m) {
      const int8_t* xr = r.a.q.data() + m * K;
      const float* sx = r.a.block_scale.data() + m * nb;
      float acc[16] = {};
      for (int64_t b = 0; b < nb; ++b) {
        int32_t s = 0, a = 0;
        for (int64_t k = 32 * b; k < 32 * (b + 1); ++k) {
          s += int4_level(row, k) * int32_t{xr[k]};
          a += xr[k];
        }
        const int64_t g = b / per;
        const float t =
            std::fma(static_cast<float>(s), params.s[g], static_cast<float>(a) * params.z[g]);
        acc[b % 16] = std::fma(t, sx[b], acc[b % 16]);
      }
      for (int w = 8; w >= 1; w /= 2) {
        for (int i = 0; i < w; ++i) acc[i] += acc[i + w];
      }
      out[m * ldo + n] = acc[0];
    }
  }
}

// ---- AVX2 + FMA: compiled for those instructions whatever the build's flags, run only where
// the CPU reports them. ----
#ifdef GENGRAPH_X86_AVX2

GENGRAPH_AVX2_FN inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
GENGRAPH_AVX2_FN inline __m256 load8(const int8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
GENGRAPH_AVX2_FN inline __m256 load8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
GENGRAPH_AVX2_FN inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

constexpr int64_t kPrefetchBytes = 8192;

// MB activation rows by NB weight rows: each weight vector is widened once and used MB times.
template <typename W, int MB, int NB>
GENGRAPH_AVX2_FN void dot_block(const float* x, int64_t K, const W* w, float* out, int64_t ldo) {
  __m256 acc[MB][NB];
  for (int m = 0; m < MB; ++m)
    for (int n = 0; n < NB; ++n) acc[m][n] = _mm256_setzero_ps();
  // The block's NB rows are contiguous: fetch ahead of the point the loop reads, in the order it
  // will, so the memory system has more requests in flight than the hardware prefetcher alone
  // keeps for a kernel that reads few bytes per instruction.
  const char* ahead = reinterpret_cast<const char*>(w) + kPrefetchBytes;
  int64_t k = 0;
  // Each step reads 8 * NB * sizeof(W) bytes: a line fetched ahead for each 64 of them (two for
  // four float32 rows, where one would leave every other line to the hardware prefetcher).
  constexpr int64_t kStepBytes = 8 * NB * static_cast<int64_t>(sizeof(W));
  for (; k + 8 <= K; k += 8) {
    for (int64_t b = 0; b < kStepBytes; b += 64)
      _mm_prefetch(ahead + k * NB * sizeof(W) + b, _MM_HINT_T0);
    __m256 wv[NB];
    for (int n = 0; n < NB; ++n) wv[n] = load8(w + n * K + k);
    for (int m = 0; m < MB; ++m) {
      const __m256 xv = _mm256_loadu_ps(x + m * K + k);
      for (int n = 0; n < NB; ++n) acc[m][n] = _mm256_fmadd_ps(xv, wv[n], acc[m][n]);
    }
  }
  for (int m = 0; m < MB; ++m) {
    for (int n = 0; n < NB; ++n) {
      float s = hsum(acc[m][n]);
      for (int64_t kk = k; kk < K; ++kk) s += x[m * K + kk] * widen(w[n * K + kk]);
      out[m * ldo + n] = s;
    }
  }
}

template <typename W, int MB>
GENGRAPH_AVX2_FN void dot_rows_mb(const float* x, int64_t K, const W* w, int64_t n0, int64_t n1,
                                  float* out, int64_t ldo) {
  constexpr int NB = MB <= 2 ? 4 : 2;
  int64_t n = n0;
  for (; n + NB <= n1; n += NB) dot_block<W, MB, NB>(x, K, w + n * K, out + n, ldo);
  for (; n < n1; ++n) dot_block<W, MB, 1>(x, K, w + n * K, out + n, ldo);
}

// Rows [n0, n1) for every activation row, in blocks of at most 4 activation rows; the weight
// rows of a block stay in L1 between them.
template <typename W>
GENGRAPH_AVX2_FN void dot_rows_avx2(const float* x, int64_t M, int64_t K, const W* w, int64_t n0,
                                    int64_t n1, float* out, int64_t ldo) {
  constexpr int64_t kRowsPerPass = 16;
  for (int64_t nb = n0; nb < n1; nb += kRowsPerPass) {
    const int64_t ne = std::min(n1, nb + kRowsPerPass);
    for (int64_t m = 0; m < M; m += 4) {
      const float* xm = x + m * K;
      float* om = out + m * ldo;
      switch (std::min<int64_t>(4, M - m)) {
        case 1:
          dot_rows_mb<W, 1>(xm, K, w, nb, ne, om, ldo);
          break;
        case 2:
          dot_rows_mb<W, 2>(xm, K, w, nb, ne, om, ldo);
          break;
        case 3:
          dot_rows_mb<W, 3>(xm, K, w, nb, ne, om, ldo);
          break;
        default:
          dot_rows_mb<W, 4>(xm, K, w, nb, ne, om, ldo);
          break;
      }
    }
  }
}

// MB activation rows by NB weight rows of the block-scaled W8A8 product, 32 channels a step: the
// One block per row (a scale per row): the weight's magnitudes (unsigned) times the activations
// with the weight's signs, in pairs to int16 (at most 2 * 128 * 127, no saturation) and fours to
// int32, the int32 lanes summed over the whole row, then float(sum) * row scale * scales[n],
// LibTorch's _int_mm path's arithmetic to the bit.
template <int MB, int NB>
GENGRAPH_AVX2_FN void w8a8_rows_avx2_tile(const BlockRows& a, int64_t m0, const int8_t* w,
                                          const float* scales, float* out, int64_t ldo) {
  const int64_t K = a.K;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i sums[MB][NB];
  for (int m = 0; m < MB; ++m) {
    for (int n = 0; n < NB; ++n) sums[m][n] = _mm256_setzero_si256();
  }
  const char* ahead = reinterpret_cast<const char*>(w) + kPrefetchBytes;
  for (int64_t k = 0; k < K; k += 32) {
    _mm_prefetch(ahead + k * NB, _MM_HINT_T0);
    __m256i wv[NB];
    for (int n = 0; n < NB; ++n) {
      wv[n] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + n * K + k));
    }
    for (int m = 0; m < MB; ++m) {
      const int64_t row = (m0 + m) * K;
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q.data() + row + k));
      for (int n = 0; n < NB; ++n) {
        const __m256i pairs =
            _mm256_maddubs_epi16(_mm256_abs_epi8(wv[n]), _mm256_sign_epi8(xv, wv[n]));
        sums[m][n] = _mm256_add_epi32(sums[m][n], _mm256_madd_epi16(pairs, ones));
      }
    }
  }
  for (int m = 0; m < MB; ++m) {
    for (int n = 0; n < NB; ++n) {
      alignas(32) int32_t l[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(l), sums[m][n]);
      const int32_t total = l[0] + l[1] + l[2] + l[3] + l[4] + l[5] + l[6] + l[7];
      out[m * ldo + n] = static_cast<float>(total) * a.block_scale[m0 + m] * scales[n];
    }
  }
}

// With blocks: one block's integer sum as eight int32 lanes (the same products as above).
GENGRAPH_AVX2_FN inline __m256i block_lanes_avx2(const int8_t* x, const int8_t* w, int64_t block) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i v = _mm256_setzero_si256();
  for (int64_t k = 0; k < block; k += 32) {
    if (k % 64 == 0)
      _mm_prefetch(reinterpret_cast<const char*>(w + k) + kPrefetchBytes, _MM_HINT_T0);
    const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + k));
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + k));
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(wv), _mm256_sign_epi8(xv, wv));
    v = _mm256_add_epi32(v, _mm256_madd_epi16(pairs, ones));
  }
  return v;
}

// Lane i: the sum of v[i]'s eight lanes (exact: int32).
GENGRAPH_AVX2_FN inline __m256i lane_sums8(const __m256i* v) {
  const __m256i q0 =
      _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i q1 =
      _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(q0, q1, 0x20),
                          _mm256_permute2x128_si256(q0, q1, 0x31));
}

// With blocks, in the order of w8a8_blocks_plain: one activation row m, NB weight rows; eight
// blocks' exact sums at a time, then the blocks' fused multiply-adds in order.
template <int NB>
GENGRAPH_AVX2_FN void w8a8_blocks_avx2_tile(const BlockRows& a, int64_t m, const int8_t* w,
                                            const float* scales, float* out) {
  const int64_t K = a.K, block = a.block, nb = K / block;
  const int8_t* x = a.q.data() + m * K;
  const float* bs = a.block_scale.data() + m * nb;
  float acc[NB] = {};
  for (int64_t g0 = 0; g0 < nb; g0 += 8) {
    const int64_t gb = std::min<int64_t>(8, nb - g0);
    for (int n = 0; n < NB; ++n) {
      __m256i v[8];
      for (int64_t i = 0; i < 8; ++i) {
        const int64_t at = (g0 + i) * block;
        v[i] = i < gb ? block_lanes_avx2(x + at, w + n * K + at, block) : _mm256_setzero_si256();
      }
      alignas(32) int32_t sums[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(sums), lane_sums8(v));
      for (int64_t i = 0; i < gb; ++i) {
        acc[n] = std::fma(static_cast<float>(sums[i]), bs[g0 + i], acc[n]);
      }
    }
  }
  for (int n = 0; n < NB; ++n) out[n] = acc[n] * scales[n];
}

// One int4 weight row against one activation row. Per block of 32: the 16 bytes become four
// vectors of 8 levels (0..15) as floats; per group the partial dot is scaled once, and the zeros
// add one product with the group's activation sum (xsum). `scales` and `zeros` are the row's,
// widened to float32 (GroupParams: widened one at a time here, it ran 20% slower).
GENGRAPH_AVX2_FN float int4_row(const float* x, int64_t K, const uint8_t* q, const float* scales,
                                const float* zeros, const float* xsum, int64_t group) {
  const int64_t groups = K / group, blocks_per_group = group / 32;
  const __m128i low4 = _mm_set1_epi8(0x0F);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    __m256 p = _mm256_setzero_ps();
    for (int64_t b = g * blocks_per_group; b < (g + 1) * blocks_per_group; ++b) {
      _mm_prefetch(reinterpret_cast<const char*>(q + b * 16) + kPrefetchBytes, _MM_HINT_T0);
      const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + b * 16));
      const __m128i lo = _mm_and_si128(bytes, low4);
      const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), low4);
      const __m256 w0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo));
      const __m256 w1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)));
      const __m256 w2 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi));
      const __m256 w3 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)));
      const float* xb = x + b * 32;
      __m256 t = _mm256_mul_ps(w0, _mm256_loadu_ps(xb));
      t = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xb + 8), t);
      t = _mm256_fmadd_ps(w2, _mm256_loadu_ps(xb + 16), t);
      t = _mm256_fmadd_ps(w3, _mm256_loadu_ps(xb + 24), t);
      p = _mm256_add_ps(p, t);
    }
    acc = _mm256_fmadd_ps(p, _mm256_set1_ps(scales[g]), acc);
  }
  float y = hsum(acc);
  for (int64_t g = 0; g < groups; ++g) y += zeros[g] * xsum[g];
  return y;
}

// One int4 row widened to float32 weights (level * scale + zero), into dst[K].
GENGRAPH_AVX2_FN void int4_widen_row(const uint8_t* q, const float* scales, const float* zeros,
                                     int64_t K, int64_t group, float* dst) {
  const __m128i low4 = _mm_set1_epi8(0x0F);
  const int64_t blocks_per_group = group / 32;
  for (int64_t b = 0; b < K / 32; ++b) {
    const int64_t g = b / blocks_per_group;
    const __m256 s = _mm256_set1_ps(scales[g]), z = _mm256_set1_ps(zeros[g]);
    _mm_prefetch(reinterpret_cast<const char*>(q + b * 16) + kPrefetchBytes, _MM_HINT_T0);
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + b * 16));
    const __m128i lo = _mm_and_si128(bytes, low4);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), low4);
    float* d = dst + b * 32;
    _mm256_storeu_ps(d, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo)), s, z));
    _mm256_storeu_ps(
        d + 8,
        _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8))), s, z));
    _mm256_storeu_ps(d + 16, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi)), s, z));
    _mm256_storeu_ps(
        d + 24,
        _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8))), s, z));
  }
}

GENGRAPH_AVX2_FN void int4_rows_avx2(const float* x, int64_t M, int64_t K, const uint8_t* q,
                                     const at::Half* scales, const at::Half* zeros,
                                     const float* xsum, int64_t group, int64_t n0, int64_t n1,
                                     float* out, int64_t ldo) {
  const int64_t groups = K / group;
  static thread_local GroupParams params;
  if (M >= 2) {
    // Several activation rows: widen 4 weight rows at a time into L1 once, then multiply them as
    // float32 weights for every activation row (widening per row and per 4 activation rows
    // made batch 8 slower than float32).
    thread_local std::vector<float> buf;
    buf.resize(static_cast<size_t>(4 * K));
    for (int64_t n = n0; n < n1; n += 4) {
      const int64_t nb = std::min<int64_t>(4, n1 - n);
      params.load(scales, zeros, n, nb, groups);
      for (int64_t r = 0; r < nb; ++r) {
        int4_widen_row(q + (n + r) * (K / 2), params.s.data() + r * groups,
                       params.z.data() + r * groups, K, group, buf.data() + r * K);
      }
      dot_rows_avx2<float>(x, M, K, buf.data(), 0, nb, out + n, ldo);
    }
    return;
  }
  // One activation row (a decode step at batch 1): the levels are multiplied as they are.
  constexpr int64_t kRowsPerPass = 16;
  for (int64_t nb = n0; nb < n1; nb += kRowsPerPass) {
    const int64_t ne = std::min(n1, nb + kRowsPerPass);
    params.load(scales, zeros, nb, ne - nb, groups);
    for (int64_t n = nb; n < ne; ++n) {
      const int64_t i = (n - nb) * groups;
      out[n] =
          int4_row(x, K, q + n * (K / 2), params.s.data() + i, params.z.data() + i, xsum, group);
    }
  }
}

// W4A8 with AVX2 (CPUs without AVX-512 VNNI), in w4a8_plain's order: one activation row m
// against one weight row. 32 packed bytes hold two blocks; their low and high nibbles meet the
// activations in the int4 layout's order with vpmaddubsw (unsigned levels by signed activations:
// a pair's sum is at most 2 * 15 * 128, no saturation) and vpmaddwd, so lanes 0-3 hold the first
// block's products and 4-7 the second's. Two rounds of vphaddd and a permutation give 8 blocks a
// register; the 16 partial sums are two registers.
GENGRAPH_AVX2_FN float w4a8_avx2_row(const W4A8Rows& r, int64_t m, const uint8_t* row,
                                     const float* sr, const float* zr, int64_t per) {
  const int64_t K = r.a.K, nb = K / 32;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i ones16 = _mm256_set1_epi16(1);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const int8_t* xr = r.order.data() + m * K;
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t g0 = 0; g0 < nb; g0 += 16) {
    const int64_t gb = std::min<int64_t>(16, nb - g0);
    __m256i p[8];
    for (int v = 0; v < 8; ++v) {
      const int64_t vb = std::min<int64_t>(2, gb - 2 * v);
      if (vb <= 0) {
        p[v] = _mm256_setzero_si256();
        continue;
      }
      const int64_t b = g0 + 2 * v, run0 = b & ~int64_t{3};
      const int64_t run = std::min<int64_t>(4, nb - run0), at = b - run0;
      const uint8_t* src = row + b * 16;
      const int8_t* xlo = xr + run0 * 32 + 16 * at;
      const int8_t* xhi = xlo + 16 * run;
      _mm_prefetch(reinterpret_cast<const char*>(src) + kPrefetchBytes, _MM_HINT_T0);
      __m256i w, xl, xh;
      if (vb == 2) {
        w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
        xl = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xlo));
        xh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xhi));
      } else {  // one block: the upper half zero (no read past the block)
        w = _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
        xl = _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xlo)));
        xh = _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xhi)));
      }
      const __m256i lo = _mm256_and_si256(w, low4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), low4);
      p[v] = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(lo, xl), ones16),
                              _mm256_madd_epi16(_mm256_maddubs_epi16(hi, xh), ones16));
    }
    alignas(32) float sw[16] = {}, zw[16] = {}, sx[16] = {};
    alignas(32) int32_t a[16] = {};
    for (int64_t l = 0; l < gb; ++l) {
      sw[l] = sr[(g0 + l) / per];
      zw[l] = zr[(g0 + l) / per];
      sx[l] = r.a.block_scale[m * nb + g0 + l];
      a[l] = r.sums[m * nb + g0 + l];
    }
    for (int h = 0; h < 2; ++h) {
      const __m256i s = _mm256_permutevar8x32_epi32(
          _mm256_hadd_epi32(_mm256_hadd_epi32(p[4 * h], p[4 * h + 1]),
                            _mm256_hadd_epi32(p[4 * h + 2], p[4 * h + 3])),
          order);
      const __m256 av =
          _mm256_cvtepi32_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(a + 8 * h)));
      const __m256 t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_load_ps(sw + 8 * h),
                                       _mm256_mul_ps(av, _mm256_load_ps(zw + 8 * h)));
      acc[h] = _mm256_fmadd_ps(t, _mm256_load_ps(sx + 8 * h), acc[h]);
    }
  }
  return hsum(_mm256_add_ps(acc[0], acc[1]));
}

GENGRAPH_AVX2_FN void w4a8_avx2_rows(const W4A8Rows& r, const uint8_t* q, const at::Half* scales,
                                     const at::Half* zeros, int64_t group, int64_t n0, int64_t n1,
                                     float* out, int64_t ldo) {
  constexpr int64_t kRowsPerPass = 16;
  const int64_t K = r.a.K, groups = K / group, per = group / 32;
  static thread_local GroupParams params;
  for (int64_t nb = n0; nb < n1; nb += kRowsPerPass) {
    const int64_t ne = std::min(n1, nb + kRowsPerPass);
    params.load(scales, zeros, nb, ne - nb, groups);
    for (int64_t m = 0; m < r.a.M; ++m) {
      for (int64_t n = nb; n < ne; ++n) {
        const int64_t i = (n - nb) * groups;
        out[m * ldo + n] =
            w4a8_avx2_row(r, m, q + n * (K / 2), params.s.data() + i, params.z.data() + i, per);
      }
    }
  }
}

// GCC 12 warns of its own headers' _mm512_undefined_* (a deliberately uninitialized register)
// wherever they are inlined: not this code's.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// The whole-row tile with AVX-512 VNNI, 64 channels a step: the weights made unsigned (w + 128, by
// flipping the sign bit), one vpdpbusd per 64 products, the lanes' -128 * sums added once. A last
// step of fewer than 64 channels (K a multiple of 32) loads under a mask.
template <int MB, int NB>
GENGRAPH_VNNI_FN void w8a8_rows_vnni_tile(const BlockRows& a, int64_t m0, const int8_t* w,
                                          const float* scales, float* out, int64_t ldo) {
  const int64_t K = a.K;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512i sums[MB][NB], biases[MB];
  for (int m = 0; m < MB; ++m) {
    biases[m] = _mm512_setzero_si512();
    for (int n = 0; n < NB; ++n) sums[m][n] = _mm512_setzero_si512();
  }
  const char* ahead = reinterpret_cast<const char*>(w) + kPrefetchBytes;
  for (int64_t k = 0; k < K; k += 64) {
    const int64_t left = K - k;
    const __mmask64 bytes = left >= 64 ? ~__mmask64{0} : ((__mmask64{1} << left) - 1);
    const __mmask16 lanes = left >= 64 ? static_cast<__mmask16>(0xFFFF)
                                       : static_cast<__mmask16>((1u << (left / 4)) - 1);
    for (int p = 0; p < NB; ++p) _mm_prefetch(ahead + k * NB + p * 64, _MM_HINT_T0);
    __m512i wv[NB];
    for (int n = 0; n < NB; ++n) {
      wv[n] = _mm512_xor_si512(_mm512_maskz_loadu_epi8(bytes, w + n * K + k), flip);
    }
    for (int m = 0; m < MB; ++m) {
      const int64_t row = (m0 + m) * K;
      const __m512i xv = _mm512_maskz_loadu_epi8(bytes, a.q.data() + row + k);
      const __m512i bias = _mm512_maskz_loadu_epi32(lanes, a.lane_bias.data() + row / 4 + k / 4);
      biases[m] = _mm512_add_epi32(biases[m], bias);
      for (int n = 0; n < NB; ++n) sums[m][n] = _mm512_dpbusd_epi32(sums[m][n], wv[n], xv);
    }
  }
  for (int m = 0; m < MB; ++m) {
    for (int n = 0; n < NB; ++n) {
      const int32_t total = _mm512_reduce_add_epi32(_mm512_add_epi32(sums[m][n], biases[m]));
      out[m * ldo + n] = static_cast<float>(total) * a.block_scale[m0 + m] * scales[n];
    }
  }
}

// Lane i of the result: lanes 2i and 2i + 1 of a and b side by side (a's 16, then b's), summed.
GENGRAPH_VNNI_FN inline __m512i pair_sums(__m512i a, __m512i b) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  return _mm512_add_epi32(_mm512_permutex2var_epi32(a, even, b),
                          _mm512_permutex2var_epi32(a, odd, b));
}

// 32 or 64 (`whole`) channels' products from the start of x and w: dpbusd of the unsigned weights
// (the -128 * sums are added per block after).
GENGRAPH_VNNI_FN inline __m512i dot_step(__m512i acc, const int8_t* x, const int8_t* w,
                                         bool whole) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const __mmask64 bytes = whole ? ~__mmask64{0} : __mmask64{0xFFFFFFFFu};
  _mm_prefetch(reinterpret_cast<const char*>(w) + kPrefetchBytes, _MM_HINT_T0);
  const __m512i wv = _mm512_xor_si512(_mm512_maskz_loadu_epi8(bytes, w), flip);
  return _mm512_dpbusd_epi32(acc, wv, _mm512_maskz_loadu_epi8(bytes, x));
}

// One block's products as 16 int32 lanes.
GENGRAPH_VNNI_FN inline __m512i block_lanes_vnni(const int8_t* x, const int8_t* w, int64_t block) {
  __m512i v = _mm512_setzero_si512();
  for (int64_t k = 0; k < block; k += 64) v = dot_step(v, x + k, w + k, block - k >= 64);
  return v;
}

// Blocks 2j and 2j + 1 of a group (those before the group's end: `have` from 2j on): lanes 0-7
// the first's products in parts, 8-15 the second's. Blocks of 32 are one 64-channel step.
GENGRAPH_VNNI_FN inline __m512i block_pair(const int8_t* x, const int8_t* w, int64_t block,
                                           int64_t have) {
  if (have <= 0) return _mm512_setzero_si512();
  if (block == 32) return dot_step(_mm512_setzero_si512(), x, w, have >= 2);
  const __m512i first = block_lanes_vnni(x, w, block);
  const __m512i second =
      have >= 2 ? block_lanes_vnni(x + block, w + block, block) : _mm512_setzero_si512();
  return pair_sums(first, second);
}

// r[i] (16 int32 lanes each) becomes column i: lane j of the result i is lane i of r[j].
GENGRAPH_VNNI_FN inline void transpose16(__m512i* r) {
  __m512i a[16], b[16];
  for (int k = 0; k < 8; ++k) {
    a[2 * k] = _mm512_unpacklo_epi32(r[2 * k], r[2 * k + 1]);
    a[2 * k + 1] = _mm512_unpackhi_epi32(r[2 * k], r[2 * k + 1]);
  }
  // b[4k + c], 128-bit lane L: column 4L + c of rows 4k..4k+3.
  for (int k = 0; k < 4; ++k) {
    b[4 * k] = _mm512_unpacklo_epi64(a[4 * k], a[4 * k + 2]);
    b[4 * k + 1] = _mm512_unpackhi_epi64(a[4 * k], a[4 * k + 2]);
    b[4 * k + 2] = _mm512_unpacklo_epi64(a[4 * k + 1], a[4 * k + 3]);
    b[4 * k + 3] = _mm512_unpackhi_epi64(a[4 * k + 1], a[4 * k + 3]);
  }
  // For each c, the 4 x 4 transpose of 128-bit lanes of b[c], b[4 + c], b[8 + c], b[12 + c].
  for (int c = 0; c < 4; ++c) {
    const __m512i e0 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0x44);
    const __m512i e1 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0xEE);
    const __m512i e2 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0x44);
    const __m512i e3 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0xEE);
    r[c] = _mm512_shuffle_i32x4(e0, e2, 0x88);
    r[4 + c] = _mm512_shuffle_i32x4(e0, e2, 0xDD);
    r[8 + c] = _mm512_shuffle_i32x4(e1, e3, 0x88);
    r[12 + c] = _mm512_shuffle_i32x4(e1, e3, 0xDD);
  }
}

// With blocks, in the order of w8a8_blocks_plain: one activation row m against `rows` (<= 16)
// consecutive weight rows, read one after the other (one linear stream). Per weight row and group
// of 16 blocks the blocks' exact sums come to one lane each (three rounds of pair_sums over the
// group's eight pairs, plus the blocks' -128 * sums); then per group a transpose puts each
// block's sums for the 16 weight rows in one register, and the blocks' fused multiply-adds run
// in order with the weight rows in the lanes. `sums` holds [groups][16][16] int32.
GENGRAPH_VNNI_FN void w8a8_blocks_vnni_tile(const BlockRows& a, int64_t m, const int8_t* w,
                                            int64_t rows, const float* scales, float* out,
                                            int32_t* sums) {
  const int64_t K = a.K, block = a.block, nb = K / block, groups = (nb + 15) / 16;
  const int8_t* x = a.q.data() + m * K;
  const int32_t* bb = a.block_bias.data() + m * nb;
  const float* bs = a.block_scale.data() + m * nb;
  for (int64_t n = 0; n < 16; ++n) {
    for (int64_t g = 0; g < groups; ++g) {
      __m512i* to = reinterpret_cast<__m512i*>(sums + (g * 16 + n) * 16);
      if (n >= rows) {
        _mm512_storeu_si512(to, _mm512_setzero_si512());
        continue;
      }
      const int64_t g0 = g * 16, gb = std::min<int64_t>(16, nb - g0);
      const int8_t* xg = x + g0 * block;
      const int8_t* wg = w + n * K + g0 * block;
      __m512i p[8];
      if (block == 32 && gb == 16) {  // the common case: eight whole 64-channel steps
        for (int64_t j = 0; j < 8; ++j) {
          p[j] = dot_step(_mm512_setzero_si512(), xg + 64 * j, wg + 64 * j, true);
        }
      } else {
        for (int64_t j = 0; j < 8; ++j) {
          p[j] = block_pair(xg + 2 * j * block, wg + 2 * j * block, block, gb - 2 * j);
        }
      }
      _mm512_storeu_si512(to, pair_sums(pair_sums(pair_sums(p[0], p[1]), pair_sums(p[2], p[3])),
                                        pair_sums(pair_sums(p[4], p[5]), pair_sums(p[6], p[7]))));
    }
  }
  __m512 acc = _mm512_setzero_ps();
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t g0 = g * 16, gb = std::min<int64_t>(16, nb - g0);
    __m512i t[16];
    for (int i = 0; i < 16; ++i) t[i] = _mm512_loadu_si512(sums + (g * 16 + i) * 16);
    transpose16(t);
    for (int64_t b = 0; b < gb; ++b) {
      const __m512i exact = _mm512_add_epi32(t[b], _mm512_set1_epi32(bb[g0 + b]));
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(exact), _mm512_set1_ps(bs[g0 + b]), acc);
    }
  }
  const __mmask16 out_mask = static_cast<__mmask16>(rows >= 16 ? 0xFFFF : (1u << rows) - 1);
  _mm512_mask_storeu_ps(out, out_mask, _mm512_mul_ps(acc, _mm512_maskz_loadu_ps(out_mask, scales)));
}
// The 16 lanes folded in halves (w4a8_plain's order): i + 8, then + 4, + 2, + 1.
GENGRAPH_VNNI_FN inline float fold16(__m512 v) {
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));
  q = _mm_add_ss(q, _mm_shuffle_ps(q, q, 1));
  return _mm_cvtss_f32(q);
}

// W4A8 with AVX-512 VNNI: MB activation rows (from m0) against one weight row, read once in
// order. A load of 64 packed bytes holds four blocks; its low nibbles (each block's channels
// 0-15) and high nibbles (16-31) meet the activations in the int4 layout's order with one
// vpdpbusd each (unsigned levels by signed activations), so lanes 4j..4j+3 hold block j's
// products. Per 16 blocks, two rounds of pair_sums give one block a lane, and the blocks'
// multiply-adds run with the blocks in the lanes. `idx` maps lane l to the weight group of block
// l (l / (group / 32)). The row's float16 scales and zeros are widened in registers.
template <int MB>
GENGRAPH_VNNI_FN void w4a8_vnni_row(const W4A8Rows& r, int64_t m0, const uint8_t* row,
                                    const at::Half* sr, const at::Half* zr, int64_t per,
                                    __m512i idx, float* out, int64_t ldo) {
  const int64_t K = r.a.K, nb = K / 32;
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  __m512 acc[MB];
  for (int m = 0; m < MB; ++m) acc[m] = _mm512_setzero_ps();
  for (int64_t g0 = 0; g0 < nb; g0 += 16) {
    const int64_t gb = std::min<int64_t>(16, nb - g0);
    __m512i p[MB][4];
    for (int v = 0; v < 4; ++v) {
      const int64_t vb = std::min<int64_t>(4, gb - 4 * v);
      if (vb <= 0) {
        for (int m = 0; m < MB; ++m) p[m][v] = _mm512_setzero_si512();
        continue;
      }
      const int64_t b0 = g0 + 4 * v;
      const uint8_t* src = row + b0 * 16;
      _mm_prefetch(reinterpret_cast<const char*>(src) + kPrefetchBytes, _MM_HINT_T0);
      const __mmask64 bytes = vb == 4 ? ~__mmask64{0} : (__mmask64{1} << (16 * vb)) - 1;
      const __m512i w = _mm512_maskz_loadu_epi8(bytes, src);
      const __m512i lo = _mm512_and_si512(w, low4);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(w, 4), low4);
      for (int m = 0; m < MB; ++m) {
        const int8_t* xs = r.order.data() + (m0 + m) * K + b0 * 32;
        const __m512i xlo = _mm512_maskz_loadu_epi8(bytes, xs);
        const __m512i xhi = _mm512_maskz_loadu_epi8(bytes, xs + 16 * vb);
        p[m][v] =
            _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xlo), hi, xhi);
      }
    }
    const __mmask16 lanes = static_cast<__mmask16>(gb >= 16 ? 0xFFFF : (1u << gb) - 1);
    const int64_t gs = (gb + per - 1) / per;
    const __mmask16 have = static_cast<__mmask16>(gs >= 16 ? 0xFFFF : (1u << gs) - 1);
    const __m512 sw =
        _mm512_permutexvar_ps(idx, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(have, sr + g0 / per)));
    const __m512 zw =
        _mm512_permutexvar_ps(idx, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(have, zr + g0 / per)));
    for (int m = 0; m < MB; ++m) {
      const __m512i s = pair_sums(pair_sums(p[m][0], p[m][1]), pair_sums(p[m][2], p[m][3]));
      const int64_t at = (m0 + m) * nb + g0;
      const __m512 a = _mm512_cvtepi32_ps(_mm512_maskz_loadu_epi32(lanes, r.sums.data() + at));
      const __m512 sx = _mm512_maskz_loadu_ps(lanes, r.a.block_scale.data() + at);
      const __m512 t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), sw, _mm512_mul_ps(a, zw));
      acc[m] = _mm512_mask3_fmadd_ps(t, sx, acc[m], lanes);
    }
  }
  for (int m = 0; m < MB; ++m) out[m * ldo] = fold16(acc[m]);
}

// Weight rows [n0, n1) for every activation row: in passes of 16 weight rows (they stay in L1
// across the activation rows), up to 4 activation rows at a time.
GENGRAPH_VNNI_FN void w4a8_vnni_rows(const W4A8Rows& r, const uint8_t* q, const at::Half* scales,
                                     const at::Half* zeros, int64_t group, int64_t n0, int64_t n1,
                                     float* out, int64_t ldo) {
  constexpr int64_t kRowsPerPass = 16;
  const int64_t K = r.a.K, groups = K / group, per = group / 32;
  alignas(64) int32_t lane_group[16];
  for (int l = 0; l < 16; ++l) lane_group[l] = static_cast<int32_t>(l / per);
  const __m512i idx = _mm512_load_si512(lane_group);
  for (int64_t nb = n0; nb < n1; nb += kRowsPerPass) {
    const int64_t ne = std::min(n1, nb + kRowsPerPass);
    for (int64_t m = 0; m < r.a.M; m += 4) {
      const int64_t mb = std::min<int64_t>(4, r.a.M - m);
      for (int64_t n = nb; n < ne; ++n) {
        const uint8_t* row = q + n * (K / 2);
        const at::Half* sr = scales + n * groups;
        const at::Half* zr = zeros + n * groups;
        float* o = out + m * ldo + n;
        switch (mb) {
          case 1:
            w4a8_vnni_row<1>(r, m, row, sr, zr, per, idx, o, ldo);
            break;
          case 2:
            w4a8_vnni_row<2>(r, m, row, sr, zr, per, idx, o, ldo);
            break;
          case 3:
            w4a8_vnni_row<3>(r, m, row, sr, zr, per, idx, o, ldo);
            break;
          default:
            w4a8_vnni_row<4>(r, m, row, sr, zr, per, idx, o, ldo);
            break;
        }
      }
    }
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// Rows [n0, n1) of the product for every activation row: weight rows in passes of 16 (they stay
// in L1 across the activation rows); one block a row in tiles of up to 4 activation rows, with
// blocks one activation row at a time.
template <bool kVnni, bool kWholeRow>
void w8a8_blocks_rows(const BlockRows& a, const int8_t* w, const float* scales, int64_t n0,
                      int64_t n1, float* out, int64_t ldo) {
  constexpr int64_t kRowsPerPass = 16;
  const int64_t K = a.K;
  auto blocks = [&](int64_t m, int64_t nb, int64_t ne) {
    int64_t n = nb;
    float* o = out + m * ldo;
    if constexpr (kVnni) {
      // The tile's block sums, [groups][16 weight rows][16 blocks].
      static thread_local std::vector<int32_t> sums;
      const size_t need = static_cast<size_t>((K / a.block + 15) / 16 * 256);
      if (sums.size() < need) sums.resize(need);
      w8a8_blocks_vnni_tile(a, m, w + n * K, ne - nb, scales + n, o + n, sums.data());
    } else {
      for (; n + 4 <= ne; n += 4) w8a8_blocks_avx2_tile<4>(a, m, w + n * K, scales + n, o + n);
      for (; n < ne; ++n) w8a8_blocks_avx2_tile<1>(a, m, w + n * K, scales + n, o + n);
    }
  };
  auto tile = [&](auto mb, int64_t m, int64_t nb, int64_t ne) {
    constexpr int MB = decltype(mb)::value;
    int64_t n = nb;
    float* o = out + m * ldo;
    if constexpr (kVnni) {
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
    if constexpr (!kWholeRow) {
      for (int64_t m = 0; m < a.M; ++m) blocks(m, nb, ne);
      continue;
    }
    for (int64_t m = 0; m < a.M; m += 4) {
      switch (std::min<int64_t>(4, a.M - m)) {
        case 1:
          tile(std::integral_constant<int, 1>{}, m, nb, ne);
          break;
        case 2:
          tile(std::integral_constant<int, 2>{}, m, nb, ne);
          break;
        case 3:
          tile(std::integral_constant<int, 3>{}, m, nb, ne);
          break;
        default:
          tile(std::integral_constant<int, 4>{}, m, nb, ne);
          break;
      }
    }
  }
}

// ---- W8A8 with a scale per row on AMX tiles (AMX-INT8) ----
//
// C[n, m] += A[n, k] B[k, m] with tdpbssd (signed int8 by signed int8, int32 sums): A a tile of
// 16 weight rows by `kstep` channels loaded straight from the row-major weight, B the activation
// rows' levels packed four channels to a 32-bit element, [k / 4][m] (pack_amx). Four C tiles (64
// weight rows) share each B tile. The sums are exact, so float(sum) * row scale * scales[n] gives
// the VNNI path's and _int_mm's floats to the bit.

// From this many activation rows AMX beats the VNNI tile (kernels/w8a8_row: 1.3-2.4x at 4 rows and
// 2-3.4x at 8 on SmolLM2's and GPT-2's projections; 0.7-1.2x at one row, where both stream the
// weight), and at a prefill's 256 rows it is 1.2-1.7x _int_mm
// (docs/results/w8a8_kernels_bench_cpu.txt).
constexpr int64_t kAmxMinRows = 4;

// The tile configuration's memory layout (palette 1).
struct alignas(64) AmxConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// The levels of `mt` (<= 16) activation rows from row m0, [K / 4][16] 32-bit elements (the
// columns past mt zero): each element four consecutive channels of one row.
void pack_amx(const BlockRows& a, int64_t m0, int64_t mt, int32_t* out) {
  const int64_t K = a.K;
  std::memset(out, 0, static_cast<size_t>(K / 4 * 16) * sizeof(int32_t));
  for (int64_t m = 0; m < mt; ++m) {
    const int8_t* row = a.q.data() + (m0 + m) * K;
    for (int64_t r = 0; r < K / 4; ++r) std::memcpy(out + r * 16 + m, row + 4 * r, 4);
  }
}

// Blocks of 32 and at most 8 activation rows: the B tile of each 64-channel step holds the first
// block's levels in columns 0-7 (its rows 0-7, four channels each) and the second's in columns
// 8-15 (rows 8-15), zero elsewhere, so that one product of a 64-channel weight tile gives both
// blocks' exact sums side by side: C[n][m] the first's, C[n][8 + m] the second's.
void pack_amx_pairs(const BlockRows& a, int64_t mt, int32_t* out) {
  const int64_t K = a.K;
  std::memset(out, 0, static_cast<size_t>(K / 4 * 16) * sizeof(int32_t));
  for (int64_t m = 0; m < mt; ++m) {
    const int8_t* row = a.q.data() + m * K;
    for (int64_t r = 0; r < K / 4; ++r) {
      std::memcpy(out + r * 16 + (r % 16 >= 8 ? 8 : 0) + m, row + 4 * r, 4);
    }
  }
}

// Loads a tile configuration: the C tiles 16 weight rows by mt int32, the A tiles 16 weight rows
// by kstep bytes, the B tiles kstep / 4 rows of mt 32-bit elements. Loading it zeroes every tile.
GENGRAPH_AMX_FN void amx_load_config(std::initializer_list<int> c, std::initializer_list<int> a,
                                     std::initializer_list<int> b, int64_t mt, int64_t kstep) {
  AmxConfig cfg;
  for (const int t : c) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = static_cast<uint16_t>(mt * 4);
  }
  for (const int t : a) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = static_cast<uint16_t>(kstep);
  }
  for (const int t : b) {
    cfg.rows[t] = static_cast<uint8_t>(kstep / 4);
    cfg.colsb[t] = static_cast<uint16_t>(mt * 4);
  }
  // GCC does not see ldtilecfg read the configuration: without this barrier it drops the stores
  // above once the function is inlined (and the first tile instruction faults).
  asm volatile("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

// The per-row configuration for `mt` activation rows and `kstep` channels a step: C tiles 0, 3,
// 6, 7, A tiles 1 and 4, B tile 2.
GENGRAPH_AMX_FN void amx_configure(int64_t mt, int64_t kstep) {
  amx_load_config({0, 3, 6, 7}, {1, 4}, {2}, mt, kstep);
}

// Weight rows [n0, n1) (multiples of 16) for every activation row, from their levels packed per
// tile of 16 rows (pack_amx; tile i at b + i * K / 4 * 16), into y (row stride ldo). Each 64 (then
// 16) weight rows are loaded once for all the activation tiles.
GENGRAPH_AMX_FN void w8a8_amx_rows(const BlockRows& a, const int32_t* b, const int8_t* w,
                                   const float* scales, int64_t n0, int64_t n1, float* y,
                                   int64_t ldo) {
  const int64_t K = a.K, M = a.M;
  const int64_t kstep = K % 64 == 0 ? 64 : 32;
  int64_t configured = 0;  // the mt the tiles are configured for
  alignas(64) int32_t c[4][16 * 16];
  alignas(64) float staged[16][64];
  // float(sum) * row scale * channel scale, as the VNNI path and _int_mm's path. Staged per
  // activation row, then written as one run of y's row: y's rows are N floats apart, often a
  // multiple of 4 KB, so writing down a column would keep evicting the same cache set.
  const auto finish = [&](int64_t n, int tiles, int64_t m0, int64_t mt) {
    for (int t = 0; t < tiles; ++t) {
      for (int64_t i = 0; i < 16; ++i) {
        const float s = scales[n + 16 * t + i];
        for (int64_t m = 0; m < mt; ++m) {
          staged[m][16 * t + i] = static_cast<float>(c[t][i * mt + m]) * a.block_scale[m0 + m] * s;
        }
      }
    }
    for (int64_t m = 0; m < mt; ++m) {
      std::memcpy(y + (m0 + m) * ldo + n, staged[m],
                  static_cast<size_t>(16 * tiles) * sizeof(float));
    }
  };
  for (int64_t n = n0; n < n1;) {
    const bool four = n + 64 <= n1;
    const int8_t* wn = w + n * K;
    for (int64_t m0 = 0; m0 < M; m0 += 16) {
      const int64_t mt = std::min<int64_t>(16, M - m0);
      if (mt != configured) {
        amx_configure(mt, kstep);
        configured = mt;
      }
      const int32_t* bt = b + (m0 / 16) * (K / 4) * 16;
      _tile_zero(0);
      if (four) {
        _tile_zero(3);
        _tile_zero(6);
        _tile_zero(7);
        for (int64_t k = 0; k < K; k += kstep) {
          _tile_loadd(2, bt + (k / 4) * 16, 64);
          _tile_loadd(1, wn + k, K);
          _tile_dpbssd(0, 1, 2);
          _tile_loadd(4, wn + 16 * K + k, K);
          _tile_dpbssd(3, 4, 2);
          _tile_loadd(1, wn + 32 * K + k, K);
          _tile_dpbssd(6, 1, 2);
          _tile_loadd(4, wn + 48 * K + k, K);
          _tile_dpbssd(7, 4, 2);
        }
        _tile_stored(0, c[0], mt * 4);
        _tile_stored(3, c[1], mt * 4);
        _tile_stored(6, c[2], mt * 4);
        _tile_stored(7, c[3], mt * 4);
        finish(n, 4, m0, mt);
      } else {
        for (int64_t k = 0; k < K; k += kstep) {
          _tile_loadd(2, bt + (k / 4) * 16, 64);
          _tile_loadd(1, wn + k, K);
          _tile_dpbssd(0, 1, 2);
        }
        _tile_stored(0, c[0], mt * 4);
        finish(n, 1, m0, mt);
      }
    }
    n += four ? 64 : 16;
  }
  if (configured) _tile_release();
}

// The block scales of `mt` (<= 16) activation rows from row m0, [K / block][16] (the columns past
// mt zero), beside their levels packed by pack_amx.
void pack_amx_scales(const BlockRows& a, int64_t m0, int64_t mt, float* out) {
  const int64_t nb = a.K / a.block;
  std::memset(out, 0, static_cast<size_t>(nb * 16) * sizeof(float));
  for (int64_t m = 0; m < mt; ++m) {
    for (int64_t b = 0; b < nb; ++b) out[b * 16 + m] = a.block_scale[(m0 + m) * nb + b];
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push  // as for the VNNI tiles: GCC's _mm512_undefined_*
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// How far ahead along each weight row the AMX blocks path prefetches.
constexpr int64_t kAmxPrefetchBytes = 512;

// With blocks: four C tiles (0-3) in turn, one per block, so that three blocks' products are in
// flight while one is stored and scaled; A tiles 4 and 5 and B tiles 6 and 7 alternate.
GENGRAPH_AMX_FN void amx_configure_blocks(int64_t mt, int64_t kstep) {
  amx_load_config({0, 1, 2, 3}, {4, 5}, {6, 7}, mt, kstep);
}

// One block's exact sums for 16 weight rows (wn) by the tile's activation rows, channels [k0, k1),
// into C tile `slot`. Tile numbers are immediates, hence the four spellings.
#define GENGRAPH_AMX_BLOCK(C, A, B)          \
  _tile_zero(C);                             \
  for (int64_t k = k0; k < k1; k += kstep) { \
    _tile_loadd(B, bt + (k / 4) * 16, 64);   \
    _tile_loadd(A, wn + k, K);               \
    _tile_dpbssd(C, A, B);                   \
  }
GENGRAPH_AMX_FN inline void amx_block_sums(const int32_t* bt, const int8_t* wn, int64_t K,
                                           int64_t k0, int64_t k1, int64_t kstep, int64_t slot) {
  switch (slot) {
    case 0:
      GENGRAPH_AMX_BLOCK(0, 4, 6) break;
    case 1:
      GENGRAPH_AMX_BLOCK(1, 5, 7) break;
    case 2:
      GENGRAPH_AMX_BLOCK(2, 4, 6) break;
    default:
      GENGRAPH_AMX_BLOCK(3, 5, 7) break;
  }
}
#undef GENGRAPH_AMX_BLOCK

GENGRAPH_AMX_FN inline void amx_store_sums(int64_t slot, int32_t* c, int64_t stride) {
  switch (slot) {
    case 0:
      _tile_stored(0, c, stride);
      break;
    case 1:
      _tile_stored(1, c, stride);
      break;
    case 2:
      _tile_stored(2, c, stride);
      break;
    default:
      _tile_stored(3, c, stride);
      break;
  }
}

// One tile: 16 weight rows (wn) by mt activation rows. kHalf (mt <= 8): each register holds two
// weight rows' accumulators (the C tile stored 32 bytes a row), half the registers and
// multiply-adds.
template <bool kHalf>
GENGRAPH_AMX_FN void amx_blocks_tile(const BlockRows& a, const int32_t* bt, const float* st,
                                     const int8_t* wn, const float* scales, int64_t mt, float* y,
                                     int64_t ldo) {
  constexpr int kVecs = kHalf ? 8 : 16;
  constexpr int64_t kStride = kHalf ? 32 : 64;
  const int64_t K = a.K, block = a.block, nb = K / block;
  const int64_t kstep = block % 64 == 0 ? 64 : 32;
  alignas(64) int32_t c[16 * 16] = {};
  __m512 acc[kVecs];
  for (int i = 0; i < kVecs; ++i) acc[i] = _mm512_setzero_ps();
  constexpr int64_t kInFlight = 3;
  for (int64_t blk = 0; blk < std::min(kInFlight, nb); ++blk) {
    amx_block_sums(bt, wn, K, blk * block, (blk + 1) * block, kstep, blk % 4);
  }
  for (int64_t blk = 0; blk < nb; ++blk) {
    // The 16 weight rows are 16 streams (K bytes apart) that the tile loads take 32 or 64 bytes
    // of at a time: each row's next lines are asked for ahead.
    if ((blk * block) % 64 == 0) {
      const int64_t ahead = (blk * block + kAmxPrefetchBytes) % K;
      for (int r = 0; r < 16; ++r) _mm_prefetch(wn + r * K + ahead, _MM_HINT_T0);
    }
    if (const int64_t next = blk + kInFlight; next < nb) {
      amx_block_sums(bt, wn, K, next * block, (next + 1) * block, kstep, next % 4);
    }
    amx_store_sums(blk % 4, c, kStride);
    __m512 sv = _mm512_loadu_ps(st + blk * 16);
    if constexpr (kHalf) sv = _mm512_shuffle_f32x4(sv, sv, 0x44);  // the 8 scales twice
    for (int i = 0; i < kVecs; ++i) {
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * i)), sv, acc[i]);
    }
  }
  alignas(64) float staged[16][16];
  for (int i = 0; i < kVecs; ++i) {
    alignas(64) float col[16];
    const __m512 sc = kHalf ? _mm512_castpd_ps(_mm512_insertf64x4(
                                  _mm512_castps_pd(_mm512_set1_ps(scales[2 * i])),
                                  _mm256_castps_pd(_mm256_set1_ps(scales[2 * i + 1])), 1))
                            : _mm512_set1_ps(scales[i]);
    _mm512_store_ps(col, _mm512_mul_ps(acc[i], sc));
    for (int64_t m = 0; m < mt; ++m) {
      if constexpr (kHalf) {
        staged[m][2 * i] = col[m];
        staged[m][2 * i + 1] = col[8 + m];
      } else {
        staged[m][i] = col[m];
      }
    }
  }
  for (int64_t m = 0; m < mt; ++m) std::memcpy(y + m * ldo, staged[m], 16 * sizeof(float));
}

// Blocks of 32 with the activation levels packed by pack_amx_pairs (mt <= 8, K a multiple of 64):
// one 64-channel tile product per two blocks. Each register holds two weight rows' accumulators
// (lanes 0-7 and 8-15, the activation rows in each half); per step the two rows' first-block sums
// are put side by side and multiplied-added, then their second-block sums, in block order.
GENGRAPH_AMX_FN void amx_pairs_tile(const BlockRows& a, const int32_t* bt, const float* st,
                                    const int8_t* wn, const float* scales, int64_t mt, float* y,
                                    int64_t ldo) {
  const int64_t K = a.K, steps = K / 64;
  alignas(64) int32_t c[16 * 16];
  __m512 acc[8];
  for (int i = 0; i < 8; ++i) acc[i] = _mm512_setzero_ps();
  constexpr int64_t kInFlight = 3;
  for (int64_t j = 0; j < std::min(kInFlight, steps); ++j) {
    amx_block_sums(bt, wn, K, j * 64, (j + 1) * 64, 64, j % 4);
  }
  for (int64_t j = 0; j < steps; ++j) {
    if ((j * 64) % 128 == 0) {
      const int64_t ahead = (j * 64 + kAmxPrefetchBytes) % K;
      for (int r = 0; r < 16; ++r) {
        _mm_prefetch(wn + r * K + ahead, _MM_HINT_T0);
        _mm_prefetch(wn + r * K + (ahead + 64) % K, _MM_HINT_T0);
      }
    }
    if (const int64_t next = j + kInFlight; next < steps) {
      amx_block_sums(bt, wn, K, next * 64, (next + 1) * 64, 64, next % 4);
    }
    amx_store_sums(j % 4, c, 64);
    const __m512 s0 = _mm512_loadu_ps(st + 2 * j * 16), s1 = _mm512_loadu_ps(st + (2 * j + 1) * 16);
    const __m512 first = _mm512_shuffle_f32x4(s0, s0, 0x44),
                 second = _mm512_shuffle_f32x4(s1, s1, 0x44);
    for (int i = 0; i < 8; ++i) {
      const __m512i r0 = _mm512_load_si512(c + 32 * i), r1 = _mm512_load_si512(c + 32 * i + 16);
      acc[i] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_shuffle_i32x4(r0, r1, 0x44)), first, acc[i]);
      acc[i] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_shuffle_i32x4(r0, r1, 0xEE)), second, acc[i]);
    }
  }
  alignas(64) float staged[8][16];
  for (int i = 0; i < 8; ++i) {
    alignas(64) float col[16];
    const __m512 sc = _mm512_castpd_ps(
        _mm512_insertf64x4(_mm512_castps_pd(_mm512_set1_ps(scales[2 * i])),
                           _mm256_castps_pd(_mm256_set1_ps(scales[2 * i + 1])), 1));
    _mm512_store_ps(col, _mm512_mul_ps(acc[i], sc));
    for (int64_t m = 0; m < mt; ++m) {
      staged[m][2 * i] = col[m];
      staged[m][2 * i + 1] = col[8 + m];
    }
  }
  for (int64_t m = 0; m < mt; ++m) std::memcpy(y + m * ldo, staged[m], 16 * sizeof(float));
}

// With blocks, in the order of w8a8_blocks_plain: weight rows [n0, n1) (multiples of 16), 16 at a
// time, against each tile of up to 16 activation rows. Per block one C tile of exact sums (16
// weight rows by mt) is stored and added, as floats times the activation rows' block scales, to
// registers of accumulators (the activation rows in the lanes); the next block's tile products
// are issued first.
GENGRAPH_AMX_FN void w8a8_amx_blocks(const BlockRows& a, const int32_t* b, const float* bscales,
                                     const int8_t* w, const float* scales, int64_t n0, int64_t n1,
                                     float* y, int64_t ldo, bool pairs) {
  const int64_t K = a.K, M = a.M, nb = K / a.block;
  const int64_t kstep = a.block % 64 == 0 ? 64 : 32;
  if (pairs) {
    amx_configure_blocks(16, 64);
    for (int64_t n = n0; n < n1; n += 16) {
      amx_pairs_tile(a, b, bscales, w + n * K, scales + n, M, y + n, ldo);
    }
    _tile_release();
    return;
  }
  int64_t configured = 0;
  for (int64_t n = n0; n < n1; n += 16) {
    for (int64_t m0 = 0; m0 < M; m0 += 16) {
      const int64_t mt = std::min<int64_t>(16, M - m0);
      if (mt != configured) {
        amx_configure_blocks(mt, kstep);
        configured = mt;
      }
      const int32_t* bt = b + (m0 / 16) * (K / 4) * 16;
      const float* st = bscales + (m0 / 16) * nb * 16;
      float* yt = y + m0 * ldo + n;
      if (mt <= 8) {
        amx_blocks_tile<true>(a, bt, st, w + n * K, scales + n, mt, yt, ldo);
      } else {
        amx_blocks_tile<false>(a, bt, st, w + n * K, scales + n, mt, yt, ldo);
      }
    }
  }
  if (configured) _tile_release();
}

// ---- W4A8 on AMX tiles, from kW4A8AmxMinRows activation rows ----
//
// Per pass of 16 weight rows, their levels are unpacked once into signed bytes, level - 8, in
// channel order ([16][K]). Per tile of up to 16 activation rows (pack_amx) and per block of 32
// channels, one tdpbssd of the pass's 16 rows by the block's 8 B rows gives S'_b = sum (level - 8)
// x exactly, so S_b = S'_b + 8 A_b. Then w4a8_plain's arithmetic with the activation rows in the
// lanes: per weight row i, the partial sum of lane b % 16 is a register over the activation rows.
// `st` and `at` hold the tile's activation scales and A_b, [K / 32][16] (pack_amx_scales' form).

// From this many rows (a whole tile) W4A8 takes AMX: a prefill's 32 rows at batch 1 19 against
// 30 ms on GPT-2 and 256 rows 122-127 against 206-218 ms, but the batch-8 decode step's 8 rows
// 14.7-15.5 against the VNNI kernel's 13.0-13.9 ms (an 8-row tile pays the whole epilogue).
constexpr int64_t kW4A8AmxMinRows = 16;

// One pass's levels, [16][K] signed bytes.
GENGRAPH_AMX_FN void w4a8_unpack16(const uint8_t* q, int64_t K, int8_t* dst) {
  const __m128i low4 = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);
  for (int64_t i = 0; i < 16; ++i) {
    const uint8_t* row = q + i * (K / 2);
    int8_t* d = dst + i * K;
    for (int64_t b = 0; b < K / 32; ++b) {
      const __m128i w = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 16 * b));
      const __m128i lo = _mm_sub_epi8(_mm_and_si128(w, low4), eight);
      const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(w, 4), low4), eight);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 32 * b), lo);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 32 * b + 16), hi);
    }
  }
}

GENGRAPH_AMX_FN void w4a8_amx(const W4A8Rows& r, const int32_t* b, const float* bscales,
                              const int32_t* bsums, const uint8_t* q, const at::Half* scales,
                              const at::Half* zeros, int64_t group, int64_t n0, int64_t n1,
                              float* y, int64_t ldo) {
  const int64_t K = r.a.K, M = r.a.M, nb = K / 32, groups = K / group, per = group / 32;
  static thread_local std::vector<int8_t> levels;
  static thread_local std::vector<float> acc;  // [16 weight rows][16 lanes][16 activation rows]
  if (levels.size() < static_cast<size_t>(16 * K)) levels.resize(static_cast<size_t>(16 * K));
  acc.resize(16 * 16 * 16);
  alignas(64) int32_t c[16 * 16];
  amx_load_config({0}, {1}, {2}, 16, 32);
  static thread_local GroupParams params;
  for (int64_t n = n0; n < n1; n += 16) {
    w4a8_unpack16(q + n * (K / 2), K, levels.data());
    params.load(scales, zeros, n, 16, groups);
    for (int64_t m0 = 0; m0 < M; m0 += 16) {
      const int64_t mt = std::min<int64_t>(16, M - m0), t = m0 / 16;
      const int32_t* bt = b + t * (K / 4) * 16;
      const float* st = bscales + t * nb * 16;
      const int32_t* at = bsums + t * nb * 16;
      std::fill(acc.begin(), acc.end(), 0.f);
      for (int64_t blk = 0; blk < nb; ++blk) {
        _tile_zero(0);
        _tile_loadd(1, levels.data() + 32 * blk, K);
        _tile_loadd(2, bt + blk * 8 * 16, 64);
        _tile_dpbssd(0, 1, 2);
        _tile_stored(0, c, 64);
        const __m512i a = _mm512_loadu_si512(at + blk * 16);
        const __m512 af = _mm512_cvtepi32_ps(a), sx = _mm512_loadu_ps(st + blk * 16);
        const __m512i a8 = _mm512_slli_epi32(a, 3);
        for (int64_t i = 0; i < 16; ++i) {
          const int64_t g = i * groups + blk / per;
          const __m512i s = _mm512_add_epi32(_mm512_load_si512(c + 16 * i), a8);
          const __m512 tv = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(params.s[g]),
                                            _mm512_mul_ps(af, _mm512_set1_ps(params.z[g])));
          float* p = acc.data() + (i * 16 + blk % 16) * 16;
          _mm512_storeu_ps(p, _mm512_fmadd_ps(tv, sx, _mm512_loadu_ps(p)));
        }
      }
      for (int64_t i = 0; i < 16; ++i) {
        const float* p = acc.data() + i * 256;
        __m512 v[8];
        for (int l = 0; l < 8; ++l) {
          v[l] = _mm512_add_ps(_mm512_loadu_ps(p + 16 * l), _mm512_loadu_ps(p + 16 * (l + 8)));
        }
        for (int l = 0; l < 4; ++l) v[l] = _mm512_add_ps(v[l], v[l + 4]);
        for (int l = 0; l < 2; ++l) v[l] = _mm512_add_ps(v[l], v[l + 2]);
        alignas(64) float out[16];
        _mm512_store_ps(out, _mm512_add_ps(v[0], v[1]));
        for (int64_t m = 0; m < mt; ++m) y[(m0 + m) * ldo + n + i] = out[m];
      }
    }
  }
  _tile_release();
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// Whether this CPU has AMX-INT8 and Linux gave this process the tile data state (asked once).
bool amx_granted() {
  static const bool granted = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    const bool tile = (edx >> 24) & 1u, int8 = (edx >> 25) & 1u;
    if (!tile || !int8 || !__builtin_cpu_supports("avx512bw")) return false;
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;  // <asm/prctl.h>
    return ::syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return granted;
}
#endif  // GENGRAPH_X86_AVX2

std::atomic<bool> g_plain{false};
std::atomic<bool> g_no_vnni{false};
std::atomic<bool> g_no_amx{false};

bool cpu_has_avx2() {
#ifdef GENGRAPH_X86_AVX2
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          __builtin_cpu_supports("f16c");
  return has && !g_plain.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

bool cpu_has_avx512_vnni() {
#ifdef GENGRAPH_X86_AVX2
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512vnni");
  return has && !g_plain.load(std::memory_order_relaxed) &&
         !g_no_vnni.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

bool cpu_has_amx() {
#ifdef GENGRAPH_X86_AVX2
  return cpu_has_avx512_vnni() && !g_no_amx.load(std::memory_order_relaxed) && amx_granted();
#else
  return false;
#endif
}

// Output rows per task: enough work to be worth a thread, and every thread busy.
int64_t grain_rows(int64_t N, int64_t K) {
  const int64_t rows_per_64k = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, K));
  return std::max<int64_t>(4, std::min(rows_per_64k, N / std::max(1, at::get_num_threads())));
}

void check_x(const at::Tensor& x, int64_t K, const char* op) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous() && x.is_cpu(), op,
              ": activations must be a contiguous 2-D float32 CPU tensor, got ", x.sizes(), " ",
              x.scalar_type(), " on ", x.device());
  TORCH_CHECK(x.size(1) == K, op, ": activations have ", x.size(1), " channels, the weight ", K);
}

template <typename W>
at::Tensor stream_or_gemm(const at::Tensor& x, const at::Tensor& w, const W* wp,
                          const at::Tensor& row_scales) {
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  at::Tensor y = at::empty({M, N}, x.options());
  if (M == 0 || N == 0) return y;
  const float* xp = x.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const bool avx2 = cpu_has_avx2();
  at::parallel_for(0, N, grain_rows(N, K), [&](int64_t n0, int64_t n1) {
#ifdef GENGRAPH_X86_AVX2
    if (avx2) return dot_rows_avx2<W>(xp, M, K, wp, n0, n1, yp, N);
#endif
    (void)avx2;
    dot_rows_plain<W>(xp, M, K, wp, n0, n1, yp, N);
  });
  if (row_scales.defined()) y.mul_(row_scales);
  return y;
}

// q[n, k] * scales[n] as float32 in one pass (the values of q.to(kFloat) * scales.unsqueeze(1),
// which writes and reads a float32 copy of the weight twice more): the weight a prefill's GEMM
// multiplies by.
at::Tensor widen_int8(const at::Tensor& q, const at::Tensor& scales) {
  const int64_t N = q.size(0), K = q.size(1);
  at::Tensor w = at::empty({N, K}, scales.options());
  const int8_t* qp = q.data_ptr<int8_t>();
  const float* sp = scales.data_ptr<float>();
  float* wp = w.data_ptr<float>();
  at::parallel_for(0, N, grain_rows(N, K), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const float s = sp[n];
      const int8_t* qr = qp + n * K;
      float* wr = wp + n * K;
      for (int64_t k = 0; k < K; ++k) wr[k] = static_cast<float>(qr[k]) * s;
    }
  });
  return w;
}

// An int8 weight with a float32 scale per output channel, and activations to match.
void check_int8(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scales,
                const std::string& op) {
  TORCH_CHECK(q.dim() == 2 && q.scalar_type() == at::kChar && q.is_contiguous(), op,
              ": weight must be a contiguous 2-D int8 tensor");
  TORCH_CHECK(scales.dim() == 1 && scales.size(0) == q.size(0) &&
                  scales.scalar_type() == at::kFloat && scales.is_contiguous(),
              op, ": one float32 scale per output channel");
  check_x(x, q.size(1), op.c_str());
}

at::Tensor linear_int8_cpu(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scales) {
  check_int8(x, q, scales, "gengraph::linear_int8");
  if (x.size(0) >= kStreamRows) return at::linear(x, widen_int8(q, scales));
  return stream_or_gemm<int8_t>(x, q, q.data_ptr<int8_t>(), scales);
}

// W8A8: each activation row quantized to int8 on the fly (symmetric, its absolute maximum / 127,
// round half to even; a row of zeros gets scale 1), the integer product by LibTorch's _int_mm
// (int32 sums, oneDNN's integer GEMM on x86), then scaled by the row's and the channel's scales.
// With block > 0: each block of `block` channels of a row gets its own scale (quantize_blocks) and
// gengraph's integer kernels take the product (AMX from kAmxMinRows rows, AVX-512 VNNI, AVX2, or
// the plain loops), all in w8a8_blocks_plain's order: a row's floats do not depend on the path or
// on the rows beside it.
at::Tensor linear_w8a8_blocks(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scales,
                              int64_t block) {
  const int64_t M = x.size(0), K = x.size(1), N = q.size(0);
  TORCH_CHECK(block % 32 == 0 && K % block == 0, "gengraph::linear_w8a8: block ", block,
              " must be a multiple of 32 dividing the ", K, " input channels");
  // A block's integer sum stays in int32 (|sum| <= 127 * 128 * block).
  TORCH_CHECK(block <= kWholeRowMaxK, "gengraph::linear_w8a8: block ", block,
              " is over the largest the int32 sums take, ", kWholeRowMaxK);
  at::Tensor y = at::empty({M, N}, x.options());
  if (M == 0 || N == 0) return y;
  // A thread's quantized rows are kept for its next call (no allocation per decode step). The
  // workers below read the caller's through `a` (a lambda names a thread_local directly: each
  // thread would see its own).
  static thread_local BlockRows rows;
  quantize_blocks(x.data_ptr<float>(), M, K, block, rows);
  const BlockRows& a = rows;
  const int8_t* wp = q.data_ptr<int8_t>();
  const float* sp = scales.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const bool vnni = cpu_has_avx512_vnni(), avx2 = cpu_has_avx2(), whole = block == K;
#ifdef GENGRAPH_X86_AVX2
  if (M >= kAmxMinRows && cpu_has_amx()) {  // block <= kWholeRowMaxK: checked above
    // AMX tiles for the weight rows in whole 16s, the VNNI tile for the rest. With blocks both
    // give the plain loops' floats, so a row's outputs are the same as at one row.
    const int64_t tiles = (M + 15) / 16, nb = K / block;
    // Blocks of 32 at up to 8 rows: two blocks per tile product (pack_amx_pairs).
    const bool pairs = !whole && block == 32 && K % 64 == 0 && M <= 8;
    static thread_local std::vector<int32_t> packed;
    static thread_local std::vector<float> packed_scales;
    if (packed.size() < static_cast<size_t>(tiles * K / 4 * 16))
      packed.resize(static_cast<size_t>(tiles * K / 4 * 16));
    if (!whole && packed_scales.size() < static_cast<size_t>(tiles * nb * 16))
      packed_scales.resize(static_cast<size_t>(tiles * nb * 16));
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t mt = std::min<int64_t>(16, M - 16 * t);
      if (pairs) {
        pack_amx_pairs(a, mt, packed.data());
      } else {
        pack_amx(a, 16 * t, mt, packed.data() + t * (K / 4) * 16);
      }
      if (!whole) pack_amx_scales(a, 16 * t, mt, packed_scales.data() + t * nb * 16);
    }
    const int32_t* bp = packed.data();
    const float* bsp = packed_scales.data();
    const int64_t groups = N / 16;
    at::parallel_for(0, groups, whole ? 4 : 1, [&](int64_t g0, int64_t g1) {
      if (whole) return w8a8_amx_rows(a, bp, wp, sp, 16 * g0, 16 * g1, yp, N);
      w8a8_amx_blocks(a, bp, bsp, wp, sp, 16 * g0, 16 * g1, yp, N, pairs);
    });
    if (groups * 16 < N) {
      if (whole) w8a8_blocks_rows<true, true>(a, wp, sp, groups * 16, N, yp, N);
      if (!whole) w8a8_blocks_rows<true, false>(a, wp, sp, groups * 16, N, yp, N);
    }
    return y;
  }
#endif
  at::parallel_for(0, N, grain_rows(N, K), [&](int64_t n0, int64_t n1) {
#ifdef GENGRAPH_X86_AVX2
    if (vnni && whole) return w8a8_blocks_rows<true, true>(a, wp, sp, n0, n1, yp, N);
    if (vnni) return w8a8_blocks_rows<true, false>(a, wp, sp, n0, n1, yp, N);
    if (avx2 && whole) return w8a8_blocks_rows<false, true>(a, wp, sp, n0, n1, yp, N);
    if (avx2) return w8a8_blocks_rows<false, false>(a, wp, sp, n0, n1, yp, N);
#endif
    (void)vnni;
    (void)avx2;
    w8a8_blocks_plain(a, wp, sp, n0, n1, yp, N);
  });
  return y;
}

at::Tensor linear_w8a8_cpu(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scales,
                           int64_t block) {
  check_int8(x, q, scales, "gengraph::linear_w8a8");
  TORCH_CHECK(block >= 0,
              "gengraph::linear_w8a8: block must be 0 (a scale per row) or a "
              "multiple of 32, got ",
              block);
  if (block > 0) return linear_w8a8_blocks(x, q, scales, block);
  // A decode's few rows: gengraph's kernels with one block a row, the same arithmetic as below
  // to the bit (int32 sums, float(sum) * row scale * channel scale) at a fraction of _int_mm's
  // time for one row. The sums stay in int32 up to 2^16 channels.
  const int64_t K = x.size(1);
  // With AMX (from kAmxMinRows rows) a prefill's many rows too: 1.2-1.7x _int_mm at 256 rows.
  if ((x.size(0) < kStreamRows || cpu_has_amx()) && K > 0 && K % 32 == 0 && K <= kWholeRowMaxK &&
      (cpu_has_avx512_vnni() || cpu_has_avx2())) {
    return linear_w8a8_blocks(x, q, scales, K);
  }
  const at::Tensor absmax = x.abs().amax(1, /*keepdim=*/true);
  const at::Tensor row_scale = at::where(absmax > 0, absmax / 127.0f, at::ones_like(absmax));
  const at::Tensor xq = at::round(x / row_scale).to(at::kChar);
  return at::_int_mm(xq, q.t()).to(at::kFloat).mul_(row_scale).mul_(scales);
}

at::Tensor linear_bf16_cpu(const at::Tensor& x, const at::Tensor& w) {
  TORCH_CHECK(w.dim() == 2 && w.scalar_type() == at::kBFloat16 && w.is_contiguous(),
              "gengraph::linear_bf16: weight must be a contiguous 2-D bfloat16 tensor");
  check_x(x, w.size(1), "gengraph::linear_bf16");
  if (x.size(0) >= kStreamRows) return at::linear(x, w.to(at::kFloat));
  return stream_or_gemm<uint16_t>(x, w, reinterpret_cast<const uint16_t*>(w.data_ptr()),
                                  at::Tensor());
}

at::Tensor linear_f32_cpu(const at::Tensor& x, const at::Tensor& w) {
  TORCH_CHECK(w.dim() == 2 && w.scalar_type() == at::kFloat && w.is_contiguous(),
              "gengraph::linear_f32: weight must be a contiguous 2-D float32 tensor");
  check_x(x, w.size(1), "gengraph::linear_f32");
  if (x.size(0) >= kStreamRows) return at::linear(x, w);
  return stream_or_gemm<float>(x, w, w.data_ptr<float>(), at::Tensor());
}

// The checks of linear_int4's arguments, for both int4 operators.
void check_int4(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scales,
                const at::Tensor& zeros, int64_t group, const char* op) {
  TORCH_CHECK(packed.dim() == 2 && packed.scalar_type() == at::kByte && packed.is_contiguous(), op,
              ": weight must be a contiguous 2-D uint8 tensor (pack_int4)");
  const int64_t N = packed.size(0), K = packed.size(1) * 2;
  TORCH_CHECK(group > 0 && group % 32 == 0 && K % group == 0, op, ": group ", group,
              " must be a multiple of 32 dividing the ", K, " input channels");
  const int64_t groups = K / group;
  for (const at::Tensor* t : {&scales, &zeros}) {
    TORCH_CHECK(t->dim() == 2 && t->size(0) == N && t->size(1) == groups &&
                    t->scalar_type() == at::kHalf && t->is_contiguous(),
                op, ": scales and zeros must be float16 [", N, ", ", groups, "], got ", t->sizes(),
                " ", t->scalar_type());
  }
  check_x(x, K, op);
}

// level * scale + zero as float32 in one pass over the packed weight, each product rounded before
// the sum (the values of unpack_int4(packed).to(kFloat) * scales + zeros per group, which makes
// four full-size temporaries): the weight a prefill's GEMM multiplies by.
at::Tensor dequantize_int4_packed(const at::Tensor& packed, const at::Tensor& scales,
                                  const at::Tensor& zeros, int64_t group) {
  const int64_t N = packed.size(0), K = packed.size(1) * 2, groups = K / group;
  at::Tensor w = at::empty({N, K}, scales.options().dtype(at::kFloat));
  const uint8_t* qp = packed.data_ptr<uint8_t>();
  const at::Half* sp = scales.data_ptr<at::Half>();
  const at::Half* zp = zeros.data_ptr<at::Half>();
  float* wp = w.data_ptr<float>();
  at::parallel_for(0, N, grain_rows(N, K / 4), [&](int64_t n0, int64_t n1) {
    static thread_local GroupParams params;
    for (int64_t n = n0; n < n1; ++n) {
      const uint8_t* qr = qp + n * (K / 2);
      float* wr = wp + n * K;
      params.load(sp, zp, n, 1, groups);
      for (int64_t b = 0; b < K / 32; ++b) {
        const int64_t g = (b * 32) / group;
        const float s = params.s[g], z = params.z[g];
        for (int64_t i = 0; i < 16; ++i) {
          const uint8_t byte = qr[b * 16 + i];
          const float lo = static_cast<float>(byte & 0x0F) * s;
          const float hi = static_cast<float>(byte >> 4) * s;
          wr[b * 32 + i] = lo + z;
          wr[b * 32 + 16 + i] = hi + z;
        }
      }
    }
  });
  return w;
}

at::Tensor linear_int4_cpu(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scales,
                           const at::Tensor& zeros, int64_t group) {
  check_int4(x, packed, scales, zeros, group, "gengraph::linear_int4");
  const int64_t N = packed.size(0), K = packed.size(1) * 2, groups = K / group;
  const int64_t M = x.size(0);
  if (M >= kStreamRows) return at::linear(x, dequantize_int4_packed(packed, scales, zeros, group));
  at::Tensor y = at::empty({M, N}, x.options());
  if (M == 0 || N == 0) return y;
  const bool avx2 = cpu_has_avx2();
  // The sums of each group of activations: the zeros' share of every output is one product.
  // The AVX2 path reads them for one activation row only (several rows widen the weights).
  const float* xp = x.data_ptr<float>();
  std::vector<float> xsum(avx2 && M >= 2 ? 0 : static_cast<size_t>(M * groups));
  for (int64_t m = 0; m < M && !xsum.empty(); ++m) {
    for (int64_t g = 0; g < groups; ++g) {
      float s = 0.f;
      for (int64_t k = g * group; k < (g + 1) * group; ++k) s += xp[m * K + k];
      xsum[m * groups + g] = s;
    }
  }
  const uint8_t* qp = packed.data_ptr<uint8_t>();
  const at::Half* sp = scales.data_ptr<at::Half>();
  const at::Half* zp = zeros.data_ptr<at::Half>();
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, N, grain_rows(N, K / 4), [&](int64_t n0, int64_t n1) {
#ifdef GENGRAPH_X86_AVX2
    if (avx2) return int4_rows_avx2(xp, M, K, qp, sp, zp, xsum.data(), group, n0, n1, yp, N);
#endif
    (void)avx2;
    int4_rows_plain(xp, M, K, qp, sp, zp, xsum.data(), group, n0, n1, yp, N);
  });
  return y;
}

at::Tensor linear_w4a8_cpu(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scales,
                           const at::Tensor& zeros, int64_t group) {
  check_int4(x, packed, scales, zeros, group, "gengraph::linear_w4a8");
  TORCH_CHECK(group <= 256, "gengraph::linear_w4a8: group ", group,
              " is over 256 (the kernels read the scales of 16 blocks at a time, so group / 32 "
              "must divide 16; model.group_size takes at most 256)");
  const int64_t M = x.size(0), K = x.size(1), N = packed.size(0);
  at::Tensor y = at::empty({M, N}, x.options());
  if (M == 0 || N == 0) return y;
  // A thread's quantized rows are kept for its next call, as in linear_w8a8_blocks.
  static thread_local W4A8Rows rows;
  quantize_w4a8(x.data_ptr<float>(), M, K, rows);
  const W4A8Rows& r = rows;
  const uint8_t* qp = packed.data_ptr<uint8_t>();
  const at::Half* sp = scales.data_ptr<at::Half>();
  const at::Half* zp = zeros.data_ptr<at::Half>();
  float* yp = y.data_ptr<float>();
  const bool vnni = cpu_has_avx512_vnni(), avx2 = cpu_has_avx2();
#ifdef GENGRAPH_X86_AVX2
  if (M >= kW4A8AmxMinRows && cpu_has_amx()) {
    // AMX tiles for the weight rows in whole 16s, the VNNI kernel for the rest: the same floats.
    const int64_t tiles = (M + 15) / 16, nb = K / 32;
    static thread_local std::vector<int32_t> packed, packed_sums;
    static thread_local std::vector<float> packed_scales;
    const auto grow = [](auto& v, int64_t size) {
      if (v.size() < static_cast<size_t>(size)) v.resize(static_cast<size_t>(size));
    };
    grow(packed, tiles * K / 4 * 16);
    grow(packed_sums, tiles * nb * 16);
    grow(packed_scales, tiles * nb * 16);
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t mt = std::min<int64_t>(16, M - 16 * t);
      pack_amx(r.a, 16 * t, mt, packed.data() + t * (K / 4) * 16);
      pack_amx_scales(r.a, 16 * t, mt, packed_scales.data() + t * nb * 16);
      int32_t* ps = packed_sums.data() + t * nb * 16;
      std::fill(ps, ps + nb * 16, 0);
      for (int64_t m = 0; m < mt; ++m) {
        for (int64_t b = 0; b < nb; ++b) ps[b * 16 + m] = r.sums[(16 * t + m) * nb + b];
      }
    }
    const int32_t* bp = packed.data();
    const int32_t* bsum = packed_sums.data();
    const float* bsc = packed_scales.data();
    const int64_t whole = N / 16;
    at::parallel_for(0, whole, 1, [&](int64_t g0, int64_t g1) {
      w4a8_amx(r, bp, bsc, bsum, qp, sp, zp, group, 16 * g0, 16 * g1, yp, N);
    });
    if (whole * 16 < N) w4a8_vnni_rows(r, qp, sp, zp, group, whole * 16, N, yp, N);
    return y;
  }
#endif
  at::parallel_for(0, N, grain_rows(N, K / 4), [&](int64_t n0, int64_t n1) {
#ifdef GENGRAPH_X86_AVX2
    if (vnni) return w4a8_vnni_rows(r, qp, sp, zp, group, n0, n1, yp, N);
    if (avx2) return w4a8_avx2_rows(r, qp, sp, zp, group, n0, n1, yp, N);
#endif
    (void)vnni;
    (void)avx2;
    w4a8_plain(r, qp, sp, zp, group, n0, n1, yp, N);
  });
  return y;
}

const c10::TypedOperatorHandle<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)>&
int8_op() {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("gengraph::linear_int8", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)>();
  return op;
}

}  // namespace

bool vectorized() { return cpu_has_avx2(); }

void use_plain_loops(bool plain) { g_plain.store(plain); }

void allow_vnni(bool allowed) { g_no_vnni.store(!allowed); }
void allow_amx(bool allowed) { g_no_amx.store(!allowed); }

at::Tensor pack_int4(const at::Tensor& q) {
  TORCH_CHECK(q.dim() == 2 && q.size(1) % 32 == 0, "pack_int4: [N, K] levels with K % 32 == 0");
  const int64_t N = q.size(0), K = q.size(1);
  const at::Tensor v = q.to(at::kByte).view({N, K / 32, 2, 16});
  return at::bitwise_or(v.select(2, 0), at::bitwise_left_shift(v.select(2, 1), 4))
      .reshape({N, K / 2})
      .contiguous();
}

at::Tensor unpack_int4(const at::Tensor& packed) {
  const int64_t N = packed.size(0), K = packed.size(1) * 2;
  const at::Tensor b = packed.view({N, K / 32, 1, 16});
  return at::cat({at::bitwise_and(b, 0x0F), at::bitwise_right_shift(b, 4)}, 2)
      .reshape({N, K})
      .to(at::kInt);
}

at::Tensor linear_int8(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scales) {
  return int8_op().call(x, q, scales);
}

at::Tensor linear_w8a8(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scales,
                       int64_t block) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("gengraph::linear_w8a8", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t)>();
  return op.call(x, q, scales, block);
}

bool integer_dot_vnni() { return cpu_has_avx512_vnni(); }
bool integer_dot_amx() { return cpu_has_amx(); }

at::Tensor linear_int4(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scales,
                       const at::Tensor& zeros, int64_t group) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("gengraph::linear_int4", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&,
                                               const at::Tensor&, const at::Tensor&, int64_t)>();
  return op.call(x, packed, scales, zeros, group);
}

at::Tensor linear_w4a8(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scales,
                       const at::Tensor& zeros, int64_t group) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("gengraph::linear_w4a8", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&,
                                               const at::Tensor&, const at::Tensor&, int64_t)>();
  return op.call(x, packed, scales, zeros, group);
}

at::Tensor linear_bf16(const at::Tensor& x, const at::Tensor& w) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("gengraph::linear_bf16", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&)>();
  return op.call(x, w);
}

at::Tensor linear_f32(const at::Tensor& x, const at::Tensor& w) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("gengraph::linear_f32", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&)>();
  return op.call(x, w);
}

}  // namespace gengraph::kernels

// Operators of the dispatcher, so that TorchScript's tracer records them (its fallback records
// any registered operator) and a trace replays them.
TORCH_LIBRARY_FRAGMENT(gengraph, m) {
  m.def("linear_int8(Tensor x, Tensor q, Tensor scales) -> Tensor");
  m.def("linear_w8a8(Tensor x, Tensor q, Tensor scales, int block=0) -> Tensor");
  // model.int8_activation_rows as one operator, for a program whose row count is not known when
  // it is made (an AOTInductor package, tools/export_aoti.py): linear_w8a8 when x has at least
  // `activation_rows` rows (and activation_rows > 0), else linear_int8, decided at every call as
  // Projection decides it.
  m.def(
      "linear_int8_act(Tensor x, Tensor q, Tensor scales, int activation_rows, int block=0) -> "
      "Tensor");
  m.def("linear_int4(Tensor x, Tensor packed, Tensor scales, Tensor zeros, int group) -> Tensor");
  m.def("linear_w4a8(Tensor x, Tensor packed, Tensor scales, Tensor zeros, int group) -> Tensor");
  // The same for int4 (an AOTInductor package): linear_w4a8 from `activation_rows` rows (> 0),
  // else linear_int4.
  m.def(
      "linear_int4_act(Tensor x, Tensor packed, Tensor scales, Tensor zeros, int group, "
      "int activation_rows) -> Tensor");
  m.def("linear_bf16(Tensor x, Tensor w) -> Tensor");
  m.def("linear_f32(Tensor x, Tensor w) -> Tensor");
}

namespace gengraph::kernels {
namespace {
at::Tensor linear_int8_act_cpu(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scales,
                               int64_t activation_rows, int64_t block) {
  TORCH_CHECK(activation_rows >= 0,
              "gengraph::linear_int8_act: activation_rows must be 0 or more, got ",
              activation_rows);
  return activation_rows > 0 && x.dim() == 2 && x.size(0) >= activation_rows
             ? linear_w8a8_cpu(x, q, scales, block)
             : linear_int8_cpu(x, q, scales);
}

at::Tensor linear_int4_act_cpu(const at::Tensor& x, const at::Tensor& packed,
                               const at::Tensor& scales, const at::Tensor& zeros, int64_t group,
                               int64_t activation_rows) {
  TORCH_CHECK(activation_rows >= 0,
              "gengraph::linear_int4_act: activation_rows must be 0 or more, got ",
              activation_rows);
  return activation_rows > 0 && x.dim() == 2 && x.size(0) >= activation_rows
             ? linear_w4a8_cpu(x, packed, scales, zeros, group)
             : linear_int4_cpu(x, packed, scales, zeros, group);
}
}  // namespace
}  // namespace gengraph::kernels

TORCH_LIBRARY_IMPL(gengraph, CPU, m) {
  m.impl("linear_int8", &gengraph::kernels::linear_int8_cpu);
  m.impl("linear_w8a8", &gengraph::kernels::linear_w8a8_cpu);
  m.impl("linear_int8_act", &gengraph::kernels::linear_int8_act_cpu);
  m.impl("linear_int4", &gengraph::kernels::linear_int4_cpu);
  m.impl("linear_w4a8", &gengraph::kernels::linear_w4a8_cpu);
  m.impl("linear_int4_act", &gengraph::kernels::linear_int4_act_cpu);
  m.impl("linear_bf16", &gengraph::kernels::linear_bf16_cpu);
  m.impl("linear_f32", &gengraph::kernels::linear_f32_cpu);
}

// Shape-only (Meta) kernels, so that torch.export and Inductor can trace the operators
// (tools/export_aoti.py exports a quantized model with them): the output's size from the inputs',
// symbolic sizes kept symbolic.
namespace gengraph::kernels {
namespace {

at::Tensor rows_by(const at::Tensor& x, const c10::SymInt& n, const char* op) {
  TORCH_CHECK(x.dim() == 2, op, ": activations must be 2-D, got ", x.dim(), " dimensions");
  return at::empty_symint({x.sym_size(0), n}, x.options());
}

at::Tensor linear_int8_meta(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scales) {
  TORCH_CHECK(q.dim() == 2, "gengraph::linear_int8: weight must be 2-D");
  return rows_by(x, q.sym_size(0), "gengraph::linear_int8");
}

at::Tensor linear_w8a8_meta(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scales,
                            int64_t block) {
  return linear_int8_meta(x, q, scales);
}

at::Tensor linear_int8_act_meta(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scales,
                                int64_t activation_rows, int64_t block) {
  return linear_int8_meta(x, q, scales);
}

at::Tensor linear_int4_meta(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scales,
                            const at::Tensor& zeros, int64_t group) {
  TORCH_CHECK(packed.dim() == 2, "gengraph::linear_int4: weight must be 2-D");
  return rows_by(x, packed.sym_size(0), "gengraph::linear_int4");
}

at::Tensor linear_int4_act_meta(const at::Tensor& x, const at::Tensor& packed,
                                const at::Tensor& scales, const at::Tensor& zeros, int64_t group,
                                int64_t activation_rows) {
  return linear_int4_meta(x, packed, scales, zeros, group);
}

at::Tensor linear_bf16_meta(const at::Tensor& x, const at::Tensor& w) {
  TORCH_CHECK(w.dim() == 2, "gengraph::linear_bf16: weight must be 2-D");
  return rows_by(x, w.sym_size(0), "gengraph::linear_bf16");
}

}  // namespace
}  // namespace gengraph::kernels

TORCH_LIBRARY_IMPL(gengraph, Meta, m) {
  m.impl("linear_int8", &gengraph::kernels::linear_int8_meta);
  m.impl("linear_w8a8", &gengraph::kernels::linear_w8a8_meta);
  m.impl("linear_int8_act", &gengraph::kernels::linear_int8_act_meta);
  m.impl("linear_int4", &gengraph::kernels::linear_int4_meta);
  m.impl("linear_w4a8", &gengraph::kernels::linear_int4_meta);
  m.impl("linear_int4_act", &gengraph::kernels::linear_int4_act_meta);
  m.impl("linear_bf16", &gengraph::kernels::linear_bf16_meta);
}

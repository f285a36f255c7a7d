// int8 weights by int8 activations (W8A8, linear_w8a8), AVX-512 VNNI tiles: a scale per row or
// per block.
#include "framework/quant/kernels_internal.h"

namespace gengraph::kernels::detail {
#ifdef GENGRAPH_X86_AVX2

#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 warns of its own headers' _mm512_undefined_* (a deliberately uninitialized register)
// wherever they are inlined: not this code's.
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
// in order with the weight rows in the lanes. `sums` holds [groups][16][16] int32. With the
// weight's block scales (wblock: float32 [nb][16], the 16 rows in the lanes) each block's
// multiplier is s_b * w_b and there is no per-channel scale.
GENGRAPH_VNNI_FN void w8a8_blocks_vnni_tile(const BlockRows& a, int64_t m, const int8_t* w,
                                            int64_t rows, const float* scales, const float* wblock,
                                            float* out, int32_t* sums) {
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
      __m512 d = _mm512_set1_ps(bs[g0 + b]);
      if (wblock != nullptr) d = _mm512_mul_ps(d, _mm512_loadu_ps(wblock + (g0 + b) * 16));
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(exact), d, acc);
    }
  }
  const __mmask16 out_mask = static_cast<__mmask16>(rows >= 16 ? 0xFFFF : (1u << rows) - 1);
  if (wblock != nullptr) return _mm512_mask_storeu_ps(out, out_mask, acc);
  _mm512_mask_storeu_ps(out, out_mask, _mm512_mul_ps(acc, _mm512_maskz_loadu_ps(out_mask, scales)));
}

template void w8a8_blocks_rows<true, true>(const BlockRows&, const int8_t*, const float*,
                                           const at::Half*, int64_t, int64_t, float*, int64_t);
template void w8a8_blocks_rows<true, false>(const BlockRows&, const int8_t*, const float*,
                                            const at::Half*, int64_t, int64_t, float*, int64_t);

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif  // GENGRAPH_X86_AVX2

}  // namespace gengraph::kernels::detail

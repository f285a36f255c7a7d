// int8 weights by int8 activations (W8A8, linear_w8a8), AVX2: the activations' quantization and
// the integer tiles, a scale per row or per block.
#include <limits>

#include "framework/quant/kernels_internal.h"

namespace gengraph::kernels::detail {
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
    // Each weight row's stream, a line ahead for each 64 bytes it reads.
    if (k % 64 == 0) {
      for (int n = 0; n < NB; ++n) _mm_prefetch(ahead + n * K + k, _MM_HINT_T0);
    }
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
GENGRAPH_AVX2_FN inline __m256i block_lanes_avx2(const int8_t* x, const int8_t* w, int64_t block,
                                                 bool prefetch) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i v = _mm256_setzero_si256();
  for (int64_t k = 0; k < block; k += 32) {
    if (prefetch && k % 64 == 0)
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

// With blocks, in the order of w8a8_blocks_plain: MB activation rows (m0..) by `rows` (at most 8)
// weight rows, one weight row a lane. Block by block, each block's exact sums for the eight rows
// (lane_sums8), then one fused multiply-add a lane: acc = fma(sum, d, acc), block after block, as
// the plain loop's scalar chain. With the weight's block scales (wcol, float32, block b's at
// wcol + b * 16, the tile's rows side by side) d is s_b * w_b and there is no per-channel scale;
// otherwise d is s_b and the sum ends times scales[n].
// kBlock32: blocks of 32 channels (Q8_0's), one vector a block; otherwise any multiple of 32.
template <int MB, bool kBlock32>
GENGRAPH_AVX2_FN inline void w8a8_blocks_avx2_tile_impl(const BlockRows& a, int64_t m0,
                                                        const int8_t* w, int64_t rows,
                                                        const float* scales, const float* wcol,
                                                        float* out, int64_t ldo) {
  const int64_t K = a.K, block = kBlock32 ? 32 : a.block, nb = K / block;
  const int8_t* xq = a.q.data();
  const float* xs = a.block_scale.data();
  __m256 acc[MB];
  for (int m = 0; m < MB; ++m) acc[m] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t at = b * block;
    const __m256 ws = wcol != nullptr ? _mm256_loadu_ps(wcol + b * 16) : _mm256_setzero_ps();
    if (kBlock32 && b % 2 == 0) {
      for (int64_t n = 0; n < rows; ++n)
        _mm_prefetch(reinterpret_cast<const char*>(w + n * K + at) + kPrefetchBytes, _MM_HINT_T0);
    }
    for (int m = 0; m < MB; ++m) {
      const int8_t* x = xq + (m0 + m) * K + at;
      // kBlock32: block is the constant 32, one step of block_lanes_avx2 (its prefetch above).
      __m256i v[8];
      for (int64_t n = 0; n < 8; ++n) {
        v[n] = n < rows ? block_lanes_avx2(x, w + n * K + at, block, !kBlock32 && m == 0)
                        : _mm256_setzero_si256();
      }
      const __m256 s = _mm256_cvtepi32_ps(lane_sums8(v));
      const __m256 bs = _mm256_set1_ps(xs[(m0 + m) * nb + b]);
      acc[m] = _mm256_fmadd_ps(s, wcol != nullptr ? _mm256_mul_ps(bs, ws) : bs, acc[m]);
    }
  }
  for (int m = 0; m < MB; ++m) {
    alignas(32) float y[8];
    _mm256_store_ps(y, acc[m]);
    for (int64_t n = 0; n < rows; ++n) {
      out[m * ldo + n] = wcol != nullptr ? y[n] : y[n] * scales[n];
    }
  }
}

template <int MB>
GENGRAPH_AVX2_FN void w8a8_blocks_avx2_tile(const BlockRows& a, int64_t m0, const int8_t* w,
                                            int64_t rows, const float* scales, const float* wcol,
                                            float* out, int64_t ldo) {
  if (a.block == 32) {
    w8a8_blocks_avx2_tile_impl<MB, true>(a, m0, w, rows, scales, wcol, out, ldo);
  } else {
    w8a8_blocks_avx2_tile_impl<MB, false>(a, m0, w, rows, scales, wcol, out, ldo);
  }
}

template void w8a8_blocks_rows<false, true>(const BlockRows&, const int8_t*, const float*,
                                            const at::Half*, int64_t, int64_t, float*, int64_t);
template void w8a8_blocks_rows<false, false>(const BlockRows&, const int8_t*, const float*,
                                             const at::Half*, int64_t, int64_t, float*, int64_t);

#endif  // GENGRAPH_X86_AVX2

}  // namespace gengraph::kernels::detail

// int4 weights by int8 activations in blocks of 32 (W4A8, linear_w4a8), AVX2.
#include "framework/quant/kernels_internal.h"

namespace gengraph::kernels::detail {
#ifdef GENGRAPH_X86_AVX2

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

#endif  // GENGRAPH_X86_AVX2

}  // namespace gengraph::kernels::detail

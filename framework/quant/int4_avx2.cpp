// int4 weights (pack_int4) with float32 activations (linear_int4), AVX2 + FMA + F16C.
#include "framework/quant/kernels_internal.h"

namespace gengraph::kernels::detail {
#ifdef GENGRAPH_X86_AVX2

// One int4 weight row against one activation row. Per block of 32: the 16 bytes become four
// vectors of 8 levels (0..15) as floats; per group the partial dot is scaled once, and the zeros
// add one product with the group's activation sum (xsum). `scales` and `zeros` are the row's,
// widened to float32 (GroupParams: widened one at a time here, it ran slower; the figure is in
// docs/results/quant-notes-from-comments.md).
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

// One int4 row widened to float32 weights (level * scale + zero), into dst[K]. kFused: the
// product and the sum in one FMA (the streamed tiles' weights); otherwise each product rounded
// before the sum, the values of unpack_int4(packed).to(kFloat) * scales + zeros (the GEMM's).
template <bool kFused>
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
    const __m128i quarters[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int i = 0; i < 4; ++i) {
      const __m256 level = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(quarters[i]));
      const __m256 w =
          kFused ? _mm256_fmadd_ps(level, s, z) : _mm256_add_ps(_mm256_mul_ps(level, s), z);
      _mm256_storeu_ps(dst + b * 32 + 8 * i, w);
    }
  }
}

template void int4_widen_row<false>(const uint8_t*, const float*, const float*, int64_t, int64_t,
                                    float*);

GENGRAPH_AVX2_FN void int4_rows_avx2(const float* x, int64_t M, int64_t K, const uint8_t* q,
                                     const at::Half* scales, const at::Half* zeros,
                                     const float* xsum, int64_t group, int64_t n0, int64_t n1,
                                     float* out, int64_t ldo) {
  const int64_t groups = K / group;
  static thread_local GroupParams params;
  if (M >= 2 || xsum == nullptr) {
    // Several activation rows: widen 6 weight rows at a time (two of stream_avx2.cpp's tiles of
    // 3) into L1 once, then multiply them as float32 weights for every activation row (widening
    // per row and per 4 activation rows made batch 8 slower than float32).
    constexpr int64_t kWidened = 6;
    thread_local std::vector<float> buf;
    buf.resize(static_cast<size_t>(kWidened * K));
    for (int64_t n = n0; n < n1; n += kWidened) {
      const int64_t nb = std::min<int64_t>(kWidened, n1 - n);
      params.load(scales, zeros, n, nb, groups);
      for (int64_t r = 0; r < nb; ++r) {
        int4_widen_row<true>(q + (n + r) * (K / 2), params.s.data() + r * groups,
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

#endif  // GENGRAPH_X86_AVX2

}  // namespace gengraph::kernels::detail

// int8 weights with a float16 scale per block (int8_blocks.cpp) streamed with float32
// activations, AVX2 + FMA + F16C: weight-only, the levels widened to float32 in registers.
#include "framework/quant/kernels_internal.h"

namespace gengraph::kernels::detail {
#ifdef GENGRAPH_X86_AVX2

namespace {

GENGRAPH_AVX2_FN inline __m256 widen8(const int8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

// MB activation rows by NB weight rows: each 8 levels widened and multiplied by their block's
// scale once (q * scale is exact in float32: 8 bits by float16's 11), then used MB times, as
// stream_avx2.cpp's tiles use a widened weight (`s`: the NB rows' scales as float32, nb apart).
template <int MB, int NB>
GENGRAPH_AVX2_FN void tile(const float* x, int64_t K, const int8_t* w, const float* s,
                           int64_t block, float* out, int64_t ldo) {
  const int64_t nb = K / block;
  __m256 acc[MB][NB];
  for (int m = 0; m < MB; ++m)
    for (int n = 0; n < NB; ++n) acc[m][n] = _mm256_setzero_ps();
  const char* ahead = reinterpret_cast<const char*>(w) + kPrefetchBytes;
  for (int64_t b = 0; b < nb; ++b) {
    __m256 sv[NB];
    for (int n = 0; n < NB; ++n) sv[n] = _mm256_set1_ps(s[n * nb + b]);
    for (int64_t k = b * block; k < (b + 1) * block; k += 8) {
      if (k % 64 == 0) {
        for (int n = 0; n < NB; ++n) _mm_prefetch(ahead + n * K + k, _MM_HINT_T0);
      }
      __m256 wv[NB];
      for (int n = 0; n < NB; ++n) wv[n] = _mm256_mul_ps(widen8(w + n * K + k), sv[n]);
      for (int m = 0; m < MB; ++m) {
        const __m256 xv = _mm256_loadu_ps(x + m * K + k);
        for (int n = 0; n < NB; ++n) acc[m][n] = _mm256_fmadd_ps(xv, wv[n], acc[m][n]);
      }
    }
  }
  for (int m = 0; m < MB; ++m)
    for (int n = 0; n < NB; ++n) out[m * ldo + n] = hsum(acc[m][n]);
}

template <int MB>
GENGRAPH_AVX2_FN void rows_mb(const float* x, int64_t K, const int8_t* w, const float* s,
                              int64_t block, int64_t n0, int64_t n1, float* out, int64_t ldo) {
  constexpr int NB = MB <= 2 ? 4 : 3;  // 12 accumulators at most, as stream_avx2.cpp's tiles
  const int64_t nb = K / block;
  int64_t n = n0;
  for (; n + NB <= n1; n += NB) {
    tile<MB, NB>(x, K, w + n * K, s + (n - n0) * nb, block, out + n, ldo);
  }
  for (; n < n1; ++n) tile<MB, 1>(x, K, w + n * K, s + (n - n0) * nb, block, out + n, ldo);
}

}  // namespace

// Weight rows in passes of 24 (their scales widened to float32 once a pass; the rows stay in L2
// across the activation rows), activation rows in tiles of up to 4.
GENGRAPH_AVX2_FN void int8_blocks_avx2(const float* x, int64_t M, int64_t K, const int8_t* q,
                                       const at::Half* scales, int64_t block, int64_t n0,
                                       int64_t n1, float* out, int64_t ldo) {
  constexpr int64_t kRowsPerPass = 24;
  const int64_t nb = K / block;
  static thread_local std::vector<float> s;
  if (s.size() < static_cast<size_t>(kRowsPerPass * nb)) {
    s.resize(static_cast<size_t>(kRowsPerPass * nb));
  }
  for (int64_t pb = n0; pb < n1; pb += kRowsPerPass) {
    const int64_t pe = std::min(n1, pb + kRowsPerPass);
    halves_to_floats(scales + pb * nb, (pe - pb) * nb, s.data());
    for_row_tiles(M, [&](auto mb, int64_t m) {
      rows_mb<decltype(mb)::value>(x + m * K, K, q, s.data(), block, pb, pe, out + m * ldo, ldo);
    });
  }
}

#endif  // GENGRAPH_X86_AVX2

}  // namespace gengraph::kernels::detail

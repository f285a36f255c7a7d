// Weights streamed with float32 activations, AVX2 + FMA: float32 (linear_f32), int8 weight-only
// (linear_int8) and bfloat16 (linear_bf16), the stored weight widened to float32 in registers.
#include "framework/quant/kernels_internal.h"

namespace gengraph::kernels::detail {
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

// MB activation rows by NB weight rows: each weight vector is widened once and used MB times.
// kAhead: the weight rows come from memory (the pass's first activation rows), so fetch ahead;
// for the pass's later activation rows they are in L2 already and a prefetch only takes a load's
// slot.
template <typename W, int MB, int NB, bool kAhead>
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
    if constexpr (kAhead) {
      for (int64_t b = 0; b < kStepBytes; b += 64)
        _mm_prefetch(ahead + k * NB * sizeof(W) + b, _MM_HINT_T0);
    }
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

// Tiles of MB activation rows by 4 weight rows for one or two activation rows, by 3 for three or
// four (12 accumulators: enough independent sums in flight to keep both FMA pipes busy).
template <typename W, int MB, bool kAhead>
GENGRAPH_AVX2_FN void dot_rows_mb(const float* x, int64_t K, const W* w, int64_t n0, int64_t n1,
                                  float* out, int64_t ldo) {
  constexpr int NB = MB <= 2 ? 4 : 3;
  int64_t n = n0;
  for (; n + NB <= n1; n += NB) dot_block<W, MB, NB, kAhead>(x, K, w + n * K, out + n, ldo);
  for (; n < n1; ++n) dot_block<W, MB, 1, kAhead>(x, K, w + n * K, out + n, ldo);
}

// Rows [n0, n1) for every activation row, in passes of 24 weight rows (they stay in L2 across
// the activation rows) and tiles of at most 4 activation rows. Each output is the same sum in
// the same order whatever the tile: a row's floats do not depend on the rows beside it.
template <typename W>
GENGRAPH_AVX2_FN void dot_rows_avx2(const float* x, int64_t M, int64_t K, const W* w, int64_t n0,
                                    int64_t n1, float* out, int64_t ldo) {
  constexpr int64_t kRowsPerPass = 24;
  for (int64_t nb = n0; nb < n1; nb += kRowsPerPass) {
    const int64_t ne = std::min(n1, nb + kRowsPerPass);
    for_row_tiles(M, [&](auto mb, int64_t m) {
      constexpr int MB = decltype(mb)::value;
      if (m == 0) return dot_rows_mb<W, MB, true>(x + m * K, K, w, nb, ne, out + m * ldo, ldo);
      dot_rows_mb<W, MB, false>(x + m * K, K, w, nb, ne, out + m * ldo, ldo);
    });
  }
}

GENGRAPH_AVX2_FN float read_sum_avx2(const float* p, int64_t n) {
  __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                 _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    for (int j = 0; j < 8; ++j) a[j % 4] = _mm256_add_ps(a[j % 4], _mm256_loadu_ps(p + i + 8 * j));
  }
  float s = hsum(_mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3])));
  for (; i < n; ++i) s += p[i];
  return s;
}

template void dot_rows_avx2<float>(const float*, int64_t, int64_t, const float*, int64_t, int64_t,
                                   float*, int64_t);
template void dot_rows_avx2<int8_t>(const float*, int64_t, int64_t, const int8_t*, int64_t, int64_t,
                                    float*, int64_t);
template void dot_rows_avx2<uint16_t>(const float*, int64_t, int64_t, const uint16_t*, int64_t,
                                      int64_t, float*, int64_t);

#endif  // GENGRAPH_X86_AVX2

}  // namespace gengraph::kernels::detail

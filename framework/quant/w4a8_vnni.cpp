// int4 weights by int8 activations in blocks of 32 (W4A8, linear_w4a8), AVX-512 VNNI.
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

#endif  // GENGRAPH_X86_AVX2

}  // namespace gengraph::kernels::detail

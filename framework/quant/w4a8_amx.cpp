// int4 weights by int8 activations in blocks of 32 (W4A8, linear_w4a8) on AMX-INT8 tiles.
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

// ---- W4A8 on AMX tiles, from kW4A8AmxMinRows activation rows ----
//
// Per pass of 16 weight rows, their levels are unpacked once into signed bytes, level - 8, in
// channel order ([16][K]). Per tile of up to 16 activation rows (pack_amx) and per block of 32
// channels, one tdpbssd of the pass's 16 rows by the block's 8 B rows gives S'_b = sum (level - 8)
// x exactly, so S_b = S'_b + 8 A_b. Then w4a8_plain's arithmetic with the activation rows in the
// lanes: per weight row i, the partial sum of lane b % 16 is a register over the activation rows.
// `st` and `at` hold the tile's activation scales and A_b, [K / 32][16] (pack_amx_scales' form).

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

#endif  // GENGRAPH_X86_AVX2

}  // namespace gengraph::kernels::detail

// int4 weights by int8 activations in blocks of 32 (W4A8, linear_w4a8), AVX2.
#include "framework/quant/kernels_internal.h"

namespace gengraph::kernels::detail {
#ifdef GENGRAPH_X86_AVX2

// W4A8 with AVX2 (CPUs without AVX-512 VNNI), in w4a8_plain's order: MB activation rows (m0..)
// against one weight row, eight blocks a step. 32 packed bytes hold two blocks; their nibbles are
// split once a step and meet each activation row in the int4 layout's order with vpmaddubsw
// (unsigned levels by signed activations: a pair's sum is at most 2 * 15 * 128, no saturation) and
// vpmaddwd, so lanes 0-3 hold the first block's products and 4-7 the second's. Two rounds of
// vphaddd and a permutation give the eight blocks' sums in order, one a lane. Their floats take
// w4a8_plain's operations lane by lane: blocks 16g..16g+7 accumulate in one register, 16g+8..16g+15
// in another (w4a8_plain's acc[b % 16]), then their sum and hsum fold them as its tree does.
// sw, zw: the weight row's scale and minimum per block of 32 (the group's, repeated).
// kFull: all eight blocks b0..b0 + 7 exist (every step but a row's last when K / 32 is not a
// multiple of 8); otherwise the missing blocks' lanes read nothing and add zeros.
template <bool kFull>
GENGRAPH_AVX2_FN inline __m256 load_ps(const float* p, __m256i valid) {
  return kFull ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, valid);
}

template <int MB, int NB, bool kFull>
GENGRAPH_AVX2_FN inline void w4a8_avx2_step(const W4A8Rows& r, int64_t m0, const uint8_t* rows,
                                            const float* sws, const float* zws, int64_t b0,
                                            __m256* acc) {
  const int64_t K = r.a.K, nb = K / 32;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i ones16 = _mm256_set1_epi16(1);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const int64_t gb = kFull ? 8 : nb - b0;
  // Where each vector's activations start in a row of r.order (a run of four blocks: their first
  // 16 channels, then their last 16).
  int64_t xoff[4], xrun[4], vb[4];
  for (int v = 0; v < 4; ++v) {
    vb[v] = kFull ? 2 : std::clamp<int64_t>(gb - 2 * v, 0, 2);
    const int64_t b = b0 + 2 * v, run0 = b & ~int64_t{3};
    xrun[v] = kFull ? 64 : 16 * std::min<int64_t>(4, nb - run0);
    xoff[v] = run0 * 32 + 16 * (b - run0);
  }
  const __m256i valid = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(gb)),
                                           _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  for (int j = 0; j < NB; ++j) {
    const uint8_t* row = rows + j * (K / 2);
    _mm_prefetch(reinterpret_cast<const char*>(row + b0 * 16) + kPrefetchBytes, _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(row + b0 * 16) + kPrefetchBytes + 64, _MM_HINT_T0);
    // The row's nibbles for the step.
    __m256i lo[4], hi[4];
    for (int v = 0; v < 4; ++v) {
      const int64_t b = b0 + 2 * v;
      __m256i w = _mm256_setzero_si256();
      if (vb[v] == 2) {
        w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + b * 16));
      } else if (vb[v] == 1) {  // one block: the upper half zero (no read past the block)
        w = _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + b * 16)));
      }
      lo[v] = _mm256_and_si256(w, low4);
      hi[v] = _mm256_and_si256(_mm256_srli_epi16(w, 4), low4);
    }
    const __m256 swv = load_ps<kFull>(sws + j * nb + b0, valid);
    const __m256 zwv = load_ps<kFull>(zws + j * nb + b0, valid);
    for (int m = 0; m < MB; ++m) {
      const int8_t* xr = r.order.data() + (m0 + m) * K;
      __m256i p[4];
      for (int v = 0; v < 4; ++v) {
        __m256i xl = _mm256_setzero_si256(), xh = _mm256_setzero_si256();
        const int8_t* xlo = xr + xoff[v];
        if (vb[v] == 2) {
          xl = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xlo));
          xh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xlo + xrun[v]));
        } else if (vb[v] == 1) {
          xl = _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xlo)));
          xh = _mm256_zextsi128_si256(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(xlo + xrun[v])));
        }
        p[v] = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(lo[v], xl), ones16),
                                _mm256_madd_epi16(_mm256_maddubs_epi16(hi[v], xh), ones16));
      }
      const __m256i s = _mm256_permutevar8x32_epi32(
          _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3])), order);
      const int64_t at = (m0 + m) * nb + b0;
      const __m256 sx = load_ps<kFull>(r.a.block_scale.data() + at, valid);
      const __m256 av = _mm256_cvtepi32_ps(
          kFull ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r.sums.data() + at))
                : _mm256_maskload_epi32(r.sums.data() + at, valid));
      const __m256 t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), swv, _mm256_mul_ps(av, zwv));
      acc[m * NB + j] = _mm256_fmadd_ps(t, sx, acc[m * NB + j]);
    }
  }
}

// MB activation rows by NB weight rows (rows, sws and zws their first row's; rows K / 2 bytes
// apart, sws and zws K / 32), out[m * ldo + j].
template <int MB, int NB>
GENGRAPH_AVX2_FN void w4a8_avx2_tile(const W4A8Rows& r, int64_t m0, const uint8_t* rows,
                                     const float* sws, const float* zws, float* out, int64_t ldo) {
  const int64_t nb = r.a.K / 32;
  __m256 acc0[MB * NB], acc1[MB * NB];
  for (int i = 0; i < MB * NB; ++i) acc0[i] = acc1[i] = _mm256_setzero_ps();
  for (int64_t b0 = 0; b0 < nb; b0 += 16) {
    if (b0 + 8 <= nb) {
      w4a8_avx2_step<MB, NB, true>(r, m0, rows, sws, zws, b0, acc0);
    } else {
      w4a8_avx2_step<MB, NB, false>(r, m0, rows, sws, zws, b0, acc0);
    }
    if (b0 + 16 <= nb) {
      w4a8_avx2_step<MB, NB, true>(r, m0, rows, sws, zws, b0 + 8, acc1);
    } else if (b0 + 8 < nb) {
      w4a8_avx2_step<MB, NB, false>(r, m0, rows, sws, zws, b0 + 8, acc1);
    }
  }
  for (int m = 0; m < MB; ++m) {
    for (int j = 0; j < NB; ++j) {
      out[m * ldo + j] = hsum(_mm256_add_ps(acc0[m * NB + j], acc1[m * NB + j]));
    }
  }
}

// MB activation rows (m0..) by weight rows [n, ne): NB at a time (more for fewer activation
// rows: eight accumulators a tile), then one at a time.
template <int MB>
GENGRAPH_AVX2_FN void w4a8_avx2_rows_mb(const W4A8Rows& r, int64_t m0, const uint8_t* q,
                                        const float* sws, const float* zws, int64_t n, int64_t ne,
                                        float* out, int64_t ldo) {
  constexpr int NB = MB == 1 ? 4 : MB == 2 ? 2 : 1;
  const int64_t K = r.a.K, nb = K / 32, n0 = n;
  for (; n + NB <= ne; n += NB) {
    w4a8_avx2_tile<MB, NB>(r, m0, q + n * (K / 2), sws + (n - n0) * nb, zws + (n - n0) * nb,
                           out + m0 * ldo + n, ldo);
  }
  for (; n < ne; ++n) {
    w4a8_avx2_tile<MB, 1>(r, m0, q + n * (K / 2), sws + (n - n0) * nb, zws + (n - n0) * nb,
                          out + m0 * ldo + n, ldo);
  }
}

GENGRAPH_AVX2_FN void w4a8_avx2_rows(const W4A8Rows& r, const uint8_t* q, const at::Half* scales,
                                     const at::Half* zeros, int64_t group, int64_t n0, int64_t n1,
                                     float* out, int64_t ldo) {
  constexpr int64_t kRowsPerPass = 16;
  const int64_t K = r.a.K, nb = K / 32, groups = K / group, per = group / 32;
  static thread_local GroupParams params;
  // The pass's scales and minimums per block of 32, [rows][nb].
  static thread_local std::vector<float> sb, zb;
  if (sb.size() < static_cast<size_t>(kRowsPerPass * nb)) {
    sb.resize(static_cast<size_t>(kRowsPerPass * nb));
    zb.resize(static_cast<size_t>(kRowsPerPass * nb));
  }
  for (int64_t nbeg = n0; nbeg < n1; nbeg += kRowsPerPass) {
    const int64_t ne = std::min(n1, nbeg + kRowsPerPass);
    params.load(scales, zeros, nbeg, ne - nbeg, groups);
    // Groups of 32 are blocks already; wider groups are repeated per block.
    const bool blocks = per == 1;
    for (int64_t i = 0, g = 0; !blocks && g < (ne - nbeg) * groups; ++g) {
      for (int64_t j = 0; j < per; ++j, ++i) {
        sb[i] = params.s[g];
        zb[i] = params.z[g];
      }
    }
    const float* sws = blocks ? params.s.data() : sb.data();
    const float* zws = blocks ? params.z.data() : zb.data();
    for_row_tiles(r.a.M, [&](auto mb, int64_t m) {
      w4a8_avx2_rows_mb<decltype(mb)::value>(r, m, q, sws, zws, nbeg, ne, out, ldo);
    });
  }
}

#endif  // GENGRAPH_X86_AVX2

}  // namespace gengraph::kernels::detail

// int8 weights by int8 activations (W8A8, linear_w8a8) on AMX-INT8 tiles, a scale per row or per
// block.
#include "framework/quant/kernels_internal.h"

namespace gengraph::kernels::detail {
#ifdef GENGRAPH_X86_AVX2

// ---- W8A8 with a scale per row on AMX tiles (AMX-INT8) ----
//
// C[n, m] += A[n, k] B[k, m] with tdpbssd (signed int8 by signed int8, int32 sums): A a tile of
// 16 weight rows by `kstep` channels loaded straight from the row-major weight, B the activation
// rows' levels packed four channels to a 32-bit element, [k / 4][m] (pack_amx). Four C tiles (64
// weight rows) share each B tile. The sums are exact, so float(sum) * row scale * scales[n] gives
// the VNNI path's and _int_mm's floats to the bit.

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

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif  // GENGRAPH_X86_AVX2

}  // namespace gengraph::kernels::detail

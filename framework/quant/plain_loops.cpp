// Every path's plain loops (any CPU, and the reference the vectorized paths are tested against),
// and the activations' quantization for the integer products (W8A8, W4A8).
#include <ATen/Parallel.h>

#include <cmath>
#include <limits>

#include "framework/quant/kernels_internal.h"

namespace gengraph::kernels::detail {

void int4_rows_plain(const float* x, int64_t M, int64_t K, const uint8_t* q, const at::Half* scales,
                     const at::Half* zeros, const float* xsum, int64_t group, int64_t n0,
                     int64_t n1, float* out, int64_t ldo) {
  const int64_t groups = K / group;
  static thread_local GroupParams params;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* qr = q + n * (K / 2);
    params.load(scales, zeros, n, 1, groups);
    for (int64_t m = 0; m < M; ++m) {
      const float* xr = x + m * K;
      float y = 0.f;
      for (int64_t g = 0; g < groups; ++g) {
        float p = 0.f;
        for (int64_t k = g * group; k < (g + 1) * group; ++k) {
          p += xr[k] * static_cast<float>(int4_level(qr, k));
        }
        y += p * params.s[g] + params.z[g] * xsum[m * groups + g];
      }
      out[m * ldo + n] = y;
    }
  }
}

// One block of `block` channels (a multiple of 32) of one row, with the plain loops.
void quantize_block_plain(const float* xb, int64_t block, int8_t* qb, float* scale,
                          int32_t* lane_bias) {
  float amax = 0.f;
  bool finite = true;
  for (int64_t i = 0; i < block; ++i) {
    amax = std::max(amax, std::fabs(xb[i]));
    finite = finite && std::isfinite(xb[i]);
  }
  const float s = amax > 0.f ? amax / 127.0f : 1.0f;
  for (int64_t i = 0; i < block; ++i) {
    // Within [-127, 127] by construction for finite activations. A NaN or an infinity gets
    // level 0 (no undefined conversion) and its block the scale NaN, so that the row's
    // outputs are NaN, as the float product's would be.
    const float v = std::nearbyint(xb[i] / s);
    qb[i] = v >= -127.f && v <= 127.f ? static_cast<int8_t>(v) : int8_t{0};
  }
  *scale = finite ? s : std::numeric_limits<float>::quiet_NaN();
  for (int64_t l = 0; l < block / 4; ++l) {
    lane_bias[l] = -128 * (qb[4 * l] + qb[4 * l + 1] + qb[4 * l + 2] + qb[4 * l + 3]);
  }
}

// Fills `r` (its buffers grown as needed, never shrunk: a thread's buffers serve its next call)
// for M rows of K channels, rows in parallel when there are many.
void quantize_blocks(const float* x, int64_t M, int64_t K, int64_t block, BlockRows& r) {
  r.M = M;
  r.K = K;
  r.block = block;
  const auto grow = [](auto& v, int64_t n) {
    if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
  };
  grow(r.q, M * K);
  grow(r.block_scale, M * (K / block));
  grow(r.lane_bias, M * K / 4);
  grow(r.block_bias, M * (K / block));
  const bool vec = cpu_has_avx2();
  int8_t* q = r.q.data();
  float* bs = r.block_scale.data();
  int32_t* lb = r.lane_bias.data();
  int32_t* bb = r.block_bias.data();
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(1, K));
  at::parallel_for(0, M, grain, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      for (int64_t b0 = 0; b0 < K; b0 += block) {
        const int64_t at = m * K + b0;
        float* scale = bs + m * (K / block) + b0 / block;
#ifdef GENGRAPH_X86_AVX2
        if (vec) {
          quantize_block_avx2(x + at, block, q + at, scale, lb + at / 4);
        } else
#endif
        {
          quantize_block_plain(x + at, block, q + at, scale, lb + at / 4);
        }
        // (One block a row: the whole-row kernels add the lanes' biases; the block kernels, which
        // take int8 weights in blocks whatever their number, read this sum.)
        int32_t sum = 0;
        for (int64_t l = at / 4; l < (at + block) / 4; ++l) sum += lb[l];
        bb[m * (K / block) + b0 / block] = sum;
      }
    }
  });
}

// y[m, n] with the blocks in order, as above: the reference the vectorized paths equal.
void w8a8_blocks_plain(const BlockRows& a, const int8_t* w, const float* scales,
                       const at::Half* wblock, int64_t n0, int64_t n1, float* out, int64_t ldo) {
  const int64_t K = a.K, block = a.block, nb = K / block;
  for (int64_t n = n0; n < n1; ++n) {
    const int8_t* wr = w + n * K;
    for (int64_t m = 0; m < a.M; ++m) {
      const int8_t* xr = a.q.data() + m * K;
      const float* bs = a.block_scale.data() + m * nb;
      float acc = 0.f;
      for (int64_t b = 0; b < nb; ++b) {
        int32_t s = 0;
        for (int64_t k = b * block; k < (b + 1) * block; ++k) s += int32_t{xr[k]} * int32_t{wr[k]};
        // The activation block's scale, times the weight block's where the weight has them.
        const float d = wblock ? bs[b] * static_cast<float>(wblock[n * nb + b]) : bs[b];
        acc = std::fma(static_cast<float>(s), d, acc);
      }
      out[m * ldo + n] = wblock ? acc : acc * scales[n];
    }
  }
}

void int8_blocks_plain(const float* x, int64_t M, int64_t K, const int8_t* q,
                       const at::Half* scales, int64_t block, int64_t n0, int64_t n1, float* out,
                       int64_t ldo) {
  const int64_t nb = K / block;
  for (int64_t n = n0; n < n1; ++n) {
    const int8_t* qr = q + n * K;
    for (int64_t m = 0; m < M; ++m) {
      const float* xr = x + m * K;
      float y = 0.f;
      for (int64_t b = 0; b < nb; ++b) {
        float p = 0.f;
        for (int64_t k = b * block; k < (b + 1) * block; ++k)
          p += xr[k] * static_cast<float>(qr[k]);
        y += p * static_cast<float>(scales[n * nb + b]);
      }
      out[m * ldo + n] = y;
    }
  }
}

void quantize_w4a8(const float* x, int64_t M, int64_t K, W4A8Rows& r) {
  quantize_blocks(x, M, K, 32, r.a);
  const int64_t nb = K / 32;
  if (r.order.size() < static_cast<size_t>(M * K)) r.order.resize(static_cast<size_t>(M * K));
  if (r.sums.size() < static_cast<size_t>(M * nb)) r.sums.resize(static_cast<size_t>(M * nb));
  for (int64_t m = 0; m < M; ++m) {
    const int8_t* q = r.a.q.data() + m * K;
    int8_t* o = r.order.data() + m * K;
    for (int64_t b0 = 0; b0 < nb; b0 += 4) {
      const int64_t run = std::min<int64_t>(4, nb - b0);
      for (int64_t i = 0; i < run; ++i) {
        const int8_t* blk = q + (b0 + i) * 32;
        std::memcpy(o + b0 * 32 + 16 * i, blk, 16);
        std::memcpy(o + b0 * 32 + 16 * (run + i), blk + 16, 16);
        int32_t s = 0;
        for (int64_t k = 0; k < 32; ++k) s += blk[k];
        r.sums[m * nb + b0 + i] = s;
      }
    }
  }
}

// y[m, n] as above, channel by channel: the reference the vectorized path equals.
void w4a8_plain(const W4A8Rows& r, const uint8_t* q, const at::Half* scales, const at::Half* zeros,
                int64_t group, int64_t n0, int64_t n1, float* out, int64_t ldo) {
  const int64_t K = r.a.K, nb = K / 32, groups = K / group, per = group / 32;
  static thread_local GroupParams params;
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* row = q + n * (K / 2);
    params.load(scales, zeros, n, 1, groups);
    for (int64_t m = 0; m < r.a.M; ++m) {
      const int8_t* xr = r.a.q.data() + m * K;
      const float* sx = r.a.block_scale.data() + m * nb;
      float acc[16] = {};
      for (int64_t b = 0; b < nb; ++b) {
        int32_t s = 0, a = 0;
        for (int64_t k = 32 * b; k < 32 * (b + 1); ++k) {
          s += int4_level(row, k) * int32_t{xr[k]};
          a += xr[k];
        }
        const int64_t g = b / per;
        const float t =
            std::fma(static_cast<float>(s), params.s[g], static_cast<float>(a) * params.z[g]);
        acc[b % 16] = std::fma(t, sx[b], acc[b % 16]);
      }
      for (int w = 8; w >= 1; w /= 2) {
        for (int i = 0; i < w; ++i) acc[i] += acc[i + w];
      }
      out[m * ldo + n] = acc[0];
    }
  }
}

}  // namespace gengraph::kernels::detail

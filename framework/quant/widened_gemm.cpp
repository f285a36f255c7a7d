// A stored weight widened to float32 for LibTorch's GEMM (widened_linear: a panel of output
// channels at a time, or the whole weight for many rows), and the widening of each stored layout:
// int8 with a scale per channel or per block, int4 in groups with a minimum, bfloat16.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <vector>

#include "framework/quant/kernels.h"
#include "framework/quant/kernels_internal.h"

namespace gengraph::kernels::detail {

bool widens(int64_t rows) {
  return rows >= (cpu_has_avx2() ? kWidenRows : kStreamRows) && !BatchInvariant::active();
}

int64_t panel_rows(int64_t N, int64_t K) {
  // At least 16 rows (a GEMM's register tile is 8 or 16 wide), then as many as kPanelBytes hold.
  const int64_t fit = kPanelBytes / (4 * std::max<int64_t>(K, 1)) / 16 * 16;
  return std::min(N, std::max<int64_t>(16, fit));
}

at::Tensor widened_linear(const at::Tensor& x, int64_t N, const WidenRows& widen) {
  const int64_t M = x.size(0), K = x.size(1);
  if (M >= kWholeWidenRows) {
    // The caller's buffer, kept for its next call: a fresh allocation this size would be fresh
    // pages, faulted in and zeroed every call.
    static thread_local std::vector<float> kept;
    at::Tensor w;
    if (N * K <= kKeptWidenedFloats) {
      if (kept.size() < static_cast<size_t>(N * K)) kept.resize(static_cast<size_t>(N * K));
      w = at::from_blob(kept.data(), {N, K}, x.options());
    } else {
      w = at::empty({N, K}, x.options());
    }
    float* wp = w.data_ptr<float>();
    at::parallel_for(0, N, grain_rows(N, K),
                     [&](int64_t n0, int64_t n1) { widen(n0, n1, wp + n0 * K); });
    return at::linear(x, w);
  }
  at::Tensor y = at::empty({M, N}, x.options());
  if (M == 0 || N == 0) return y;
  const int64_t P = panel_rows(N, K), panels = (N + P - 1) / P;
  // One thread a panel at a time: the GEMM below runs inside the parallel region, so on that
  // thread alone (ATen's and the BLAS's own regions do not nest), and the panel it reads is the
  // one this thread has just written.
  at::parallel_for(0, panels, 1, [&](int64_t p0, int64_t p1) {
    static thread_local std::vector<float> buffer;
    if (buffer.size() < static_cast<size_t>(P * K)) buffer.resize(static_cast<size_t>(P * K));
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t n0 = p * P, n1 = std::min(N, n0 + P);
      widen(n0, n1, buffer.data());
      const at::Tensor panel = at::from_blob(buffer.data(), {n1 - n0, K}, x.options());
      at::Tensor out = y.narrow(1, n0, n1 - n0);
      at::mm_out(out, x, panel.t());
    }
  });
  return y;
}

namespace {

// n int8 values times one scale, each product rounded once.
void scale_int8(const int8_t* q, int64_t n, float s, float* dst) {
  for (int64_t k = 0; k < n; ++k) dst[k] = static_cast<float>(q[k]) * s;
}

#ifdef GENGRAPH_X86_AVX2
GENGRAPH_AVX2_FN void scale_int8_avx2(const int8_t* q, int64_t n, float s, float* dst) {
  const __m256 sv = _mm256_set1_ps(s);
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + k));
    _mm256_storeu_ps(dst + k, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), sv));
  }
  scale_int8(q + k, n - k, s, dst + k);
}
#endif

void scale_int8_any(const int8_t* q, int64_t n, float s, float* dst) {
#ifdef GENGRAPH_X86_AVX2
  if (cpu_has_avx2()) return scale_int8_avx2(q, n, s, dst);
#endif
  scale_int8(q, n, s, dst);
}

}  // namespace

void widen_int8_rows(const at::Tensor& q, const at::Tensor& scales, int64_t n0, int64_t n1,
                     float* dst) {
  const int64_t K = q.size(1);
  const int8_t* qp = q.data_ptr<int8_t>();
  const float* sp = scales.data_ptr<float>();
  for (int64_t n = n0; n < n1; ++n) scale_int8_any(qp + n * K, K, sp[n], dst + (n - n0) * K);
}

void widen_int8_block_rows(const at::Tensor& q, const at::Tensor& scales, int64_t block, int64_t n0,
                           int64_t n1, float* dst) {
  const int64_t K = q.size(1), nb = K / block;
  const int8_t* qp = q.data_ptr<int8_t>();
  const at::Half* sp = scales.data_ptr<at::Half>();
  for (int64_t n = n0; n < n1; ++n) {
    for (int64_t b = 0; b < nb; ++b) {
      scale_int8_any(qp + n * K + b * block, block, static_cast<float>(sp[n * nb + b]),
                     dst + (n - n0) * K + b * block);
    }
  }
}

namespace {

// One int4 row's first `nblocks` blocks of 32 levels as level * scale + zero, each product rounded
// before the sum (not fused): the values of unpack_int4(packed).to(kFloat) * scales + zeros.
void widen_int4_blocks(const uint8_t* q, const float* s, const float* z, int64_t group,
                       int64_t nblocks, float* dst) {
  for (int64_t b = 0; b < nblocks; ++b) {
    const int64_t g = (b * 32) / group;
    for (int64_t i = 0; i < 16; ++i) {
      const uint8_t byte = q[b * 16 + i];
      const float lo = static_cast<float>(byte & 0x0F) * s[g];
      const float hi = static_cast<float>(byte >> 4) * s[g];
      dst[b * 32 + i] = lo + z[g];
      dst[b * 32 + 16 + i] = hi + z[g];
    }
  }
}

#ifdef GENGRAPH_X86_AVX2
GENGRAPH_AVX2_FN void widen_bf16_avx2(const uint16_t* w, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + i));
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
  }
  for (; i < n; ++i) dst[i] = widen(w[i]);
}
#endif

}  // namespace

void widen_int4_rows(const at::Tensor& packed, const at::Tensor& scales, const at::Tensor& zeros,
                     int64_t group, int64_t n0, int64_t n1, float* dst) {
  const int64_t K = packed.size(1) * 2, groups = K / group;
  const uint8_t* qp = packed.data_ptr<uint8_t>();
  const at::Half* sp = scales.data_ptr<at::Half>();
  const at::Half* zp = zeros.data_ptr<at::Half>();
  static thread_local GroupParams params;
  const bool avx2 = cpu_has_avx2();
  for (int64_t n = n0; n < n1; ++n) {
    const uint8_t* qr = qp + n * (K / 2);
    float* wr = dst + (n - n0) * K;
    params.load(sp, zp, n, 1, groups);
#ifdef GENGRAPH_X86_AVX2
    if (avx2) {
      int4_widen_row<false>(qr, params.s.data(), params.z.data(), K, group, wr);
      continue;
    }
#endif
    (void)avx2;
    widen_int4_blocks(qr, params.s.data(), params.z.data(), group, K / 32, wr);
  }
}

void widen_bf16_rows(const at::Tensor& w, int64_t n0, int64_t n1, float* dst) {
  const int64_t K = w.size(1);
  const uint16_t* wp = reinterpret_cast<const uint16_t*>(w.data_ptr()) + n0 * K;
#ifdef GENGRAPH_X86_AVX2
  if (cpu_has_avx2()) return widen_bf16_avx2(wp, (n1 - n0) * K, dst);
#endif
  for (int64_t i = 0; i < (n1 - n0) * K; ++i) dst[i] = widen(wp[i]);
}

}  // namespace gengraph::kernels::detail

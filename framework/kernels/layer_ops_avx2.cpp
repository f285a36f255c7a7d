// silu_mul's row loop with ATen's AVX2 vector type, compiled for AVX2 + FMA (CMakeLists.txt) and
// called only where the CPU has them (layer_ops.cpp checks). Vectorized<float>::exp is SLEEF's
// Sleef_expf8_u10, the function LibTorch's own AVX2 silu kernel calls (LibTorch exports it), and
// the expression is that kernel's, so the values over whole vectors are the same.
#include <ATen/cpu/vec/vec.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace gengraph::kernels {

void silu_mul_row_plain(const float* g, const float* u, float* out, int64_t n);  // layer_ops.cpp

void silu_mul_row_avx2(const float* g, const float* u, float* out, int64_t n) {
  using Vec = at::vec::Vectorized<float>;
  const Vec one(1.0f);
  int64_t i = 0;
  for (; i + Vec::size() <= n; i += Vec::size()) {
    const Vec x = Vec::loadu(g + i);
    const Vec s = x / (one + x.neg().exp());
    (s * Vec::loadu(u + i)).store(out + i);
  }
  // The tail in the scalar form (LibTorch's tails may round differently).
  silu_mul_row_plain(g + i, u + i, out + i, n - i);
}

// decode_attention's dot products, exponentials and weighted sum for one row and head
// (layer_ops.cpp has the plain form and the rest).

// s[l] = q . k[l] (k[l] at k + l * ks) for every l. Each key's sum is one 8-lane accumulator of
// fused multiply-adds over q's whole vectors, reduced, then the tail added in order: four keys
// are summed side by side (independent chains, one load of q for four), each exactly as it would
// be alone.
void dots_avx2(const float* q, const float* k, int64_t ks, int64_t L, int64_t n, float* s,
               const float* v, int64_t vs) {
  using Vec = at::vec::Vectorized<float>;
  const auto add = [](Vec x, Vec y) { return x + y; };
  const int64_t whole = n - n % Vec::size();
  const auto tail = [&](const float* key, float sum) {
    for (int64_t i = whole; i < n; ++i) sum += q[i] * key[i];
    return sum;
  };
  int64_t l = 0;
  for (; l + 4 <= L; l += 4) {
    const float* k0 = k + l * ks;
    const float* k1 = k0 + ks;
    const float* k2 = k1 + ks;
    const float* k3 = k2 + ks;
    Vec a0(0.0f), a1(0.0f), a2(0.0f), a3(0.0f);
    // Ask for what comes next while these keys are summed: the keys 8 on, and these keys'
    // values, which the weighted sum reads next (a row and head's cache is a few KB, too short a
    // run for the hardware prefetcher to be ahead of).
    for (int64_t j = 0; j < 4; ++j) {
      if (l + 8 + j < L) {
        for (int64_t i = 0; i < n; i += 16) __builtin_prefetch(k + (l + 8 + j) * ks + i);
      }
      for (int64_t i = 0; i < n; i += 16) __builtin_prefetch(v + (l + j) * vs + i);
    }
    for (int64_t i = 0; i < whole; i += Vec::size()) {
      const Vec qv = Vec::loadu(q + i);
      a0 = at::vec::fmadd(qv, Vec::loadu(k0 + i), a0);
      a1 = at::vec::fmadd(qv, Vec::loadu(k1 + i), a1);
      a2 = at::vec::fmadd(qv, Vec::loadu(k2 + i), a2);
      a3 = at::vec::fmadd(qv, Vec::loadu(k3 + i), a3);
    }
    s[l] = tail(k0, at::vec::vec_reduce_all<float>(add, a0));
    s[l + 1] = tail(k1, at::vec::vec_reduce_all<float>(add, a1));
    s[l + 2] = tail(k2, at::vec::vec_reduce_all<float>(add, a2));
    s[l + 3] = tail(k3, at::vec::vec_reduce_all<float>(add, a3));
  }
  for (; l < L; ++l) {
    const float* key = k + l * ks;
    Vec acc(0.0f);
    for (int64_t i = 0; i < whole; i += Vec::size())
      acc = at::vec::fmadd(Vec::loadu(q + i), Vec::loadu(key + i), acc);
    s[l] = tail(key, at::vec::vec_reduce_all<float>(add, acc));
  }
}

// s[l] = exp(s[l] - max) in place; returns their sum. The tail is one more vector whose lanes past
// n hold -inf (their exponential 0), so every exponential is the vector function's and lane j
// sums the elements l = j mod 8 in order whatever n is: the sum over a cache's positions does not
// depend on how many masked positions (-inf, 0 once exponentiated) come after them, and a static
// cache's step gives a growing cache's values to the bit.
float exp_shifted_avx2(float* s, int64_t n, float max) {
  using Vec = at::vec::Vectorized<float>;
  const Vec m(max);
  Vec acc(0.0f);
  int64_t i = 0;
  for (; i + Vec::size() <= n; i += Vec::size()) {
    const Vec e = (Vec::loadu(s + i) - m).exp();
    e.store(s + i);
    acc = acc + e;
  }
  if (i < n) {
    const int64_t left = n - i;
    const Vec e =
        (Vec::set(Vec(-std::numeric_limits<float>::infinity()), Vec::loadu(s + i, left), left) - m)
            .exp();
    e.store(s + i, left);
    acc = acc + e;
  }
  return at::vec::vec_reduce_all<float>([](Vec x, Vec y) { return x + y; }, acc);
}

// out[d] = sum over l of p[l] * v[l][d] (v[l] at v + l * vs), the l with p[l] == 0 skipped (masked,
// or too small to count), each element's terms added in the order of l by one fused multiply-add
// each from 0: 64 channels at a time stay in registers across every l instead of going through
// memory per term (the same roundings, so the same floats).
void weighted_sum_avx2(const float* p, const float* v, int64_t vs, int64_t L, int64_t n,
                       float* out) {
  using Vec = at::vec::Vectorized<float>;
  constexpr int64_t kVecs = 8;
  int64_t i = 0;
  for (; i + kVecs * Vec::size() <= n; i += kVecs * Vec::size()) {
    Vec acc[kVecs];
    for (int64_t j = 0; j < kVecs; ++j) acc[j] = Vec(0.0f);
    for (int64_t l = 0; l < L; ++l) {
      if (p[l] == 0.f) continue;
      const Vec pv(p[l]);
      const float* row = v + l * vs + i;
      for (int64_t j = 0; j < kVecs; ++j)
        acc[j] = at::vec::fmadd(pv, Vec::loadu(row + j * Vec::size()), acc[j]);
    }
    for (int64_t j = 0; j < kVecs; ++j) acc[j].store(out + i + j * Vec::size());
  }
  for (; i + Vec::size() <= n; i += Vec::size()) {
    Vec acc(0.0f);
    for (int64_t l = 0; l < L; ++l) {
      if (p[l] != 0.f) acc = at::vec::fmadd(Vec(p[l]), Vec::loadu(v + l * vs + i), acc);
    }
    acc.store(out + i);
  }
  for (; i < n; ++i) {
    float o = 0.f;
    for (int64_t l = 0; l < L; ++l) {
      if (p[l] != 0.f) o += p[l] * v[l * vs + i];
    }
    out[i] = o;
  }
}

// weighted_sum_avx2 over a paged cache (paged_attention.cpp): the value at position l is the row at
// v + (blocks[l / bs] * bs + l % bs) * vs. The positions before `first` are skipped (their p is 0:
// masked), the rest summed in the order of l with the same fused multiply-adds from 0, so the
// floats equal weighted_sum_avx2's over the same values laid out in order.
void weighted_sum_paged_avx2(const float* p, const float* v, int64_t vs, const int64_t* blocks,
                             int64_t bs, int64_t first, int64_t L, int64_t n, float* out) {
  using Vec = at::vec::Vectorized<float>;
  constexpr int64_t kVecs = 8;
  // f(l, row) for every l in [first, L) with p[l] != 0, in order, row the value's first channel.
  const auto each = [&](auto&& f) {
    for (int64_t b = first / bs; b * bs < L; ++b) {
      const float* base = v + blocks[b] * bs * vs;
      for (int64_t l = std::max(first, b * bs), end = std::min(L, (b + 1) * bs); l < end; ++l) {
        if (p[l] != 0.f) f(p[l], base + (l - b * bs) * vs);
      }
    }
  };
  int64_t i = 0;
  for (; i + kVecs * Vec::size() <= n; i += kVecs * Vec::size()) {
    Vec acc[kVecs];
    for (int64_t j = 0; j < kVecs; ++j) acc[j] = Vec(0.0f);
    each([&](float pl, const float* row) {
      const Vec pv(pl);
      for (int64_t j = 0; j < kVecs; ++j)
        acc[j] = at::vec::fmadd(pv, Vec::loadu(row + i + j * Vec::size()), acc[j]);
    });
    for (int64_t j = 0; j < kVecs; ++j) acc[j].store(out + i + j * Vec::size());
  }
  for (; i + Vec::size() <= n; i += Vec::size()) {
    Vec acc(0.0f);
    each([&](float pl, const float* row) {
      acc = at::vec::fmadd(Vec(pl), Vec::loadu(row + i), acc);
    });
    acc.store(out + i);
  }
  for (; i < n; ++i) {
    float o = 0.f;
    each([&](float pl, const float* row) { o += pl * row[i]; });
    out[i] = o;
  }
}

// The index of the first maximum of x[0, n), or of the first NaN where there is one. One pass
// takes the maximum and notes any NaN 8 lanes at a time; a second finds the first element equal
// to it (+0 and -0 are equal, so the first of them, as an element-by-element scan gives).
int64_t argmax_avx2(const float* x, int64_t n) {
  const int64_t whole = n - n % 8;
  __m256 top = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 unordered = _mm256_setzero_ps();
  for (int64_t i = 0; i < whole; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    unordered = _mm256_or_ps(unordered, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    top = _mm256_max_ps(top, v);
  }
  bool nan = _mm256_movemask_ps(unordered) != 0;
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, top);
  float max = lanes[0];
  for (int j = 1; j < 8; ++j) max = std::max(max, lanes[j]);
  for (int64_t i = whole; i < n; ++i) {
    nan = nan || std::isnan(x[i]);
    max = std::max(max, x[i]);
  }
  if (nan) {
    for (int64_t i = 0; i < n; ++i) {
      if (std::isnan(x[i])) return i;
    }
  }
  const __m256 want = _mm256_set1_ps(max);
  for (int64_t i = 0; i < whole; i += 8) {
    const int hits = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), want, _CMP_EQ_OQ));
    if (hits != 0) return i + __builtin_ctz(static_cast<unsigned>(hits));
  }
  for (int64_t i = whole; i < n; ++i) {
    if (x[i] == max) return i;
  }
  return 0;  // not reached: the maximum is one of the elements
}

}  // namespace gengraph::kernels

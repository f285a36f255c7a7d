// silu_mul's row loop with ATen's AVX2 vector type, compiled for AVX2 + FMA (CMakeLists.txt) and
// called only where the CPU has them (layer_ops.cpp checks). Vectorized<float>::exp is SLEEF's
// Sleef_expf8_u10, the function LibTorch's own AVX2 silu kernel calls (LibTorch exports it), and
// the expression is that kernel's, so the values over whole vectors are the same.
#include <ATen/cpu/vec/vec.h>

#include <cmath>
#include <cstdint>

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

// decode_attention's dot products and exponentials for one row and head (layer_ops.cpp has the
// plain form and the rest).
float dot_avx2(const float* a, const float* b, int64_t n) {
  using Vec = at::vec::Vectorized<float>;
  Vec acc(0.0f);
  int64_t i = 0;
  for (; i + Vec::size() <= n; i += Vec::size())
    acc = at::vec::fmadd(Vec::loadu(a + i), Vec::loadu(b + i), acc);
  float s = at::vec::vec_reduce_all<float>([](Vec x, Vec y) { return x + y; }, acc);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// s[l] = exp(s[l] - max) in place; returns their sum.
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
  float sum = at::vec::vec_reduce_all<float>([](Vec x, Vec y) { return x + y; }, acc);
  for (; i < n; ++i) {
    s[i] = std::exp(s[i] - max);
    sum += s[i];
  }
  return sum;
}

// out[d] += p * v[d]
void axpy_avx2(float p, const float* v, float* out, int64_t n) {
  using Vec = at::vec::Vectorized<float>;
  const Vec pv(p);
  int64_t i = 0;
  for (; i + Vec::size() <= n; i += Vec::size())
    at::vec::fmadd(pv, Vec::loadu(v + i), Vec::loadu(out + i)).store(out + i);
  for (; i < n; ++i) out[i] += p * v[i];
}

}  // namespace gengraph::kernels

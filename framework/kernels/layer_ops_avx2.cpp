// silu_mul's row loop with ATen's AVX2 vector type, compiled for AVX2 + FMA (CMakeLists.txt) and
// called only where the CPU has them (layer_ops.cpp checks). Vectorized<float>::exp is SLEEF's
// Sleef_expf8_u10, the function LibTorch's own AVX2 silu kernel calls (LibTorch exports it), and
// the expression is that kernel's, so the values over whole vectors are the same.
#include <ATen/cpu/vec/vec.h>

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

}  // namespace gengraph::kernels

#include "framework/kernels/layer_ops.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "framework/quant/kernels.h"

namespace gengraph::kernels {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GENGRAPH_LAYER_OPS_AVX2 1
// The AVX2 body of silu_mul (layer_ops_avx2.cpp, compiled for AVX2 on x86-64 only).
void silu_mul_row_avx2(const float* g, const float* u, float* out, int64_t n);
void dots_avx2(const float* q, const float* k, int64_t ks, int64_t L, int64_t n, float* s,
               const float* v, int64_t vs);
float exp_shifted_avx2(float* s, int64_t n, float max);
void weighted_sum_avx2(const float* p, const float* v, int64_t vs, int64_t L, int64_t n,
                       float* out);
int64_t argmax_avx2(const float* x, int64_t n);
constexpr bool kHaveAvx2Unit = true;
#else
constexpr bool kHaveAvx2Unit = false;
#endif

// silu(g) * u one row at a time in at::silu's scalar form, as LibTorch's kernel computes the
// values past its last full vector: the plain path, and the AVX2 path's tail.
void silu_mul_row_plain(const float* g, const float* u, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float s = g[i] / (1.0f + std::exp(-g[i]));
    out[i] = s * u[i];
  }
}

namespace {

// Every (row, position, head) of q, k and v is one task of hd values; tasks are split so that a
// decode step's few run on the calling thread.
constexpr int64_t kGrainValues = 1 << 15;

void check_rotary(const at::Tensor& y, const at::Tensor& cos, const at::Tensor& sin, int64_t heads,
                  int64_t kv_heads) {
  TORCH_CHECK(rotary_qkv_applies(y, cos, heads, kv_heads) && sin.sizes() == cos.sizes() &&
                  sin.scalar_type() == at::kFloat && sin.is_cpu(),
              "gengraph::rotary_qkv: float32 CPU y [rows, T, (heads + 2 kv_heads) * hd] with a "
              "contiguous last dimension and cos, sin [rows, T, hd] or [rows, T, 1, hd] (heads ",
              heads, ", kv_heads ", kv_heads, "), got y ", y.sizes(), " ", y.scalar_type(),
              ", cos ", cos.sizes(), " ", cos.scalar_type(), ", sin ", sin.sizes(), " ",
              sin.scalar_type());
}

// One head's hd values rotated (q and k) or copied (v). `cs`/`sn` are the position's cos/sin.
inline void rotate_head(const float* x, const float* cs, const float* sn, float* out, int64_t hd,
                        bool neighbours) {
  const int64_t half = hd / 2;
  for (int64_t d = 0; d < hd; ++d) {
    const int64_t partner = neighbours ? (d ^ 1) : (d < half ? d + half : d - half);
    // Two rounded products, then their rounded sum: rotate_fused's x * cos + swapped * sin.
    const float a = x[d] * cs[d];
    const float b = x[partner] * sn[d];
    out[d] = a + b;
  }
}

// Walks every (row, t, head) of y's q, k and v heads; `sink(kind, row, t, head, values)` is
// called with kind 0 (q), 1 (k), 2 (v) and the head's hd output values computed into a buffer.
template <typename Sink>
void for_each_head(const at::Tensor& y, const at::Tensor& cos_in, const at::Tensor& sin_in,
                   int64_t heads, int64_t kv_heads, RotaryLayout layout, Sink sink) {
  const at::Tensor cos = cos_in.contiguous(), sin = sin_in.contiguous();
  const int64_t rows = y.size(0), t = y.size(1), hd = cos.size(-1);
  const int64_t all = heads + 2 * kv_heads;
  const int64_t srow = y.stride(0), st = y.stride(1);
  const float* yp = y.data_ptr<float>();
  const float* cp = cos.data_ptr<float>();
  const float* sp = sin.data_ptr<float>();
  const bool neighbours = layout == RotaryLayout::kNeighbours;
  const int64_t tasks = rows * t * all;
  at::parallel_for(0, tasks, std::max<int64_t>(1, kGrainValues / hd), [&](int64_t b, int64_t e) {
    std::vector<float> buf(hd);
    for (int64_t task = b; task < e; ++task) {
      const int64_t head = task % all, rt = task / all, pos = rt % t, row = rt / t;
      const float* x = yp + row * srow + pos * st + head * hd;
      const int kind = head < heads ? 0 : head < heads + kv_heads ? 1 : 2;
      const int64_t index = kind == 0 ? head : kind == 1 ? head - heads : head - heads - kv_heads;
      if (kind == 2) {
        sink(kind, row, pos, index, x);
      } else {
        const int64_t c = (row * t + pos) * hd;
        rotate_head(x, cp + c, sp + c, buf.data(), hd, neighbours);
        sink(kind, row, pos, index, buf.data());
      }
    }
  });
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> rotary_qkv_cpu(const at::Tensor& y,
                                                              const at::Tensor& cos,
                                                              const at::Tensor& sin, int64_t heads,
                                                              int64_t kv_heads, bool neighbours) {
  check_rotary(y, cos, sin, heads, kv_heads);
  const int64_t rows = y.size(0), t = y.size(1), hd = cos.size(-1);
  at::Tensor q = at::empty({rows, heads, t, hd}, y.options());
  at::Tensor k = at::empty({rows, kv_heads, t, hd}, y.options());
  at::Tensor v = at::empty({rows, kv_heads, t, hd}, y.options());
  float* out[3] = {q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>()};
  const int64_t n_heads[3] = {heads, kv_heads, kv_heads};
  for_each_head(y, cos, sin, heads, kv_heads,
                neighbours ? RotaryLayout::kNeighbours : RotaryLayout::kHalves,
                [&](int kind, int64_t row, int64_t pos, int64_t head, const float* values) {
                  float* dst = out[kind] + ((row * n_heads[kind] + head) * t + pos) * hd;
                  std::copy(values, values + hd, dst);
                });
  return {q, k, v};
}

at::Tensor rotary_qkv_into_cpu(const at::Tensor& y, const at::Tensor& cos, const at::Tensor& sin,
                               int64_t heads, int64_t kv_heads, bool neighbours,
                               const at::Tensor& keys, const at::Tensor& values,
                               const at::Tensor& slots_in) {
  check_rotary(y, cos, sin, heads, kv_heads);
  const int64_t rows = y.size(0), t = y.size(1), hd = cos.size(-1);
  const auto cache_ok = [&](const at::Tensor& c) {
    return c.is_cpu() && c.scalar_type() == at::kFloat && c.dim() == 4 && c.size(0) == rows &&
           c.size(1) == kv_heads && c.size(3) == hd && c.stride(3) == 1;
  };
  TORCH_CHECK(cache_ok(keys) && cache_ok(values) && keys.size(2) == values.size(2),
              "gengraph::rotary_qkv_into: float32 CPU cache layers [", rows, ", ", kv_heads,
              ", L, ", hd, "] with a contiguous last dimension, got keys ", keys.sizes(),
              " and values ", values.sizes());
  TORCH_CHECK(slots_in.dim() == 1 && slots_in.size(0) == t && slots_in.scalar_type() == at::kLong,
              "gengraph::rotary_qkv_into: slots [", t, "] int64, got ", slots_in.sizes(), " ",
              slots_in.scalar_type());
  const at::Tensor slots = slots_in.to(at::kCPU).contiguous();
  const int64_t* sp = slots.data_ptr<int64_t>();
  const int64_t length = keys.size(2);
  for (int64_t i = 0; i < t; ++i) {
    TORCH_CHECK(sp[i] >= 0 && sp[i] < length, "gengraph::rotary_qkv_into: slot ", sp[i],
                " outside the cache's ", length, " positions");
  }
  at::Tensor q = at::empty({rows, heads, t, hd}, y.options());
  float* qp = q.data_ptr<float>();
  float* cache[2] = {keys.data_ptr<float>(), values.data_ptr<float>()};
  const at::Tensor* tensors[2] = {&keys, &values};
  for_each_head(
      y, cos, sin, heads, kv_heads, neighbours ? RotaryLayout::kNeighbours : RotaryLayout::kHalves,
      [&](int kind, int64_t row, int64_t pos, int64_t head, const float* v) {
        float* dst;
        if (kind == 0) {
          dst = qp + ((row * heads + head) * t + pos) * hd;
        } else {
          const at::Tensor& c = *tensors[kind - 1];
          dst = cache[kind - 1] + row * c.stride(0) + head * c.stride(1) + sp[pos] * c.stride(2);
        }
        std::copy(v, v + hd, dst);
      });
  return q;
}

at::Tensor silu_mul_cpu(const at::Tensor& gate_up) {
  TORCH_CHECK(silu_mul_applies(gate_up),
              "gengraph::silu_mul: float32 CPU [..., 2 * inner] with a contiguous last dimension, "
              "got ",
              gate_up.sizes(), " ", gate_up.scalar_type());
  const int64_t inner = gate_up.size(-1) / 2;
  const at::Tensor x = gate_up.reshape({-1, 2 * inner});  // a view for the layouts we are given
  auto sizes = gate_up.sizes().vec();
  sizes.back() = inner;
  at::Tensor out = at::empty(sizes, gate_up.options());
  const int64_t rows = x.size(0), ld = x.stride(0);
  const float* xp = x.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const bool avx2 = kHaveAvx2Unit && silu_mul_vectorized();
  at::parallel_for(0, rows, std::max<int64_t>(1, kGrainValues / std::max<int64_t>(1, inner)),
                   [&](int64_t b, int64_t e) {
                     for (int64_t r = b; r < e; ++r) {
                       const float* g = xp + r * ld;
#ifdef GENGRAPH_LAYER_OPS_AVX2
                       if (avx2) {
                         silu_mul_row_avx2(g, g + inner, op + r * inner, inner);
                         continue;
                       }
#endif
                       silu_mul_row_plain(g, g + inner, op + r * inner, inner);
                     }
                   });
  return out;
}

// One row and head of decode_attention: scores into s[L], the output into out[hd].
template <bool kAvx2>
void attend_one(const float* q, const float* k, int64_t ks, const float* v, int64_t vs, int64_t L,
                int64_t hd, const float* add, const bool* allowed, int64_t ms, float scale,
                float* s, float* out) {
  float max = -std::numeric_limits<float>::infinity();
#ifdef GENGRAPH_LAYER_OPS_AVX2
  if constexpr (kAvx2) dots_avx2(q, k, ks, L, hd, s, v, vs);
#endif
  for (int64_t l = 0; l < L; ++l) {
    float d;
    if constexpr (kAvx2) {
      d = s[l];
    } else {
      d = 0.f;
      for (int64_t i = 0; i < hd; ++i) d += q[i] * k[l * ks + i];
    }
    float x = d * scale;
    if (add) x += add[l * ms];
    if (allowed && !allowed[l * ms]) x = -std::numeric_limits<float>::infinity();
    s[l] = x;
    max = std::max(max, x);
  }
  float sum = 0.f;
#ifdef GENGRAPH_LAYER_OPS_AVX2
  if constexpr (kAvx2) {
    sum = exp_shifted_avx2(s, L, max);
    weighted_sum_avx2(s, v, vs, L, hd, out);
  } else
#endif
  {
    for (int64_t l = 0; l < L; ++l) {
      s[l] = std::exp(s[l] - max);
      sum += s[l];
    }
    std::fill(out, out + hd, 0.f);
    for (int64_t l = 0; l < L; ++l) {
      if (s[l] == 0.f) continue;  // masked, or too small to count
      for (int64_t i = 0; i < hd; ++i) out[i] += s[l] * v[l * vs + i];
    }
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < hd; ++i) out[i] *= inv;
}

at::Tensor decode_attention_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const std::optional<at::Tensor>& mask_opt, double scale) {
  const at::Tensor mask = mask_opt.has_value() ? *mask_opt : at::Tensor();
  TORCH_CHECK(decode_attention_applies(q, k, v, mask),
              "gengraph::decode_attention: expected float32 CPU q [rows, heads, 1, hd], k and v "
              "[rows, kv_heads, L, hd] with a contiguous last dimension and a mask [rows | 1, 1, "
              "1, L], got q ",
              q.sizes(), ", k ", k.sizes(), ", v ", v.sizes());
  const int64_t rows = q.size(0), heads = q.size(1), hd = q.size(3);
  const int64_t kv_heads = k.size(1), L = k.size(2), group = heads / kv_heads;
  at::Tensor out = at::empty({rows, 1, heads * hd}, q.options());
  const float* qp = q.data_ptr<float>();
  const float* kp = k.data_ptr<float>();
  const float* vp = v.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const bool is_bool = mask.defined() && mask.scalar_type() == at::kBool;
  const float* add = mask.defined() && !is_bool ? mask.data_ptr<float>() : nullptr;
  const bool* allowed = is_bool ? mask.data_ptr<bool>() : nullptr;
  const int64_t mrow = mask.defined() && mask.size(0) > 1 ? mask.stride(0) : 0;
  const int64_t ml = mask.defined() ? mask.stride(3) : 0;
  const bool avx2 = kHaveAvx2Unit && vectorized();
  const float sc = static_cast<float>(scale);
  at::parallel_for(0, rows * heads,
                   std::max<int64_t>(1, kGrainValues / std::max<int64_t>(1, L * hd)),
                   [&](int64_t b, int64_t e) {
                     std::vector<float> s(static_cast<size_t>(L));
                     for (int64_t t = b; t < e; ++t) {
                       const int64_t r = t / heads, h = t % heads, kh = h / group;
                       const float* qr = qp + r * q.stride(0) + h * q.stride(1);
                       const float* kr = kp + r * k.stride(0) + kh * k.stride(1);
                       const float* vr = vp + r * v.stride(0) + kh * v.stride(1);
                       const float* a = add ? add + r * mrow : nullptr;
                       const bool* al = allowed ? allowed + r * mrow : nullptr;
                       float* o = op + (r * heads + h) * hd;
#ifdef GENGRAPH_LAYER_OPS_AVX2
                       if (avx2) {
                         attend_one<true>(qr, kr, k.stride(2), vr, v.stride(2), L, hd, a, al, ml,
                                          sc, s.data(), o);
                         continue;
                       }
#endif
                       attend_one<false>(qr, kr, k.stride(2), vr, v.stride(2), L, hd, a, al, ml, sc,
                                         s.data(), o);
                     }
                   });
  return out;
}

}  // namespace

namespace {
// The plain form of argmax_avx2: the first maximum, or the first NaN.
int64_t argmax_plain(const float* x, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) return i;
    if (x[i] > x[best]) best = i;
  }
  return best;
}
}  // namespace

at::Tensor argmax_rows(const at::Tensor& x) {
  if (!x.defined() || !x.is_cpu() || x.scalar_type() != at::kFloat || x.dim() != 2 ||
      !x.is_contiguous() || x.size(1) == 0) {
    return x.argmax(-1);
  }
  const int64_t rows = x.size(0), n = x.size(1);
  at::Tensor out = at::empty({rows}, x.options().dtype(at::kLong));
  const float* xp = x.data_ptr<float>();
  int64_t* op = out.data_ptr<int64_t>();
  const bool avx2 = kHaveAvx2Unit && vectorized();
  at::parallel_for(0, rows, std::max<int64_t>(1, kGrainValues / n), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
#ifdef GENGRAPH_LAYER_OPS_AVX2
      if (avx2) {
        op[r] = argmax_avx2(xp + r * n, n);
        continue;
      }
#endif
      op[r] = argmax_plain(xp + r * n, n);
    }
  });
  return out;
}

bool decode_attention_applies(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const at::Tensor& mask) {
  const auto f32_cpu = [](const at::Tensor& t) {
    return t.defined() && t.is_cpu() && t.scalar_type() == at::kFloat && t.dim() == 4 &&
           t.stride(3) == 1;
  };
  if (!f32_cpu(q) || !f32_cpu(k) || !f32_cpu(v) || q.size(2) != 1) return false;
  const int64_t rows = q.size(0), heads = q.size(1), hd = q.size(3);
  if (k.sizes() != v.sizes() || k.size(0) != rows || k.size(3) != hd || k.size(1) <= 0 ||
      heads % k.size(1) != 0 || k.size(2) <= 0) {
    return false;
  }
  if (!mask.defined()) return true;
  return mask.is_cpu() && mask.dim() == 4 &&
         (mask.scalar_type() == at::kBool || mask.scalar_type() == at::kFloat) &&
         (mask.size(0) == rows || mask.size(0) == 1) && mask.size(1) == 1 && mask.size(2) == 1 &&
         mask.size(3) == k.size(2);
}

bool rotary_qkv_applies(const at::Tensor& y, const at::Tensor& cos, int64_t heads,
                        int64_t kv_heads) {
  if (!y.defined() || !cos.defined() || !y.is_cpu() || !cos.is_cpu() ||
      y.scalar_type() != at::kFloat || cos.scalar_type() != at::kFloat || y.dim() != 3 ||
      !(cos.dim() == 3 || (cos.dim() == 4 && cos.size(2) == 1)) || heads <= 0 || kv_heads <= 0) {
    return false;
  }
  const int64_t hd = cos.size(-1);
  return hd > 0 && hd % 2 == 0 && y.stride(2) == 1 && cos.size(0) == y.size(0) &&
         cos.size(1) == y.size(1) && y.size(2) == (heads + 2 * kv_heads) * hd;
}

bool silu_mul_applies(const at::Tensor& gate_up) {
  return gate_up.defined() && gate_up.is_cpu() && gate_up.scalar_type() == at::kFloat &&
         gate_up.dim() >= 1 && gate_up.size(-1) % 2 == 0 && gate_up.stride(-1) == 1;
}

bool silu_mul_vectorized() { return kHaveAvx2Unit && vectorized(); }

std::tuple<at::Tensor, at::Tensor, at::Tensor> rotary_qkv(const at::Tensor& y,
                                                          const at::Tensor& cos,
                                                          const at::Tensor& sin_signed,
                                                          int64_t heads, int64_t kv_heads,
                                                          RotaryLayout layout) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("gengraph::rotary_qkv", "")
          .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
              const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t, int64_t, bool)>();
  return op.call(y, cos, sin_signed, heads, kv_heads, layout == RotaryLayout::kNeighbours);
}

at::Tensor rotary_qkv_into(const at::Tensor& y, const at::Tensor& cos, const at::Tensor& sin_signed,
                           int64_t heads, int64_t kv_heads, RotaryLayout layout,
                           const at::Tensor& keys, const at::Tensor& values,
                           const at::Tensor& slots) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("gengraph::rotary_qkv_into", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t,
                            int64_t, bool, const at::Tensor&, const at::Tensor&,
                            const at::Tensor&)>();
  return op.call(y, cos, sin_signed, heads, kv_heads, layout == RotaryLayout::kNeighbours, keys,
                 values, slots);
}

at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& mask, double scale) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("gengraph::decode_attention", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                            const std::optional<at::Tensor>&, double)>();
  return op.call(q, k, v, mask.defined() ? std::optional<at::Tensor>(mask) : std::nullopt, scale);
}

at::Tensor silu_mul(const at::Tensor& gate_up) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("gengraph::silu_mul", "")
                             .typed<at::Tensor(const at::Tensor&)>();
  return op.call(gate_up);
}

}  // namespace gengraph::kernels

TORCH_LIBRARY_FRAGMENT(gengraph, m) {
  m.def(
      "rotary_qkv(Tensor y, Tensor cos, Tensor sin_signed, int heads, int kv_heads, "
      "bool neighbours) -> (Tensor, Tensor, Tensor)");
  m.def(
      "rotary_qkv_into(Tensor y, Tensor cos, Tensor sin_signed, int heads, int kv_heads, "
      "bool neighbours, Tensor(a!) keys, Tensor(b!) values, Tensor slots) -> Tensor");
  m.def("silu_mul(Tensor gate_up) -> Tensor");
  m.def("decode_attention(Tensor q, Tensor k, Tensor v, Tensor? mask, float scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(gengraph, CPU, m) {
  m.impl("rotary_qkv", &gengraph::kernels::rotary_qkv_cpu);
  m.impl("rotary_qkv_into", &gengraph::kernels::rotary_qkv_into_cpu);
  m.impl("silu_mul", &gengraph::kernels::silu_mul_cpu);
  m.impl("decode_attention", &gengraph::kernels::decode_attention_cpu);
}

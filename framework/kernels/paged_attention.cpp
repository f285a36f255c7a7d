#include "framework/kernels/paged_attention.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "framework/quant/kernels.h"

namespace gengraph::kernels {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GENGRAPH_PAGED_ATTENTION_AVX2 1
// decode_attention's AVX2 pieces (layer_ops_avx2.cpp, compiled for AVX2 on x86-64 only).
void dots_avx2(const float* q, const float* k, int64_t ks, int64_t L, int64_t n, float* s,
               const float* v, int64_t vs);
float exp_shifted_avx2(float* s, int64_t n, float max);
void weighted_sum_paged_avx2(const float* p, const float* v, int64_t vs, const int64_t* blocks,
                             int64_t bs, int64_t first, int64_t L, int64_t n, float* out);
constexpr bool kPagedAvx2Unit = true;
#else
constexpr bool kPagedAvx2Unit = false;
#endif

namespace {

// Every (query, head) is one task of about L * hd values; a decode step's few run on the calling
// thread (layer_ops.cpp's grain).
constexpr int64_t kGrainValues = 1 << 15;
constexpr const char* kOp = "gengraph::paged_attention: ";

void check_args(const at::Tensor& q, const at::Tensor& k_pool, const at::Tensor& v_pool,
                const at::Tensor& block_tables, const at::Tensor& seq, const at::Tensor& first,
                const at::Tensor& last, int64_t block_size) {
  TORCH_CHECK(q.dim() == 3 && q.size(2) > 0 && q.stride(2) == 1, kOp,
              "expected q [N, heads, hd] with a contiguous last dimension, got ", q.sizes(),
              " strides ", q.strides());
  const int64_t n = q.size(0), heads = q.size(1), hd = q.size(2);
  TORCH_CHECK(k_pool.dim() == 3 && k_pool.size(1) > 0 && k_pool.size(2) == hd &&
                  heads % k_pool.size(1) == 0 && k_pool.is_contiguous(),
              kOp, "expected k_pool [slots, kv_heads, ", hd, "] contiguous with heads (", heads,
              ") a multiple of kv_heads, got ", k_pool.sizes(),
              k_pool.is_contiguous() ? "" : " (not contiguous)");
  TORCH_CHECK(v_pool.sizes() == k_pool.sizes() && v_pool.is_contiguous(), kOp,
              "expected v_pool contiguous and the size of k_pool ", k_pool.sizes(), ", got ",
              v_pool.sizes(), v_pool.is_contiguous() ? "" : " (not contiguous)");
  TORCH_CHECK(k_pool.scalar_type() == q.scalar_type() && v_pool.scalar_type() == q.scalar_type(),
              kOp, "expected k_pool and v_pool of q's dtype ", q.scalar_type(), ", got ",
              k_pool.scalar_type(), " and ", v_pool.scalar_type());
  TORCH_CHECK(k_pool.device() == q.device() && v_pool.device() == q.device(), kOp,
              "expected k_pool and v_pool on q's device ", q.device(), ", got ", k_pool.device(),
              " and ", v_pool.device());
  TORCH_CHECK(block_size > 0 && k_pool.size(0) % block_size == 0, kOp,
              "expected a block_size > 0 that divides the pool's ", k_pool.size(0), " slots, got ",
              block_size);
  TORCH_CHECK(block_tables.dim() == 2 && block_tables.scalar_type() == at::kLong, kOp,
              "expected block_tables [S, max_blocks] int64, got ", block_tables.sizes(), " ",
              block_tables.scalar_type());
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"seq", &seq},
                                {"first", &first},
                                {"last", &last}}) {
    TORCH_CHECK(t->dim() == 1 && t->size(0) == n && t->scalar_type() == at::kLong, kOp, "expected ",
                name, " [", n, "] int64 (one per query), got ", t->sizes(), " ", t->scalar_type());
  }
}

// The composite form, for every dtype and device: each query's keys and values at positions
// 0 .. Lmax - 1 gathered through its table into [N, kv_heads, Lmax, hd], the scores in float32
// with the positions outside first .. last masked, softmax, the weighted sum; q's dtype back.
// On the CPU Lmax is max(last) + 1, read on the host. On any other device it is every position of
// the table's width (max_blocks * block_size), so that every shape is known on the host and no
// value is read back: the op can be captured in a CUDA graph (the cuda_graph backend's ragged
// step), at the cost of gathering the whole width whatever the sequences' lengths.
at::Tensor paged_attention_composite(const at::Tensor& q, const at::Tensor& k_pool,
                                     const at::Tensor& v_pool, const at::Tensor& block_tables,
                                     const at::Tensor& seq, const at::Tensor& first,
                                     const at::Tensor& last, int64_t block_size, double scale) {
  check_args(q, k_pool, v_pool, block_tables, seq, first, last, block_size);
  const int64_t n = q.size(0), heads = q.size(1), hd = q.size(2);
  const int64_t kv = k_pool.size(1), group = heads / kv;
  if (n == 0) return at::empty({0, heads * hd}, q.options());
  const int64_t lmax =
      q.device().is_cpu() ? last.max().item<int64_t>() + 1 : block_tables.size(1) * block_size;
  const at::Tensor pos = at::arange(lmax, q.options().dtype(at::kLong));
  const at::Tensor tables = block_tables.to(q.device()).index_select(0, seq.to(q.device()));
  const at::Tensor which = at::div(pos, block_size, "floor").clamp_max(tables.size(1) - 1);
  const at::Tensor lo = first.to(q.device()).unsqueeze(1), hi = last.to(q.device()).unsqueeze(1);
  const at::Tensor allowed = pos.unsqueeze(0).ge(lo).logical_and(pos.unsqueeze(0).le(hi));
  // Slots outside first .. last read slot 0 (their table entries may be anything), then masked.
  const at::Tensor slots =
      at::where(allowed, tables.index_select(1, which) * block_size + pos.remainder(block_size), 0);
  const auto gather = [&](const at::Tensor& pool) {
    return pool.index_select(0, slots.reshape({-1}))
        .view({n, lmax, kv, hd})
        .to(at::kFloat)
        .permute({0, 2, 1, 3});  // [N, kv, Lmax, hd]
  };
  const at::Tensor k = gather(k_pool), v = gather(v_pool);
  const at::Tensor qf = q.to(at::kFloat).reshape({n, kv, group, hd});
  const at::Tensor scores = at::matmul(qf, k.transpose(-1, -2)) * scale;  // [N, kv, group, Lmax]
  const at::Tensor p = scores
                           .masked_fill(allowed.logical_not().view({n, 1, 1, lmax}),
                                        -std::numeric_limits<float>::infinity())
                           .softmax(-1);
  return at::matmul(p, v).reshape({n, heads * hd}).to(q.scalar_type());
}

// One query and head: decode_attention's attend_one over the positions 0 .. L - 1 of a sequence
// with those before `first` masked, the keys and values read through the block table `blocks`.
// k and v point at the head's first channel of slot 0; ks is a slot's stride (kv_heads * hd).
template <bool kAvx2>
void attend_paged(const float* q, const float* k, const float* v, int64_t ks, const int64_t* blocks,
                  int64_t bs, int64_t first, int64_t L, int64_t hd, float scale, float* s,
                  float* out) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  // The scores of the positions first .. L - 1, block by block; each key's dot product is the one
  // it would have alone, so the split into blocks changes nothing.
  for (int64_t b = first / bs; b * bs < L; ++b) {
    const int64_t lo = std::max(first, b * bs), hi = std::min(L, (b + 1) * bs);
    const int64_t off = (blocks[b] * bs + lo - b * bs) * ks;
#ifdef GENGRAPH_PAGED_ATTENTION_AVX2
    if constexpr (kAvx2) {
      dots_avx2(q, k + off, ks, hi - lo, hd, s + lo, v + off, ks);
      continue;
    }
#endif
    for (int64_t l = lo; l < hi; ++l) {
      const float* key = k + off + (l - lo) * ks;
      float d = 0.f;
      for (int64_t i = 0; i < hd; ++i) d += q[i] * key[i];
      s[l] = d;
    }
  }
  float max = kNegInf;
  for (int64_t l = 0; l < L; ++l) {
    const float x = l < first ? kNegInf : s[l] * scale;
    s[l] = x;
    max = std::max(max, x);
  }
  float sum = 0.f;
#ifdef GENGRAPH_PAGED_ATTENTION_AVX2
  if constexpr (kAvx2) {
    // Over the whole s[0, L): its lanes are the positions mod 8, as decode_attention's are.
    sum = exp_shifted_avx2(s, L, max);
    weighted_sum_paged_avx2(s, v, ks, blocks, bs, first, L, hd, out);
  } else
#endif
  {
    for (int64_t l = 0; l < L; ++l) {
      s[l] = std::exp(s[l] - max);
      sum += s[l];
    }
    std::fill(out, out + hd, 0.f);
    for (int64_t l = first; l < L; ++l) {
      if (s[l] == 0.f) continue;  // too small to count, as attend_one skips it
      const float* row = v + (blocks[l / bs] * bs + l % bs) * ks;
      for (int64_t i = 0; i < hd; ++i) out[i] += s[l] * row[i];
    }
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < hd; ++i) out[i] *= inv;
}

at::Tensor paged_attention_cpu(const at::Tensor& q, const at::Tensor& k_pool,
                               const at::Tensor& v_pool, const at::Tensor& block_tables_in,
                               const at::Tensor& seq_in, const at::Tensor& first_in,
                               const at::Tensor& last_in, int64_t block_size, double scale) {
  check_args(q, k_pool, v_pool, block_tables_in, seq_in, first_in, last_in, block_size);
  if (q.scalar_type() != at::kFloat) {
    return paged_attention_composite(q, k_pool, v_pool, block_tables_in, seq_in, first_in, last_in,
                                     block_size, scale);
  }
  const int64_t n = q.size(0), heads = q.size(1), hd = q.size(2);
  const int64_t kv = k_pool.size(1), group = heads / kv, blocks = k_pool.size(0) / block_size;
  const at::Tensor tables = block_tables_in.contiguous(), seq = seq_in.contiguous();
  const at::Tensor first = first_in.contiguous(), last = last_in.contiguous();
  const int64_t S = tables.size(0), max_blocks = tables.size(1);
  const int64_t* tp = tables.data_ptr<int64_t>();
  const int64_t* sp = seq.data_ptr<int64_t>();
  const int64_t* fp = first.data_ptr<int64_t>();
  const int64_t* lp = last.data_ptr<int64_t>();
  // Every index the kernel follows, checked before it runs.
  int64_t lmax = 0;
  for (int64_t i = 0; i < n; ++i) {
    TORCH_CHECK(sp[i] >= 0 && sp[i] < S, kOp, "query ", i, ": expected seq in [0, ", S,
                ") (block_tables' rows), got ", sp[i]);
    TORCH_CHECK(fp[i] >= 0 && fp[i] <= lp[i] && lp[i] / block_size < max_blocks, kOp, "query ", i,
                ": expected 0 <= first <= last < ", max_blocks * block_size,
                " (max_blocks * block_size), got first ", fp[i], ", last ", lp[i]);
    for (int64_t b = fp[i] / block_size; b <= lp[i] / block_size; ++b) {
      const int64_t id = tp[sp[i] * max_blocks + b];
      TORCH_CHECK(id >= 0 && id < blocks, kOp, "query ", i, ": expected block_tables[", sp[i], "][",
                  b, "] in [0, ", blocks, ") (the pool's blocks), got ", id);
    }
    lmax = std::max(lmax, lp[i] + 1);
  }
  at::Tensor out = at::empty({n, heads * hd}, q.options());
  const float* qp = q.data_ptr<float>();
  const float* kp = k_pool.data_ptr<float>();
  const float* vp = v_pool.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t ks = kv * hd, q0 = q.stride(0), q1 = q.stride(1);
  const bool avx2 = kPagedAvx2Unit && vectorized();
  const float sc = static_cast<float>(scale);
  at::parallel_for(0, n * heads,
                   std::max<int64_t>(1, kGrainValues / std::max<int64_t>(1, lmax * hd)),
                   [&](int64_t b, int64_t e) {
                     std::vector<float> s(static_cast<size_t>(lmax));
                     for (int64_t t = b; t < e; ++t) {
                       const int64_t i = t / heads, h = t % heads, kh = h / group;
                       const float* qr = qp + i * q0 + h * q1;
                       const int64_t* table = tp + sp[i] * max_blocks;
                       float* o = op + (i * heads + h) * hd;
#ifdef GENGRAPH_PAGED_ATTENTION_AVX2
                       if (avx2) {
                         attend_paged<true>(qr, kp + kh * hd, vp + kh * hd, ks, table, block_size,
                                            fp[i], lp[i] + 1, hd, sc, s.data(), o);
                         continue;
                       }
#endif
                       attend_paged<false>(qr, kp + kh * hd, vp + kh * hd, ks, table, block_size,
                                           fp[i], lp[i] + 1, hd, sc, s.data(), o);
                     }
                   });
  return out;
}

}  // namespace

at::Tensor paged_attention(const at::Tensor& q, const at::Tensor& k_pool, const at::Tensor& v_pool,
                           const at::Tensor& block_tables, const at::Tensor& seq,
                           const at::Tensor& first, const at::Tensor& last, int64_t block_size,
                           double scale) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("gengraph::paged_attention", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                            const at::Tensor&, const at::Tensor&, const at::Tensor&,
                            const at::Tensor&, int64_t, double)>();
  return op.call(q, k_pool, v_pool, block_tables, seq, first, last, block_size, scale);
}

}  // namespace gengraph::kernels

TORCH_LIBRARY_FRAGMENT(gengraph, m) {
  m.def(
      "paged_attention(Tensor q, Tensor k_pool, Tensor v_pool, Tensor block_tables, Tensor seq, "
      "Tensor first, Tensor last, int block_size, float scale) -> Tensor");
}

// float32 CPU: the kernel (other dtypes branch to the composite inside it); every other backend
// (CUDA among them): the composite of ATen ops.
TORCH_LIBRARY_IMPL(gengraph, CPU, m) {
  m.impl("paged_attention", &gengraph::kernels::paged_attention_cpu);
}

TORCH_LIBRARY_IMPL(gengraph, CompositeExplicitAutograd, m) {
  m.impl("paged_attention", &gengraph::kernels::paged_attention_composite);
}

// The operators' CPU kernels (framework/quant/kernels.h): their arguments checked, and each call
// sent to the path this CPU and the row count take (kernels_internal.h lists the paths' files).
#include "framework/quant/kernels.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <string>
#include <vector>

#include "framework/quant/kernels_internal.h"

namespace gengraph::kernels::detail {

void check_x(const at::Tensor& x, int64_t K, const char* op) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous() && x.is_cpu(), op,
              ": activations must be a contiguous 2-D float32 CPU tensor, got ", x.sizes(), " ",
              x.scalar_type(), " on ", x.device());
  TORCH_CHECK(x.size(1) == K, op, ": activations have ", x.size(1), " channels, the weight ", K);
}

template <typename W>
at::Tensor stream_or_gemm(const at::Tensor& x, const at::Tensor& w, const W* wp,
                          const at::Tensor& row_scales) {
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0);
  at::Tensor y = at::empty({M, N}, x.options());
  if (M == 0 || N == 0) return y;
  const float* xp = x.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const bool avx2 = cpu_has_avx2();
  at::parallel_for(0, N, grain_rows(N, K), [&](int64_t n0, int64_t n1) {
#ifdef GENGRAPH_X86_AVX2
    if (avx2) return dot_rows_avx2<W>(xp, M, K, wp, n0, n1, yp, N);
#endif
    (void)avx2;
    dot_rows_plain<W>(xp, M, K, wp, n0, n1, yp, N);
  });
  if (row_scales.defined()) y.mul_(row_scales);
  return y;
}

// An int8 weight with a float32 scale per output channel, and activations to match.
void check_int8(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scales,
                const std::string& op) {
  TORCH_CHECK(q.dim() == 2 && q.scalar_type() == at::kChar && q.is_contiguous(), op,
              ": weight must be a contiguous 2-D int8 tensor");
  TORCH_CHECK(scales.dim() == 1 && scales.size(0) == q.size(0) &&
                  scales.scalar_type() == at::kFloat && scales.is_contiguous(),
              op, ": one float32 scale per output channel");
  check_x(x, q.size(1), op.c_str());
}

at::Tensor linear_int8_cpu(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scales) {
  if (scales.dim() == 2) return linear_int8_blocks_cpu(x, q, scales);  // Q8_0's layout
  check_int8(x, q, scales, "gengraph::linear_int8");
  if (widens(x.size(0))) {
    return widened_linear(x, q.size(0), [&](int64_t n0, int64_t n1, float* dst) {
      widen_int8_rows(q, scales, n0, n1, dst);
    });
  }
  return stream_or_gemm<int8_t>(x, q, q.data_ptr<int8_t>(), scales);
}

at::Tensor dequantized_levels(const at::Tensor& x, int64_t block) {
  const int64_t M = x.size(0), K = x.size(1), nb = K / block;
  static thread_local BlockRows rows;  // as in linear_w8a8_blocks
  quantize_blocks(x.data_ptr<float>(), M, K, block, rows);
  const BlockRows& a = rows;
  at::Tensor out = at::empty({M, K}, x.options());
  float* op = out.data_ptr<float>();
  at::parallel_for(0, M, std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(K, 1)),
                   [&](int64_t m0, int64_t m1) {
                     for (int64_t m = m0; m < m1; ++m) {
                       for (int64_t b = 0; b < nb; ++b) {
                         const float s = a.block_scale[m * nb + b];
                         const int8_t* q = a.q.data() + m * K + b * block;
                         float* o = op + m * K + b * block;
                         for (int64_t k = 0; k < block; ++k) o[k] = static_cast<float>(q[k]) * s;
                       }
                     }
                   });
  return out;
}

// W8A8: each activation row quantized to int8 on the fly (symmetric, its absolute maximum / 127,
// round half to even; a row of zeros gets scale 1), the integer product by LibTorch's _int_mm
// (int32 sums, oneDNN's integer GEMM on x86), then scaled by the row's and the channel's scales.
// With block > 0: each block of `block` channels of a row gets its own scale (quantize_blocks) and
// gengraph's integer kernels take the product (AMX from kAmxMinRows rows, AVX-512 VNNI, AVX2, or
// the plain loops), all in w8a8_blocks_plain's order: a row's floats do not depend on the path or
// on the rows beside it.
at::Tensor linear_w8a8_blocks(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scales,
                              int64_t block, const at::Half* wblock) {
  const int64_t M = x.size(0), K = x.size(1), N = q.size(0);
  TORCH_CHECK(block % 32 == 0 && K % block == 0, "gengraph::linear_w8a8: block ", block,
              " must be a multiple of 32 dividing the ", K, " input channels");
  // A block's integer sum stays in int32 (|sum| <= 127 * 128 * block).
  TORCH_CHECK(block <= kWholeRowMaxK, "gengraph::linear_w8a8: block ", block,
              " is over the largest the int32 sums take, ", kWholeRowMaxK);
  // One block a row (a scale per row) keeps the integer tiles, faster than the GEMM.
  if (integer_rows_by_float_gemm(M) && (block < K || wblock != nullptr)) {
    return widened_linear(dequantized_levels(x, block), N, [&](int64_t n0, int64_t n1, float* d) {
      if (wblock) return widen_int8_block_rows(q, scales, block, n0, n1, d);
      widen_int8_rows(q, scales, n0, n1, d);
    });
  }
  at::Tensor y = at::empty({M, N}, x.options());
  if (M == 0 || N == 0) return y;
  // A thread's quantized rows are kept for its next call (no allocation per decode step). The
  // workers below read the caller's through `a` (a lambda names a thread_local directly: each
  // thread would see its own).
  static thread_local BlockRows rows;
  quantize_blocks(x.data_ptr<float>(), M, K, block, rows);
  const BlockRows& a = rows;
  const int8_t* wp = q.data_ptr<int8_t>();
  // Weight scales per output channel, or (wblock) per block: then no per-channel scale.
  const float* sp = wblock ? nullptr : scales.data_ptr<float>();
  const at::Half* wb = wblock;
  float* yp = y.data_ptr<float>();
  const bool vnni = cpu_has_avx512_vnni(), avx2 = cpu_has_avx2();
  const bool whole = block == K && !wblock;
#ifdef GENGRAPH_X86_AVX2
  // AMX takes per-channel weight scales only: weights in blocks go to the VNNI tile below.
  if (M >= kAmxMinRows && cpu_has_amx() && !wblock) {  // block <= kWholeRowMaxK: checked above
    // AMX tiles for the weight rows in whole 16s, the VNNI tile for the rest. With blocks both
    // give the plain loops' floats, so a row's outputs are the same as at one row.
    const int64_t tiles = (M + 15) / 16, nb = K / block;
    // Blocks of 32 at up to 8 rows: two blocks per tile product (pack_amx_pairs).
    const bool pairs = !whole && block == 32 && K % 64 == 0 && M <= 8;
    static thread_local std::vector<int32_t> packed;
    static thread_local std::vector<float> packed_scales;
    if (packed.size() < static_cast<size_t>(tiles * K / 4 * 16))
      packed.resize(static_cast<size_t>(tiles * K / 4 * 16));
    if (!whole && packed_scales.size() < static_cast<size_t>(tiles * nb * 16))
      packed_scales.resize(static_cast<size_t>(tiles * nb * 16));
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t mt = std::min<int64_t>(16, M - 16 * t);
      if (pairs) {
        pack_amx_pairs(a, mt, packed.data());
      } else {
        pack_amx(a, 16 * t, mt, packed.data() + t * (K / 4) * 16);
      }
      if (!whole) pack_amx_scales(a, 16 * t, mt, packed_scales.data() + t * nb * 16);
    }
    const int32_t* bp = packed.data();
    const float* bsp = packed_scales.data();
    const int64_t groups = N / 16;
    at::parallel_for(0, groups, whole ? 4 : 1, [&](int64_t g0, int64_t g1) {
      if (whole) return w8a8_amx_rows(a, bp, wp, sp, 16 * g0, 16 * g1, yp, N);
      w8a8_amx_blocks(a, bp, bsp, wp, sp, 16 * g0, 16 * g1, yp, N, pairs);
    });
    if (groups * 16 < N) {
      if (whole) w8a8_blocks_rows<true, true>(a, wp, sp, nullptr, groups * 16, N, yp, N);
      if (!whole) w8a8_blocks_rows<true, false>(a, wp, sp, nullptr, groups * 16, N, yp, N);
    }
    return y;
  }
#endif
  at::parallel_for(0, N, grain_rows(N, K), [&](int64_t n0, int64_t n1) {
#ifdef GENGRAPH_X86_AVX2
    if (vnni && whole) return w8a8_blocks_rows<true, true>(a, wp, sp, nullptr, n0, n1, yp, N);
    if (vnni) return w8a8_blocks_rows<true, false>(a, wp, sp, wb, n0, n1, yp, N);
    if (avx2 && whole) return w8a8_blocks_rows<false, true>(a, wp, sp, nullptr, n0, n1, yp, N);
    if (avx2) return w8a8_blocks_rows<false, false>(a, wp, sp, wb, n0, n1, yp, N);
#endif
    (void)vnni;
    (void)avx2;
    w8a8_blocks_plain(a, wp, sp, wb, n0, n1, yp, N);
  });
  return y;
}

at::Tensor linear_w8a8_cpu(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scales,
                           int64_t block) {
  if (scales.dim() == 2) return linear_w8a8_weight_blocks_cpu(x, q, scales, block);
  check_int8(x, q, scales, "gengraph::linear_w8a8");
  TORCH_CHECK(block >= 0,
              "gengraph::linear_w8a8: block must be 0 (a scale per row) or a "
              "multiple of 32, got ",
              block);
  if (block > 0) return linear_w8a8_blocks(x, q, scales, block);
  const int64_t K = x.size(1);
  // gengraph's kernels with one block a row, the same arithmetic as below to the bit (int32
  // sums, float(sum) * row scale * channel scale), at every row count and inside or outside
  // BatchInvariant: a fraction of _int_mm's time for a decode's few rows and for a prefill's many
  // (with AMX from kAmxMinRows rows, docs/results/quant-notes-from-comments.md). On a Zen 3
  // (AVX2) LibTorch's _int_mm took a GPT-2-shaped 32-token prefill 1.8 s and eight of them 12.6 s
  // (docs/results/peers_gpt2_zen3_before_cpu.txt), and 256 rows of GPT-2's c_fc 467 ms, where
  // the AVX2 tiles take 12 ms and the float32 GEMM 14 (bench kernels/w8a8_row_invariant,
  // kernels/float). The sums stay in int32 up to 2^16 channels.
  if (K > 0 && K % 32 == 0 && K <= kWholeRowMaxK && (cpu_has_avx512_vnni() || cpu_has_avx2())) {
    return linear_w8a8_blocks(x, q, scales, K);
  }
  const at::Tensor absmax = x.abs().amax(1, /*keepdim=*/true);
  const at::Tensor row_scale = at::where(absmax > 0, absmax / 127.0f, at::ones_like(absmax));
  const at::Tensor xq = at::round(x / row_scale).to(at::kChar);
  return at::_int_mm(xq, q.t()).to(at::kFloat).mul_(row_scale).mul_(scales);
}

at::Tensor linear_bf16_cpu(const at::Tensor& x, const at::Tensor& w) {
  TORCH_CHECK(w.dim() == 2 && w.scalar_type() == at::kBFloat16 && w.is_contiguous(),
              "gengraph::linear_bf16: weight must be a contiguous 2-D bfloat16 tensor");
  check_x(x, w.size(1), "gengraph::linear_bf16");
  if (widens(x.size(0))) {
    return widened_linear(
        x, w.size(0), [&](int64_t n0, int64_t n1, float* dst) { widen_bf16_rows(w, n0, n1, dst); });
  }
  return stream_or_gemm<uint16_t>(x, w, reinterpret_cast<const uint16_t*>(w.data_ptr()),
                                  at::Tensor());
}

at::Tensor linear_f32_cpu(const at::Tensor& x, const at::Tensor& w) {
  TORCH_CHECK(w.dim() == 2 && w.scalar_type() == at::kFloat && w.is_contiguous(),
              "gengraph::linear_f32: weight must be a contiguous 2-D float32 tensor");
  check_x(x, w.size(1), "gengraph::linear_f32");
  if (x.size(0) >= kStreamRows && !BatchInvariant::active()) return at::linear(x, w);
  return stream_or_gemm<float>(x, w, w.data_ptr<float>(), at::Tensor());
}

// The checks of linear_int4's arguments, for both int4 operators.
void check_int4(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scales,
                const at::Tensor& zeros, int64_t group, const char* op) {
  TORCH_CHECK(packed.dim() == 2 && packed.scalar_type() == at::kByte && packed.is_contiguous(), op,
              ": weight must be a contiguous 2-D uint8 tensor (pack_int4)");
  const int64_t N = packed.size(0), K = packed.size(1) * 2;
  TORCH_CHECK(group > 0 && group % 32 == 0 && K % group == 0, op, ": group ", group,
              " must be a multiple of 32 dividing the ", K, " input channels");
  const int64_t groups = K / group;
  for (const at::Tensor* t : {&scales, &zeros}) {
    TORCH_CHECK(t->dim() == 2 && t->size(0) == N && t->size(1) == groups &&
                    t->scalar_type() == at::kHalf && t->is_contiguous(),
                op, ": scales and zeros must be float16 [", N, ", ", groups, "], got ", t->sizes(),
                " ", t->scalar_type());
  }
  check_x(x, K, op);
}

at::Tensor linear_int4_cpu(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scales,
                           const at::Tensor& zeros, int64_t group) {
  check_int4(x, packed, scales, zeros, group, "gengraph::linear_int4");
  const int64_t N = packed.size(0), K = packed.size(1) * 2, groups = K / group;
  const int64_t M = x.size(0);
  if (widens(M)) {
    return widened_linear(x, N, [&](int64_t n0, int64_t n1, float* dst) {
      widen_int4_rows(packed, scales, zeros, group, n0, n1, dst);
    });
  }
  at::Tensor y = at::empty({M, N}, x.options());
  if (M == 0 || N == 0) return y;
  const bool avx2 = cpu_has_avx2();
  // The sums of each group of activations: the zeros' share of every output is one product.
  // The AVX2 path reads them for one activation row only (several rows widen the weights).
  const float* xp = x.data_ptr<float>();
  // Under BatchInvariant one row takes the many-row path too (no group sums), so that a row's
  // floats do not depend on whether it is alone.
  const bool widen = avx2 && (M >= 2 || BatchInvariant::active());
  std::vector<float> xsum(widen ? 0 : static_cast<size_t>(M * groups));
  for (int64_t m = 0; m < M && !xsum.empty(); ++m) {
    for (int64_t g = 0; g < groups; ++g) {
      float s = 0.f;
      for (int64_t k = g * group; k < (g + 1) * group; ++k) s += xp[m * K + k];
      xsum[m * groups + g] = s;
    }
  }
  const uint8_t* qp = packed.data_ptr<uint8_t>();
  const at::Half* sp = scales.data_ptr<at::Half>();
  const at::Half* zp = zeros.data_ptr<at::Half>();
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, N, grain_rows(N, K / 4), [&](int64_t n0, int64_t n1) {
#ifdef GENGRAPH_X86_AVX2
    if (avx2) {
      return int4_rows_avx2(xp, M, K, qp, sp, zp, widen ? nullptr : xsum.data(), group, n0, n1, yp,
                            N);
    }
#endif
    (void)avx2;
    int4_rows_plain(xp, M, K, qp, sp, zp, xsum.data(), group, n0, n1, yp, N);
  });
  return y;
}

at::Tensor linear_w4a8_cpu(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scales,
                           const at::Tensor& zeros, int64_t group) {
  check_int4(x, packed, scales, zeros, group, "gengraph::linear_w4a8");
  TORCH_CHECK(group <= 256, "gengraph::linear_w4a8: group ", group,
              " is over 256 (the kernels read the scales of 16 blocks at a time, so group / 32 "
              "must divide 16; model.group_size takes at most 256)");
  const int64_t M = x.size(0), K = x.size(1), N = packed.size(0);
  if (integer_rows_by_float_gemm(M)) {
    return widened_linear(dequantized_levels(x, 32), N, [&](int64_t n0, int64_t n1, float* d) {
      widen_int4_rows(packed, scales, zeros, group, n0, n1, d);
    });
  }
  at::Tensor y = at::empty({M, N}, x.options());
  if (M == 0 || N == 0) return y;
  // A thread's quantized rows are kept for its next call, as in linear_w8a8_blocks.
  static thread_local W4A8Rows rows;
  quantize_w4a8(x.data_ptr<float>(), M, K, rows);
  const W4A8Rows& r = rows;
  const uint8_t* qp = packed.data_ptr<uint8_t>();
  const at::Half* sp = scales.data_ptr<at::Half>();
  const at::Half* zp = zeros.data_ptr<at::Half>();
  float* yp = y.data_ptr<float>();
  const bool vnni = cpu_has_avx512_vnni(), avx2 = cpu_has_avx2();
#ifdef GENGRAPH_X86_AVX2
  if (M >= kW4A8AmxMinRows && cpu_has_amx()) {
    // AMX tiles for the weight rows in whole 16s, the VNNI kernel for the rest: the same floats.
    const int64_t tiles = (M + 15) / 16, nb = K / 32;
    static thread_local std::vector<int32_t> packed, packed_sums;
    static thread_local std::vector<float> packed_scales;
    const auto grow = [](auto& v, int64_t size) {
      if (v.size() < static_cast<size_t>(size)) v.resize(static_cast<size_t>(size));
    };
    grow(packed, tiles * K / 4 * 16);
    grow(packed_sums, tiles * nb * 16);
    grow(packed_scales, tiles * nb * 16);
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t mt = std::min<int64_t>(16, M - 16 * t);
      pack_amx(r.a, 16 * t, mt, packed.data() + t * (K / 4) * 16);
      pack_amx_scales(r.a, 16 * t, mt, packed_scales.data() + t * nb * 16);
      int32_t* ps = packed_sums.data() + t * nb * 16;
      std::fill(ps, ps + nb * 16, 0);
      for (int64_t m = 0; m < mt; ++m) {
        for (int64_t b = 0; b < nb; ++b) ps[b * 16 + m] = r.sums[(16 * t + m) * nb + b];
      }
    }
    const int32_t* bp = packed.data();
    const int32_t* bsum = packed_sums.data();
    const float* bsc = packed_scales.data();
    const int64_t whole = N / 16;
    at::parallel_for(0, whole, 1, [&](int64_t g0, int64_t g1) {
      w4a8_amx(r, bp, bsc, bsum, qp, sp, zp, group, 16 * g0, 16 * g1, yp, N);
    });
    if (whole * 16 < N) w4a8_vnni_rows(r, qp, sp, zp, group, whole * 16, N, yp, N);
    return y;
  }
#endif
  at::parallel_for(0, N, grain_rows(N, K / 4), [&](int64_t n0, int64_t n1) {
#ifdef GENGRAPH_X86_AVX2
    if (vnni) return w4a8_vnni_rows(r, qp, sp, zp, group, n0, n1, yp, N);
    if (avx2) return w4a8_avx2_rows(r, qp, sp, zp, group, n0, n1, yp, N);
#endif
    (void)vnni;
    (void)avx2;
    w4a8_plain(r, qp, sp, zp, group, n0, n1, yp, N);
  });
  return y;
}

const c10::TypedOperatorHandle<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)>&
int8_op() {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("gengraph::linear_int8", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)>();
  return op;
}

}  // namespace gengraph::kernels::detail

namespace gengraph::kernels {

float read_sum(const at::Tensor& t) {
  TORCH_CHECK(t.scalar_type() == at::kFloat && t.is_contiguous() && t.is_cpu(),
              "read_sum: a contiguous float32 CPU tensor, got ", t.scalar_type(), " on ",
              t.device());
  const float* p = t.data_ptr<float>();
  const int64_t n = t.numel();
  const int threads = at::get_num_threads();
  std::vector<float> part(static_cast<size_t>(threads), 0.f);
  // One contiguous share a thread, 64 KB at least.
  const int64_t grain = std::max<int64_t>(int64_t{1} << 14, (n + threads - 1) / threads);
  const bool avx2 = detail::cpu_has_avx2();
  at::parallel_for(0, n, grain, [&](int64_t b, int64_t e) {
    float s = 0.f;
#ifdef GENGRAPH_X86_AVX2
    if (avx2) s = detail::read_sum_avx2(p + b, e - b);
#endif
    if (!avx2) {
      for (int64_t i = b; i < e; ++i) s += p[i];
    }
    part[static_cast<size_t>(at::get_thread_num())] += s;
  });
  float total = 0.f;
  for (const float s : part) total += s;
  return total;
}

bool integer_rows_by_float_gemm(int64_t rows) {
  return rows >= kIntegerGemmRows && !BatchInvariant::active() && detail::cpu_has_avx2() &&
         !detail::cpu_has_amx();
}

at::Tensor pack_int4(const at::Tensor& q) {
  TORCH_CHECK(q.dim() == 2 && q.size(1) % 32 == 0, "pack_int4: [N, K] levels with K % 32 == 0");
  const int64_t N = q.size(0), K = q.size(1);
  const at::Tensor v = q.to(at::kByte).view({N, K / 32, 2, 16});
  return at::bitwise_or(v.select(2, 0), at::bitwise_left_shift(v.select(2, 1), 4))
      .reshape({N, K / 2})
      .contiguous();
}

at::Tensor unpack_int4(const at::Tensor& packed) {
  const int64_t N = packed.size(0), K = packed.size(1) * 2;
  const at::Tensor b = packed.view({N, K / 32, 1, 16});
  return at::cat({at::bitwise_and(b, 0x0F), at::bitwise_right_shift(b, 4)}, 2)
      .reshape({N, K})
      .to(at::kInt);
}

at::Tensor linear_int8(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scales) {
  return detail::int8_op().call(x, q, scales);
}

at::Tensor linear_w8a8(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scales,
                       int64_t block) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("gengraph::linear_w8a8", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t)>();
  return op.call(x, q, scales, block);
}

at::Tensor linear_int4(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scales,
                       const at::Tensor& zeros, int64_t group) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("gengraph::linear_int4", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&,
                                               const at::Tensor&, const at::Tensor&, int64_t)>();
  return op.call(x, packed, scales, zeros, group);
}

at::Tensor linear_w4a8(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scales,
                       const at::Tensor& zeros, int64_t group) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("gengraph::linear_w4a8", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&,
                                               const at::Tensor&, const at::Tensor&, int64_t)>();
  return op.call(x, packed, scales, zeros, group);
}

at::Tensor linear_bf16(const at::Tensor& x, const at::Tensor& w) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("gengraph::linear_bf16", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&)>();
  return op.call(x, w);
}

at::Tensor linear_f32(const at::Tensor& x, const at::Tensor& w) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("gengraph::linear_f32", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&)>();
  return op.call(x, w);
}

}  // namespace gengraph::kernels

// kernels/<format>/<shape>/m<rows>: one projection of a decode step, x [rows, in] -> [rows, out],
// through Projection as the models call it, for each weight format: float (oneDNN or MKL, as
// gengraph runs float32), int8, int4 (groups of 32), bfloat16 (gengraph's weight-only kernels,
// framework/quant/kernels.h), int8 with int8 activations (w8a8_row: a scale per row,
// gengraph's integer kernels below 32 rows and LibTorch's _int_mm from 32; w8a8_b32: a scale per
// 32 channels, gengraph's integer kernels; w4a8: int4 weights by int8 activations in blocks of
// 32), every format also at 32, 128 and 256 rows (prefills) and at those rows under
// BatchInvariant as <format>_invariant (gengraph's kernels where outside it the float GEMM takes
// many rows),
// gengraph's streaming kernel on the float32 weight (float_stream), and int8 on the plain loops
// (what a CPU without AVX2 runs).
// The shapes are SmolLM2-135M's and GPT-2-small's projections (fused as gengraph fuses them) and
// their output heads. Counters: bytes = the stored weight's bytes read per call, so
// bytes_per_second is the weight stream rate, to set against the machine's read bandwidth.
// layer_ops/...: the rotary and SwiGLU kernels (framework/kernels/layer_ops.h) beside the operators
// they replace, on SmolLM2's shapes.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>

#include <string>
#include <tuple>
#include <vector>

#include "bench/bench_common.h"
#include "framework/kernels/layer_ops.h"
#include "framework/kernels/paged_attention.h"
#include "framework/model/architectures/layer_functions.h"
#include "framework/quant/kernels.h"
#include "framework/quant/projection.h"

namespace gengraph::bench {
namespace {

struct Shape {
  const char* name;
  int64_t out, in;
};

// SmolLM2-135M: q/k/v fused (576 + 2 x 192), o, gate/up fused (2 x 1536), down, head (49152).
// GPT-2 small: c_attn (3 x 768), c_proj, c_fc (3072), mlp c_proj, head (50257).
const std::vector<Shape>& shapes() {
  static const std::vector<Shape> all = {
      {"smollm2_qkv", 960, 576},   {"smollm2_o", 576, 576},      {"smollm2_gate_up", 3072, 576},
      {"smollm2_down", 576, 1536}, {"smollm2_head", 49152, 576}, {"gpt2_attn", 2304, 768},
      {"gpt2_proj", 768, 768},     {"gpt2_fc", 3072, 768},       {"gpt2_mlp_proj", 768, 3072},
      {"gpt2_head", 50257, 768}};
  return all;
}

int64_t stored_bytes(WeightFormat::Kind kind, const Shape& s) {
  switch (kind) {
    case WeightFormat::Kind::kInt8:
      return s.out * s.in + s.out * 4;
    case WeightFormat::Kind::kInt4:
      return s.out * s.in / 2 + s.out * (s.in / 32) * 8;
    case WeightFormat::Kind::kBFloat16:
      return s.out * s.in * 2;
    default:
      return s.out * s.in * 4;
  }
}

void run(benchmark::State& state, const Shape& s, WeightFormat f, bool plain,
         bool invariant = false) {
  at::manual_seed(0);
  const kernels::BatchInvariant guard(invariant);
  const WeightFormat::Kind kind = f.kind;
  if (kind == WeightFormat::Kind::kInt4) f.group_size = 32;  // int8 keeps its scale per channel
  const Projection p(at::randn({s.out, s.in}) * 0.02, at::Tensor(), f);
  const at::Tensor x = at::randn({state.range(0), s.in});
  kernels::use_plain_loops(plain);
  for (auto _ : state) benchmark::DoNotOptimize(p(x));
  kernels::use_plain_loops(false);
  state.SetBytesProcessed(state.iterations() * stored_bytes(kind, s));
  state.counters["threads"] = at::get_num_threads();
}

// kernels/<format>/<model>_step/m<rows>: every projection of one decode step, each layer's with
// weights of its own (GPT-2 small: 12 layers of attn, proj, fc, mlp_proj, then the head; SmolLM2:
// 30 layers of qkv, o, gate_up, down, then the head), so that each weight is read once a call as a
// real step reads it, from wherever the cache hierarchy holds it then (a single projection's
// benchmark repeats one weight, which may stay in L2). bytes = the step's stored weight bytes.
void run_step(benchmark::State& state, const std::vector<Shape>& layer, int64_t layers,
              const Shape& head, WeightFormat f) {
  at::manual_seed(0);
  const WeightFormat::Kind kind = f.kind;
  if (kind == WeightFormat::Kind::kInt4) f.group_size = 32;  // int8 keeps its scale per channel
  std::vector<Projection> ps;
  std::vector<at::Tensor> xs;
  int64_t bytes = 0;
  const int64_t rows = state.range(0);
  for (int64_t l = 0; l <= layers; ++l) {
    for (const Shape& s : l < layers ? layer : std::vector<Shape>{head}) {
      ps.emplace_back(at::randn({s.out, s.in}) * 0.02, at::Tensor(), f);
      xs.push_back(at::randn({rows, s.in}));
      bytes += stored_bytes(kind, s);
    }
  }
  for (auto _ : state) {
    for (size_t i = 0; i < ps.size(); ++i) benchmark::DoNotOptimize(ps[i](xs[i]));
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["threads"] = at::get_num_threads();
}

// gengraph's streaming kernel on the float32 weight itself (kernels::linear_f32).
void run_f32_stream(benchmark::State& state, const Shape& s) {
  at::manual_seed(0);
  const at::Tensor w = at::randn({s.out, s.in}) * 0.02;
  const at::Tensor x = at::randn({state.range(0), s.in});
  for (auto _ : state) benchmark::DoNotOptimize(kernels::linear_f32(x, w));
  state.SetBytesProcessed(state.iterations() * s.out * s.in * 4);
  state.counters["threads"] = at::get_num_threads();
}

// layer_ops/rotary/<form>/rows:N: one SmolLM2 layer's q/k/v after the projection (9 heads, 3
// key/value heads of 64) rotated, split into heads and k, v stored in a static cache at one slot
// per row (a decode step): gengraph's kernel (kernels::rotary_qkv_into) against the operators it
// replaces (rotate_fused, the splits and two index_copy_).
using kernels::rotary_qkv_into;

void run_rotary(benchmark::State& state, bool kernel) {
  constexpr int64_t heads = 9, kv = 3, hd = 64, length = 128;
  const int64_t rows = state.range(0);
  at::manual_seed(0);
  const at::Tensor y = at::randn({rows, 1, (heads + 2 * kv) * hd});
  const at::Tensor angles = at::rand({rows, 1, 1, hd}) * 50;
  const at::Tensor cos = angles.cos(), sin = angles.sin();
  const at::Tensor keys = at::zeros({rows, kv, length, hd}), values = at::zeros_like(keys);
  const at::Tensor slots = at::tensor({40}, at::kLong);
  for (auto _ : state) {
    if (kernel) {
      benchmark::DoNotOptimize(rotary_qkv_into(
          y, cos, sin, heads, kv, kernels::RotaryLayout::kHalves, keys, values, slots));
    } else {
      const at::Tensor qk =
          rotate_fused(y.narrow(-1, 0, (heads + kv) * hd).view({rows, 1, heads + kv, hd}), cos, sin,
                       RotaryPairs::kHalves);
      const at::Tensor q = qk.narrow(2, 0, heads).transpose(1, 2);
      keys.index_copy_(2, slots, qk.narrow(2, heads, kv).transpose(1, 2));
      values.index_copy_(
          2, slots,
          y.narrow(-1, (heads + kv) * hd, kv * hd).view({rows, 1, kv, hd}).transpose(1, 2));
      benchmark::DoNotOptimize(q);
    }
  }
}

// layer_ops/silu_mul/<form>/rows:N: SmolLM2's SwiGLU gate (inner 1536) on the fused gate/up
// output of a decode step: kernels::silu_mul against at::silu(g) * u.
void run_silu_mul(benchmark::State& state, bool kernel) {
  constexpr int64_t inner = 1536;
  at::manual_seed(0);
  const at::Tensor gu = at::randn({state.range(0), 1, 2 * inner});
  for (auto _ : state) {
    if (kernel) {
      benchmark::DoNotOptimize(kernels::silu_mul(gu));
    } else {
      benchmark::DoNotOptimize(at::silu(gu.narrow(-1, 0, inner)) * gu.narrow(-1, inner, inner));
    }
  }
}

// layer_ops/decode_attention/<form>/rows:N: one GPT-2 layer's attention of a decode step (12
// heads of 64, 96 cached positions, an additive mask) with gengraph's kernel
// (kernels::decode_attention) against LibTorch's scaled_dot_product_attention.
void run_decode_attention(benchmark::State& state, bool kernel) {
  constexpr int64_t heads = 12, hd = 64, length = 96;
  const int64_t rows = state.range(0);
  at::manual_seed(0);
  const at::Tensor q = at::randn({rows, heads, 1, hd});
  const at::Tensor k = at::randn({rows, heads, length, hd}), v = at::randn_like(k);
  const at::Tensor mask = at::zeros({rows, 1, 1, length});
  const double scale = 1.0 / 8.0;
  for (auto _ : state) {
    if (kernel) {
      benchmark::DoNotOptimize(kernels::decode_attention(q, k, v, mask, scale));
    } else {
      benchmark::DoNotOptimize(at::scaled_dot_product_attention(q, k, v, mask, 0.0, false, scale));
    }
  }
}

// layer_ops/paged_attention/<form>/rows:N: the same step with each row's 96 positions in a paged
// pool (blocks of 16 in shuffled order, kernels::paged_attention) against LibTorch's
// scaled_dot_product_attention over the contiguous cache.
void run_paged_attention(benchmark::State& state, bool kernel) {
  constexpr int64_t heads = 12, hd = 64, length = 96, bs = 16, per_row = length / bs;
  const int64_t rows = state.range(0);
  at::manual_seed(0);
  const at::Tensor q = at::randn({rows, heads, hd});
  const at::Tensor k_pool = at::randn({rows * length, heads, hd}), v_pool = at::randn_like(k_pool);
  const at::Tensor tables = at::randperm(rows * per_row, at::kLong).view({rows, per_row});
  const at::Tensor seq = at::arange(rows, at::kLong), first = at::zeros({rows}, at::kLong);
  const at::Tensor last = at::full({rows}, length - 1, at::kLong);
  const at::Tensor k = at::randn({rows, heads, length, hd}), v = at::randn_like(k);
  const double scale = 1.0 / 8.0;
  for (auto _ : state) {
    if (kernel) {
      benchmark::DoNotOptimize(
          kernels::paged_attention(q, k_pool, v_pool, tables, seq, first, last, bs, scale));
    } else {
      benchmark::DoNotOptimize(
          at::scaled_dot_product_attention(q.unsqueeze(2), k, v, {}, 0.0, false, scale));
    }
  }
}

}  // namespace

void register_kernel_benchmarks() {
  const std::vector<std::pair<const char*, void (*)(benchmark::State&, bool)>> layer_ops = {
      {"rotary", run_rotary},
      {"silu_mul", run_silu_mul},
      {"decode_attention", run_decode_attention},
      {"paged_attention", run_paged_attention}};
  for (const auto& [name, fn] : layer_ops) {
    for (const bool kernel : {true, false}) {
      benchmark::RegisterBenchmark(
          ("layer_ops/" + std::string(name) + "/" + (kernel ? "kernel" : "ops")).c_str(),
          [fn = fn, kernel](benchmark::State& st) { fn(st, kernel); })
          ->Arg(1)
          ->Arg(8)
          ->ArgName("rows")
          ->Unit(benchmark::kMicrosecond);
    }
  }
  const auto format = [](WeightFormat::Kind kind, int64_t activation_rows, int64_t block) {
    WeightFormat f;
    f.kind = kind;
    f.int8_activation_rows = activation_rows;
    f.int8_activation_block = block;
    return f;
  };
  // w8a8_row / w8a8_b32: int8 weights with the activations quantized too, a scale per row or per
  // 32 channels (gengraph's VNNI / AVX2 kernels; per row from 32 rows, LibTorch's _int_mm).
  const std::vector<std::pair<const char*, WeightFormat>> formats = {
      {"float", format(WeightFormat::Kind::kAsLoaded, 0, 0)},
      {"int8", format(WeightFormat::Kind::kInt8, 0, 0)},
      {"w8a8_row", format(WeightFormat::Kind::kInt8, 1, 0)},
      {"w8a8_b32", format(WeightFormat::Kind::kInt8, 1, 32)},
      {"int4", format(WeightFormat::Kind::kInt4, 0, 0)},
      {"w4a8", format(WeightFormat::Kind::kInt4, 1, 32)},
      {"bfloat16", format(WeightFormat::Kind::kBFloat16, 0, 0)}};
  const std::vector<int64_t> rows =
      bench_smoke() ? std::vector<int64_t>{1} : std::vector<int64_t>{1, 4, 8};
  for (const Shape& s : shapes()) {
    if (bench_smoke() && std::string(s.name) != "smollm2_o") continue;
    for (const auto& [fname, f] : formats) {
      auto* b =
          benchmark::RegisterBenchmark(("kernels/" + std::string(fname) + "/" + s.name).c_str(),
                                       [s, f = f](benchmark::State& st) { run(st, s, f, false); });
      for (const int64_t m : rows) b->Arg(m);
      // A prefill's 32, 128 and 256 rows (up to 8 prompts of 32) in every format: the widened
      // weights' GEMM, the quantization of activations, and the kernels over many rows.
      if (!bench_smoke()) b->Arg(32)->Arg(128)->Arg(256);
      b->ArgName("m")->Unit(benchmark::kMicrosecond)->UseRealTime();
      // The same rows under BatchInvariant (serving's default): gengraph's kernels at every row
      // count instead of the float GEMM that takes many rows outside it.
      if (!bench_smoke()) {
        benchmark::RegisterBenchmark(
            ("kernels/" + std::string(fname) + "_invariant/" + s.name).c_str(),
            [s, f = f](benchmark::State& st) { run(st, s, f, false, true); })
            ->Arg(32)
            ->Arg(128)
            ->Arg(256)
            ->ArgName("m")
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
      }
    }
    auto* f = benchmark::RegisterBenchmark(("kernels/float_stream/" + std::string(s.name)).c_str(),
                                           [s](benchmark::State& st) { run_f32_stream(st, s); });
    for (const int64_t m : rows) f->Arg(m);
    f->ArgName("m")->Unit(benchmark::kMicrosecond)->UseRealTime();
    auto* b =
        benchmark::RegisterBenchmark(("kernels/int8_plain_loops/" + std::string(s.name)).c_str(),
                                     [s, f = format(WeightFormat::Kind::kInt8, 0, 0)](
                                         benchmark::State& st) { run(st, s, f, true); });
    b->Arg(1)->ArgName("m")->Unit(benchmark::kMicrosecond)->UseRealTime();
  }
  if (bench_smoke()) return;
  const auto& all = shapes();
  const std::vector<Shape> smollm2(all.begin(), all.begin() + 4),
      gpt2(all.begin() + 5, all.begin() + 9);
  for (const auto& [fname, f] : formats) {
    if (f.kind == WeightFormat::Kind::kBFloat16) continue;
    for (const auto& [model, layer, layers, head] :
         {std::tuple{"gpt2_step", gpt2, int64_t{12}, all[9]},
          std::tuple{"smollm2_step", smollm2, int64_t{30}, all[4]}}) {
      benchmark::RegisterBenchmark(
          ("kernels/" + std::string(fname) + "/" + model).c_str(),
          [layer = layer, layers = layers, head = head, f = f](benchmark::State& st) {
            run_step(st, layer, layers, head, f);
          })
          ->Arg(1)
          ->Arg(8)
          ->ArgName("m")
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  }
}

}  // namespace gengraph::bench

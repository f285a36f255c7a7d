// Prefill and decode-step time of every registered backend, beside each other, per model size and
// batch size. Each variant is checked against eager (same greedy tokens) before it is timed.
#include <ATen/ATen.h>
#include <benchmark/benchmark.h>
#include <gengraph/cli.h>

#include "backends/register_builtin.h"
#include "bench/bench_common.h"
#include "framework/backend/backend_registry.h"
#include "framework/decoding/generator.h"
#include "framework/model/loader.h"
#include "framework/util/device.h"
#include "framework/util/op_counter.h"

namespace gengraph::bench {
namespace {

constexpr int64_t kPrompt = 32;
constexpr int64_t kMaxLength = 128;
// Untimed calls before each entry's timed loop: TorchScript's profiling executor specialises and
// fuses a trace over its first runs (hundreds of ms each on CUDA), and the caching allocator and
// cuBLAS warm up; without them a short --benchmark_min_time times one cold call.
constexpr int kWarmup = 3;

struct Variant {
  std::string label, backend;
  std::map<std::string, std::string> options;
  bool fused = true;  // the model's form (ModelConfig::fused)
};

std::vector<Variant> variants() {
  std::vector<Variant> v;
  for (const auto& name : BackendRegistry::instance().names()) {
    const auto& info = BackendRegistry::instance().get(name);
    if (info.unavailable_reason && !info.unavailable_reason(BackendOptions(name, {})).empty())
      continue;
    if (name == "eager") {
      v.push_back({"eager", "eager", {}});
      v.push_back({"eager-static", "eager", {{"cache", "static"}}});
      // transformers' formulation op by op, beside the fused default
      v.push_back({"eager-unfused", "eager", {}, false});
    } else {
      v.push_back({name, name, {}});
    }
  }
  return v;
}

// Empty when `v` generates the same greedy tokens as eager on this model (the fused form); else
// what differs.
std::string check_against_eager(const Variant& v, const std::shared_ptr<const CausalLM>& model,
                                const std::string& preset) {
  auto& registry = BackendRegistry::instance();
  auto reference = registry.create("eager", preset_model(preset), BackendOptions("eager", {}));
  auto backend = registry.create(v.backend, model, BackendOptions(v.backend, v.options));
  ResolvedSettings g;
  g.max_new_tokens = 8;
  const std::vector<std::vector<int64_t>> prompts = {{1, 2, 3, 4, 5}, {6, 7}};
  const auto a = Generator(g).generate(*reference, prompts);
  const auto b = Generator(g).generate(*backend, prompts);
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (a.outputs[i][0].tokens != b.outputs[i][0].tokens) {
      return v.label + " differs from eager on input " + std::to_string(i);
    }
  }
  return "";
}

StepInputs prompt_inputs(int64_t rows, int64_t vocab) {
  const auto dev = bench_device();
  const auto ids = at::randint(vocab, {rows, kPrompt}, at::kLong).to(dev);
  return StepInputs{ids,
                    at::arange(kPrompt, at::kLong).expand({rows, kPrompt}).contiguous().to(dev),
                    at::ones({rows, kPrompt}, at::TensorOptions().dtype(at::kBool).device(dev)),
                    {}};
}

// The variant's backend, after checking it against eager; null (and the entry skipped) if it
// differs.
std::unique_ptr<ForwardBackend> checked_backend(benchmark::State& state, const Variant& v,
                                                const std::shared_ptr<const CausalLM>& model,
                                                const std::string& preset) {
  if (const auto why = check_against_eager(v, model, preset); !why.empty()) {
    state.SkipWithError(why.c_str());
    return nullptr;
  }
  return BackendRegistry::instance().create(v.backend, model, BackendOptions(v.backend, v.options));
}

void BM_Prefill(benchmark::State& state, Variant v, std::string preset) {
  const auto model = preset_model(preset, v.fused);
  auto backend = checked_backend(state, v, model, preset);
  if (!backend) return;
  const int64_t rows = state.range(0);
  const StepInputs in = prompt_inputs(rows, model->config().vocab_size);
  auto prefill = [&] {
    backend->prepare(rows, kMaxLength);
    return backend->prefill(in);
  };
  for (int i = 0; i < kWarmup; ++i) prefill();
  synchronize(bench_device());
  for (auto _ : state) {
    benchmark::DoNotOptimize(prefill());
    synchronize(bench_device());  // GPU work counts in full (no-op on CPU)
  }
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(rows * kPrompt),
                                                  benchmark::Counter::kIsIterationInvariantRate);
}

void BM_DecodeStep(benchmark::State& state, Variant v, std::string preset) {
  const auto model = preset_model(preset, v.fused);
  auto backend = checked_backend(state, v, model, preset);
  if (!backend) return;
  const int64_t rows = state.range(0);
  const StepInputs in = prompt_inputs(rows, model->config().vocab_size);
  auto restart = [&] {
    backend->prepare(rows, kMaxLength);
    return backend->prefill(in).argmax(-1).unsqueeze(1);
  };
  at::Tensor next = restart();
  const auto valid =
      at::ones({rows, 1}, at::TensorOptions().dtype(at::kBool).device(bench_device()));
  auto step = [&] {
    const auto pos = at::full({rows, 1}, backend->length(),
                              at::TensorOptions().dtype(at::kLong).device(bench_device()));
    next = backend->decode(StepInputs{next, pos, valid, {}}).argmax(-1).unsqueeze(1);
  };
  for (int i = 0; i < kWarmup; ++i) step();
  // The ATen operators one decode call dispatches (untimed: observing costs time), on every device:
  // ops/step those the host issues itself, ops_all/step nested ones included, ops/layer the former
  // per decoder layer.
  constexpr int kCounted = 4;
  int64_t top = 0, all = 0, kernels = 0;
  for (int i = 0; i < kCounted; ++i) {
    const auto pos = at::full({rows, 1}, backend->length(),
                              at::TensorOptions().dtype(at::kLong).device(bench_device()));
    at::Tensor logits;
    {
      AtenOpCounter counter;
      logits = backend->decode(StepInputs{next, pos, valid, {}});
      top += counter.top_level();
      all += counter.all();
      kernels += counter.kernels();
    }
    next = logits.argmax(-1).unsqueeze(1);
  }
  state.counters["ops/step"] = static_cast<double>(top) / kCounted;
  state.counters["ops_all/step"] = static_cast<double>(all) / kCounted;
  state.counters["ops/layer"] =
      static_cast<double>(top) / kCounted / static_cast<double>(model->config().num_layers);
  state.counters["kernels/step"] = static_cast<double>(kernels) / kCounted;
  next = restart();
  synchronize(bench_device());
  for (auto _ : state) {
    if (backend->length() >= kMaxLength) {
      state.PauseTiming();
      next = restart();
      state.ResumeTiming();
    }
    step();
    synchronize(bench_device());
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(rows), benchmark::Counter::kIsIterationInvariantRate);
}

// The eager decode step's operators per decoder layer, exactly: a model of the preset's shape with
// 1 layer and one with 3, the difference halved. kernels/layer counts AtenOpCounter::kernels (about
// one CUDA kernel launch each), ops/layer the operators the host issues, views included;
// kernels/rest is what a step costs besides its layers (embedding, mask, rotary tables, head).
void BM_LayerKernels(benchmark::State& state, std::string preset, bool fused) {
  const std::string layers_key =
      preset_config(preset).at("model_type") == "llama" ? "num_hidden_layers" : "n_layer";
  auto count = [&](int64_t layers, int64_t& kernels, int64_t& ops) {
    ModelSource s;
    s.preset = preset;
    s.config_overrides = {{layers_key, layers}};
    s.load.device = bench_device();
    s.load.fused = fused;
    const auto model = std::shared_ptr<const CausalLM>(load_model(s).model);
    auto backend = BackendRegistry::instance().create("eager", model, BackendOptions("eager", {}));
    const int64_t rows = state.range(0);
    backend->prepare(rows, kMaxLength);
    at::Tensor next =
        backend->prefill(prompt_inputs(rows, model->config().vocab_size)).argmax(-1).unsqueeze(1);
    const auto valid =
        at::ones({rows, 1}, at::TensorOptions().dtype(at::kBool).device(bench_device()));
    const auto pos = at::full({rows, 1}, backend->length(),
                              at::TensorOptions().dtype(at::kLong).device(bench_device()));
    AtenOpCounter counter;
    benchmark::DoNotOptimize(backend->decode(StepInputs{next, pos, valid, {}}));
    kernels = counter.kernels();
    ops = counter.top_level();
  };
  int64_t k1 = 0, o1 = 0, k3 = 0, o3 = 0;
  for (auto _ : state) {
    count(1, k1, o1);
    count(3, k3, o3);
  }
  state.counters["kernels/layer"] = static_cast<double>(k3 - k1) / 2;
  state.counters["ops/layer"] = static_cast<double>(o3 - o1) / 2;
  state.counters["kernels/rest"] = static_cast<double>(k1) - static_cast<double>(k3 - k1) / 2;
}

}  // namespace

void register_backend_benchmarks() {
  register_builtin_backends();
  install_aoti_export_tool();  // aoti rows build (or take from the package cache) their package
  for (const std::string preset : {"gpt2-tiny", "gptj-tiny", "llama-tiny"}) {
    for (const bool fused : {true, false}) {
      benchmark::RegisterBenchmark(
          ("layer_kernels/" + preset + (fused ? "/fused" : "/unfused")).c_str(), BM_LayerKernels,
          preset, fused)
          ->ArgName("rows")
          ->Arg(1)
          ->Iterations(1)
          ->Unit(benchmark::kMillisecond);
    }
  }
  for (const auto& preset : bench_presets()) {
    for (const auto& v : variants()) {
      benchmark::RegisterBenchmark(("prefill/" + preset + "/" + v.label).c_str(), BM_Prefill, v,
                                   preset)
          ->ArgName("rows")
          ->Arg(1)
          ->Arg(8)
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(("decode_step/" + preset + "/" + v.label).c_str(), BM_DecodeStep,
                                   v, preset)
          ->ArgName("rows")
          ->Arg(1)
          ->Arg(4)  // a beam-4 step
          ->Arg(8)
          ->Unit(benchmark::kMillisecond);
    }
  }
}

}  // namespace gengraph::bench

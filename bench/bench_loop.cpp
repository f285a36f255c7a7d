// The decoding loop's own cost per step: Generator::generate over a backend whose forward pass
// returns fixed logits, so what is timed is everything but the model: the logits processors, the
// search strategy, the stopping check, the sequences' bookkeeping and, on CUDA, the waits for the
// device. A real run's decode ms/token minus decode_step/... is the same quantity, measured with
// the model's noise on top.
//
// loop/<strategy>/rows:R (its per_step counter), GPT-2's vocabulary (50257), 32 new tokens with
// min_new_tokens 32 (as the seed's config), on GENGRAPH_BENCH_DEVICE; loop/<strategy>_whole the
// same through the whole-step loop. loop_check/non_finite/rows:R: the per-step check for NaN and
// inf logits alone.
#include <ATen/ATen.h>
#include <benchmark/benchmark.h>

#include <cstdio>

#include "bench/bench_common.h"
#include "framework/decoding/generator.h"
#include "framework/model/loader.h"
#include "framework/util/device.h"
#include "framework/util/op_counter.h"
#include "tests/support/fixed_logits_backend.h"

namespace gengraph::bench {
namespace {

constexpr int64_t kPrompt = 32;
constexpr int64_t kNew = 32;
constexpr int64_t kEos = 50256;

// A one-layer, width-64 model with GPT-2's vocabulary and token ids: the loop reads its config
// (vocabulary, context length), never its weights.
std::shared_ptr<const CausalLM> vocab_model() {
  static std::shared_ptr<const CausalLM> m;
  if (!m) {
    ModelSource s;
    s.preset = "gpt2";
    s.config_overrides = {{"n_layer", 1}, {"n_embd", 64}, {"n_head", 4}};
    s.load.device = bench_device();
    m = load_model(s).model;
  }
  return m;
}

struct LoopCase {
  std::string label;
  int64_t beams = 1;
  bool sample = false;
  // The whole step on the device (framework/decoding/generator.h): one CUDA graph per generation
  // on CUDA, uncaptured elsewhere (its ops/step is then what the graph holds, not what the host
  // issues per step), the done flag read every 4 steps.
  bool whole = false;
};

void BM_Loop(benchmark::State& state, LoopCase c) {
  const int64_t rows = state.range(0), batch = rows / c.beams;
  const auto dev = bench_device();
  const auto model = vocab_model();
  at::manual_seed(0);
  at::Tensor logits = at::randn({64, model->config().vocab_size}).to(dev);
  logits.select(1, kEos).fill_(-1e4);
  testing::FixedLogitsBackend backend(model, logits);
  ResolvedSettings g;
  g.do_sample = c.sample;
  g.num_beams = c.beams;
  g.max_new_tokens = kNew;
  g.min_new_tokens = kNew;
  g.eos_token_id = {kEos};
  LoopOptions loop;
  if (c.whole) {
    loop.whole_step = LoopOptions::WholeStep::kOn;
    loop.capture = dev.is_cuda();
    loop.sync_every = 4;
  }
  Generator generator(
      g, [dev] { synchronize(dev); }, loop);
  std::vector<std::vector<int64_t>> prompts(static_cast<size_t>(batch),
                                            std::vector<int64_t>(kPrompt));
  for (size_t i = 0; i < prompts.size(); ++i) {
    for (int64_t t = 0; t < kPrompt; ++t)
      prompts[i][static_cast<size_t>(t)] = static_cast<int64_t>((i * 131 + t * 17) % 50000);
  }
  for (int i = 0; i < 2; ++i) generator.generate(backend, prompts);  // warm-up
  // One untimed generation observed (observing costs time): the ATen operators the host issues per
  // decoding step (the fixed-logits backend's one copy included; prefill and the final outputs
  // spread over the steps), and the reads back to the host per step, each a device-to-host wait
  // on CUDA (framework/util/op_counter.h says which operators count).
  {
    AtenOpCounter counter;
    generator.generate(backend, prompts);
    state.counters["ops/step"] = static_cast<double>(counter.top_level()) / kNew;
    state.counters["host_reads/step"] = static_cast<double>(counter.host_reads()) / kNew;
    state.counters["kernels/step"] = static_cast<double>(counter.kernels()) / kNew;
    if (bench_op_names()) {
      std::fprintf(stderr, "loop/%s rows %lld, top-level operators per step:\n", c.label.c_str(),
                   static_cast<long long>(rows));
      for (const auto& [name, n] : counter.top_level_by_name()) {
        std::fprintf(stderr, "  %6.2f %s\n", static_cast<double>(n) / kNew, name.c_str());
      }
    }
  }
  if (c.whole) state.counters["captured"] = loop.capture ? 1 : 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(generator.generate(backend, prompts).steps);
  }
  // Seconds per decoding step (each iteration is kNew steps, each a token for every row).
  state.counters["per_step"] =
      benchmark::Counter(static_cast<double>(kNew), benchmark::Counter::kIsIterationInvariantRate |
                                                        benchmark::Counter::kInvert);
}

// The loop's check for NaN and inf logits alone (generator_loop.cpp), over GPT-2's vocabulary:
// loop_check/non_finite/rows:R/double:0 the host loop's on the CPU (a float sum, read),
// double:1 the sum in double that the whole step and CUDA leave on the device (read here too).
// What the check adds to each step, to compare with loop/<strategy>'s per_step.
void BM_NonFiniteCheck(benchmark::State& state) {
  at::manual_seed(0);
  const at::Tensor logits = at::randn({state.range(0), 50257}).to(bench_device());
  const bool in_double = state.range(1) != 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        (in_double ? at::sum(logits, at::kDouble) : logits.sum()).item<double>());
  }
}

}  // namespace

void register_loop_benchmarks() {
  benchmark::RegisterBenchmark("loop_check/non_finite", BM_NonFiniteCheck)
      ->ArgNames({"rows", "double"})
      ->ArgsProduct({{1, 8, 16}, {0, 1}})
      ->Unit(benchmark::kMicrosecond);
  const std::vector<std::pair<LoopCase, std::vector<int64_t>>> cases = {
      {{"greedy", 1, false}, {1, 8}},
      {{"sample", 1, true}, {1, 8}},
      {{"beam4", 4, false}, {4, 16}},
      {{"greedy_whole", 1, false, true}, {1, 8}},
      {{"sample_whole", 1, true, true}, {1, 8}},
      {{"beam4_whole", 4, false, true}, {4, 16}}};
  for (const auto& [c, rows] : cases) {
    auto* b =
        benchmark::RegisterBenchmark(("loop/" + c.label).c_str(), BM_Loop, c)->ArgName("rows");
    for (int64_t r : bench_smoke() ? std::vector<int64_t>{rows.front()} : rows) b->Arg(r);
    b->Unit(benchmark::kMillisecond);
  }
}

}  // namespace gengraph::bench

// serving/*: the scheduler's forward step on CPU with the batch-invariant kernels beside the
// fastest ones (batch_invariant: false, LibTorch's GEMMs from 32 rows): what invariance costs.
// The model has SmolLM2-135M's shape (a LLaMA preset with its config.json's figures, random
// weights), so that no download is needed and the figures compare with the real model's.
//   serving/decode_step/<kernels>/rows:R  R requests decoding, one token each per step
//   serving/prefill/<kernels>/tokens:T    one prompt of T tokens prefilled in one step
// Counter tokens/s: the positions a step runs, per second.
#include <benchmark/benchmark.h>

#include "backends/register_builtin.h"
#include "bench/bench_common.h"
#include "framework/backend/backend_registry.h"
#include "framework/model/loader.h"
#include "serving/batch_scheduler.h"

namespace gengraph::bench {
namespace {

// SmolLM2-135M's shape (its config.json), random weights, on the CPU.
std::shared_ptr<const CausalLM> smollm2_shaped() {
  static std::shared_ptr<const CausalLM> model = [] {
    ModelSource s;
    s.preset = "llama-tiny";
    s.config_overrides = {{"hidden_size", 576},
                          {"intermediate_size", 1536},
                          {"num_hidden_layers", 30},
                          {"num_attention_heads", 9},
                          {"num_key_value_heads", 3},
                          {"vocab_size", 49152},
                          {"max_position_embeddings", 8192},
                          {"tie_word_embeddings", true},
                          {"rope_theta", 100000.0}};
    if (bench_smoke()) s.config_overrides["num_hidden_layers"] = 2;
    return load_model(s).model;
  }();
  return model;
}

std::unique_ptr<ForwardBackend> eager_backend() {
  register_builtin_backends();
  return BackendRegistry::instance().create("eager", smollm2_shaped(), BackendOptions("eager", {}));
}

CoreOptions core_options(bool invariant) {
  CoreOptions o;
  o.block_size = 16;
  o.kv_blocks = 4096;  // 65,536 positions
  o.max_step_tokens = 1024;
  o.prefill_chunk = 1024;
  o.max_running = 128;
  o.prefix_sharing = false;
  o.batch_invariant = invariant;
  return o;
}

std::vector<int64_t> prompt(int64_t length, int64_t salt) {
  std::vector<int64_t> p;
  for (int64_t i = 0; i < length; ++i) p.push_back(100 + (i * 7 + salt * 13) % 40000);
  return p;
}

void BM_DecodeStep(benchmark::State& state, bool invariant) {
  const int64_t rows = state.range(0);
  auto backend = eager_backend();
  BatchScheduler core(*backend, core_options(invariant));
  for (int64_t r = 0; r < rows; ++r) {
    core.add(core.make_request(prompt(64, r), {{"max_new_tokens", 4000}}, nullptr, 0, 0, {}));
  }
  core.step();  // the prompts (64 x rows positions, within one step's budget up to 16 rows)
  while (core.stats()["prefill_tokens"].get<int64_t>() < 64 * rows) core.step();
  core.step();  // every request decoding from here on
  int64_t tokens = 0;
  for (auto _ : state) {
    core.step();
    tokens += rows;
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
}

void BM_Prefill(benchmark::State& state, bool invariant) {
  const int64_t tokens = state.range(0);
  auto backend = eager_backend();
  BatchScheduler core(*backend, core_options(invariant));
  int64_t salt = 0, done = 0;
  for (auto _ : state) {
    // One request whose prompt runs in one step and which ends with its first token.
    core.add(core.make_request(prompt(tokens, ++salt), {{"max_new_tokens", 1}}, nullptr, 0, 0, {}));
    done += static_cast<int64_t>(core.step().size());
  }
  if (done != state.iterations()) state.SkipWithError("a prefill did not finish in its step");
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(tokens) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}

}  // namespace

void register_serving_benchmarks() {
  for (const bool invariant : {true, false}) {
    const std::string kernels = invariant ? "invariant" : "fast";
    auto* d = benchmark::RegisterBenchmark(("serving/decode_step/" + kernels).c_str(),
                                           BM_DecodeStep, invariant)
                  ->ArgName("rows")
                  ->Unit(benchmark::kMillisecond);
    for (int64_t rows :
         bench_smoke() ? std::vector<int64_t>{2} : std::vector<int64_t>{1, 8, 32, 64})
      d->Arg(rows);
    auto* p =
        benchmark::RegisterBenchmark(("serving/prefill/" + kernels).c_str(), BM_Prefill, invariant)
            ->ArgName("tokens")
            ->Unit(benchmark::kMillisecond);
    for (int64_t t : bench_smoke() ? std::vector<int64_t>{16} : std::vector<int64_t>{64, 256})
      p->Arg(t);
  }
}

}  // namespace gengraph::bench

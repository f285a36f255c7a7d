// CPU cost of the decoding pipeline on random logits: each logits processor alone, the usual
// sampling chain, and one step of each search strategy, over vocabulary size x rows (batch x
// beams). tools/bench_hf_processors.py times transformers' own classes on the same shapes.
//
// Entries use manual time: only the timed call counts, not refreshing its inputs or restarting a
// strategy that reached its maximum length. GENGRAPH_BENCH_CLOCK=thread_cpu times the calls in the
// calling thread's CPU time instead of wall time: steadier on a shared machine, and meaningful only
// with one intra-op thread (OMP_NUM_THREADS=1), where all the work runs on that thread.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>
#include <time.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "bench/bench_common.h"
#include "framework/decoding/pipeline.h"
#include "framework/decoding/registry.h"

namespace gengraph::bench {
namespace {

using Json = nlohmann::json;

constexpr int64_t kPrompt = 64;     // history: 64 prompt tokens ...
constexpr int64_t kGenerated = 64;  // ... and 64 generated ones
constexpr int64_t kMaxNew = 128;    // strategies restart after this many steps
constexpr int64_t kEos = 50256;     // GPT-2's <|endoftext|>; inside both vocabularies
constexpr int64_t kSeed = 0;

bool thread_cpu_clock() {
  const char* clock = std::getenv("GENGRAPH_BENCH_CLOCK");
  return clock && std::string(clock) == "thread_cpu";
}

// Seconds on the clock the entries report (see above).
double clock_now() {
  static const bool cpu = thread_cpu_clock();
  if (!cpu)
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

std::vector<int64_t> vocab_sizes() {
  if (bench_smoke()) return {50257};
  return {50257, 151936};
}

std::vector<int64_t> row_counts() {
  if (bench_smoke()) return {1, 4};
  return {1, 4, 16, 64};
}

// Row counts of the entries compared with decode_step/gpt2 (which has rows 1 and 8).
std::vector<int64_t> row_counts_with_8() {
  if (bench_smoke()) return row_counts();
  return {1, 4, 8, 16, 64};
}

// Random history of `rows` rows: kPrompt prompt tokens (all valid) then `generated` generated
// ones, in a buffer of `capacity` columns (at least that many), the length on the host as the
// host loop has it.
TokenHistory history(int64_t rows, int64_t vocab, int64_t generated, int64_t capacity = 0) {
  const int64_t len = kPrompt + generated;
  TokenHistory s;
  s.buffer = at::randint(vocab, {rows, std::max(len, capacity)}, at::kLong);
  s.prompt_valid = at::ones({rows, kPrompt}, at::kBool);  // [rows, kPrompt]
  s.prompt_length = kPrompt;
  s.length = Length(len);
  return s;
}

PartContext processor_context(int64_t vocab) {
  PartContext ctx;
  ctx.vocab_size = vocab;
  ctx.eos = {kEos};
  ctx.max_length = kPrompt + kGenerated + 1;  // forced_eos fires on this history
  ctx.prompt_length = kPrompt;
  return ctx;
}

// Parameters for each processor (none: no parameters), chosen so that it does its work on the
// history above, except forced_bos and begin_suppress_tokens, which act at one length only: they
// time their check. 50256 is kEos. Mirrored in tools/bench_hf_processors.py.
const std::map<std::string, Json>& processor_params() {
  static const std::map<std::string, Json> kParams = [] {
    const std::map<std::string, std::string> text = {
        {"sequence_bias",
         R"({"sequence_bias": [[[11], 2.0], [[12, 13], -1.5], [[14, 15, 16], 1.0],)"
         R"( [[17, 18], -2.0]]})"},
        {"logit_bias", R"({"logit_bias": {"11": 2.0, "12": -1.5, "13": 1.0, "14": -100.0}})"},
        {"repetition_penalty", R"({"repetition_penalty": 1.2})"},
        {"frequency_presence_penalty", R"({"frequency_penalty": 0.5, "presence_penalty": 0.5})"},
        {"no_repeat_ngram", R"({"no_repeat_ngram_size": 3})"},
        {"bad_words", R"({"bad_words_ids": [[11], [12, 13], [14, 15, 16], [17, 18]]})"},
        {"min_length", R"({"min_length": 256})"},
        {"min_new_tokens", R"({"min_new_tokens": 128})"},
        {"forced_bos", R"({"forced_bos_token_id": 0})"},
        {"forced_eos", R"({"forced_eos_token_id": [50256]})"},
        {"exponential_decay_length_penalty", R"({"exponential_decay_length_penalty": [10, 1.05]})"},
        {"suppress_tokens", R"({"suppress_tokens": [11, 12, 13, 14, 15, 16, 17, 18, 19, 20]})"},
        {"begin_suppress_tokens", R"({"begin_suppress_tokens": [220, 50256]})"},
        {"temperature", R"({"temperature": 0.7})"},
        {"top_k", R"({"top_k": 50})"},
        {"top_p", R"({"top_p": 0.9})"},
        {"min_p", R"({"min_p": 0.05})"},
        {"typical_p", R"({"typical_p": 0.9})"},
        {"epsilon_cutoff", R"({"epsilon_cutoff": 3e-4})"},
        {"eta_cutoff", R"({"eta_cutoff": 3e-4})"},
    };
    std::map<std::string, Json> out;
    for (const auto& [name, params] : text) out[name] = Json::parse(params);
    return out;
  }();
  return kParams;
}

using BuildChain = std::function<void(ProcessorChain&, const PartContext&)>;

BuildChain single_processor(const std::string& name) {
  const auto it = processor_params().find(name);
  const Json params = it == processor_params().end() ? Json::object() : it->second;
  return [name, params](ProcessorChain& chain, const PartContext& ctx) {
    add_processors_from_list(chain, {PartSpec{name, params}}, ctx);
  };
}

// The chain transformers builds for do_sample with temperature, top_k, top_p and a repetition
// penalty: repetition_penalty, temperature, top_k, top_p.
void sampling_chain(ProcessorChain& chain, const PartContext& ctx) {
  ResolvedSettings c;
  c.do_sample = true;
  c.temperature = 0.7;
  c.top_k = 50;
  c.top_p = 0.9;
  c.repetition_penalty = 1.2;
  c.eos_token_id = ctx.eos;
  add_processors_from_config(chain, c, ctx);
}

void BM_Processor(benchmark::State& state, BuildChain build) {
  const int64_t vocab = state.range(0), rows = state.range(1);
  ProcessorChain chain;
  try {
    build(chain, processor_context(vocab));
  } catch (const std::exception& e) {
    return state.SkipWithError(e.what());
  }
  at::manual_seed(kSeed);
  const at::Tensor logits = at::randn({rows, vocab});  // [rows, vocab] float32
  const TokenHistory seqs = history(rows, vocab, kGenerated);
  at::Tensor scores = logits.clone();  // [rows, vocab]
  // Untimed, once: how many scores the processor changes (a check that it acts), and whether it
  // edits its input, which then has to be refreshed (untimed) before each call.
  const at::Tensor changed = chain.process(seqs, scores).ne(logits).sum();
  state.counters["changed"] = static_cast<double>(changed.item<int64_t>());
  const bool edits_input = !scores.equal(logits);
  for (auto _ : state) {
    if (edits_input) scores.copy_(logits);
    const double t0 = clock_now();
    const at::Tensor out = chain.process(seqs, scores);
    state.SetIterationTime(clock_now() - t0);
    benchmark::DoNotOptimize(out.data_ptr());
  }
}

struct StrategyCase {
  std::string label;
  int64_t beams = 1;
  bool sample = false;
};

const std::vector<StrategyCase>& strategy_cases() {
  static const std::vector<StrategyCase> kCases = {
      {"greedy", 1, false}, {"sample", 1, true}, {"beam4", 4, false}, {"beam_sample4", 4, true}};
  return kCases;
}

// A strategy with its stopping criteria (max length, EOS), begun on a fresh prompt.
struct StrategyRun {
  Pipeline pipeline;
  TokenHistory seqs;
  int64_t max_length = 0;
};

StrategyRun begin_strategy(const StrategyCase& c, int64_t rows, int64_t vocab) {
  ResolvedSettings g;
  g.do_sample = c.sample;
  g.num_beams = c.beams;
  g.eos_token_id = {kEos};
  g.max_new_tokens = kMaxNew;
  StrategyRun run;
  run.max_length = kPrompt + kMaxNew;
  run.pipeline = build_pipeline(g, run.max_length, kPrompt, vocab);
  run.seqs = history(rows, vocab, 0, run.max_length);
  run.pipeline.strategy->begin(run.seqs);
  return run;
}

// One step: the strategy's own work (log-softmax for beams, argmax / multinomial / top-k, appending
// to the sequences, the stopping check) with an empty processor chain, timed apart in processor/.
void BM_StrategyStep(benchmark::State& state, StrategyCase c) {
  const int64_t vocab = state.range(0), rows = state.range(1);
  at::manual_seed(kSeed);
  at::Tensor logits = at::randn({rows, vocab});  // [rows, vocab] float32
  logits.select(1, kEos).fill_(-1e4);            // EOS never wins: rows run to max_length
  const ProcessorChain no_processors;
  StrategyRun run = begin_strategy(c, rows, vocab);
  for (auto _ : state) {
    const double t0 = clock_now();
    const StepDecision d =
        run.pipeline.strategy->step(logits, no_processors, run.seqs, run.pipeline.stopping);
    state.SetIterationTime(clock_now() - t0);
    if (!d.running.item<bool>() || run.seqs.length.known() >= run.max_length) {
      run = begin_strategy(c, rows, vocab);
    }
  }
}

std::vector<int64_t> strategy_rows(const StrategyCase& c) {
  std::vector<int64_t> out;
  for (int64_t r : c.beams == 1 ? row_counts_with_8() : row_counts()) {
    if (r >= c.beams && r % c.beams == 0) out.push_back(r);
  }
  return out;
}

void register_grid(benchmark::internal::Benchmark* b, const std::vector<int64_t>& rows) {
  b->ArgNames({"vocab", "rows"})->ArgsProduct({vocab_sizes(), rows});
  b->UseManualTime()->Unit(benchmark::kMicrosecond);
}

}  // namespace

void register_decoding_benchmarks() {
  benchmark::AddCustomContext("torch_num_threads", std::to_string(at::get_num_threads()));
  benchmark::AddCustomContext("decoding_clock", thread_cpu_clock() ? "thread_cpu" : "wall");
  for (const auto& name : processor_registry().names()) {
    register_grid(benchmark::RegisterBenchmark(("processor/" + name).c_str(), BM_Processor,
                                               single_processor(name)),
                  row_counts());
  }
  register_grid(benchmark::RegisterBenchmark("processor/chain_sampling_default", BM_Processor,
                                             BuildChain(sampling_chain)),
                row_counts_with_8());
  for (const auto& c : strategy_cases()) {
    register_grid(
        benchmark::RegisterBenchmark(("strategy_step/" + c.label).c_str(), BM_StrategyStep, c),
        strategy_rows(c));
  }
}

}  // namespace gengraph::bench

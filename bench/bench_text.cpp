// text/*: the native tokenizer against the Python tokenizer path it replaces, on the set-up's real
// SmolLM2 tokenizer and 10,000 lines of tools/make_tokenizer_corpus.py's varied text (repaired to
// valid UTF-8, which the Python path's JSON needs, and without the lines that encode to no tokens,
// which it refuses; both paths get the same lines).
//   text/encode_native           encode every line, the tokenizer loaded once (as an Engine does)
//   text/load_and_encode_native  the same with the tokenizer.json load in each iteration
//   text/encode_python_subprocess  tools/hf_tokenizer.py in a Python process, as `--tokenizer
//                                python` runs it: interpreter start, transformers import, load,
//                                encode, JSON both ways
//   text/decode_native, text/stream_native  decode the encodings whole, and token by token
// Registered only when the real model is set up (scripts/setup.sh); otherwise a line says why.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "bench/bench_common.h"
#include "experiments/tools/text_io.h"
#include "framework/model/known_models.h"
#include "framework/text/tokenizer.h"
#include "framework/text/utf8.h"

namespace gengraph::bench {
namespace {

namespace fs = std::filesystem;

// Where the set-up puts the real model (known_models.h), set up or not.
fs::path real_model_folder() { return known_model_folder("smollm2-135m"); }

struct TextInputs {
  fs::path folder;
  std::vector<std::string> lines;
  std::vector<std::vector<int64_t>> ids;
};

const TextInputs& inputs() {
  static const TextInputs in = [] {
    TextInputs t;
    t.folder = real_model_folder();
    const size_t wanted = bench_smoke() ? 200 : 10000;
    // 20% more lines than needed: the ones the Python path cannot take are dropped.
    const fs::path corpus = fs::temp_directory_path() /
                            ("gengraph-bench-corpus-" + std::to_string(::getpid()) + ".hex");
    const std::string cmd = std::string(GENGRAPH_SOURCE_DIR) + "/.venv/bin/python " +
                            GENGRAPH_SOURCE_DIR + "/tools/make_tokenizer_corpus.py " +
                            corpus.string() + " --lines " + std::to_string(wanted * 6 / 5) +
                            " >/dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0) throw std::runtime_error("bench text: " + cmd + " failed");
    std::ifstream f(corpus);
    const auto tok = load_tokenizer(t.folder);
    for (std::string hex; std::getline(f, hex) && t.lines.size() < wanted;) {
      std::string bytes;
      for (size_t i = 0; i + 1 < hex.size(); i += 2)
        bytes.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
      std::string line = utf8::repair(bytes);
      auto ids = tok->encode(line);
      if (ids.empty()) continue;
      t.lines.push_back(std::move(line));
      t.ids.push_back(std::move(ids));
    }
    fs::remove(corpus);
    return t;
  }();
  return in;
}

void set_counters(benchmark::State& state) {
  size_t bytes = 0, tokens = 0;
  for (const auto& l : inputs().lines) bytes += l.size();
  for (const auto& i : inputs().ids) tokens += i.size();
  state.counters["lines"] = static_cast<double>(inputs().lines.size());
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(tokens) * state.iterations(),
                                                  benchmark::Counter::kIsRate);
  state.SetBytesProcessed(static_cast<int64_t>(bytes * state.iterations()));
}

void encode_native(benchmark::State& state) {
  const auto tok = load_tokenizer(inputs().folder);
  for (auto _ : state) {
    for (const auto& l : inputs().lines) benchmark::DoNotOptimize(tok->encode(l));
  }
  set_counters(state);
}

void load_and_encode_native(benchmark::State& state) {
  for (auto _ : state) {
    const auto tok = load_tokenizer(inputs().folder);
    for (const auto& l : inputs().lines) benchmark::DoNotOptimize(tok->encode(l));
  }
  set_counters(state);
}

void encode_python(benchmark::State& state) {
  std::ostringstream log;
  for (auto _ : state) {
    const TextCodec codec(inputs().folder.string(), TokenizerChoice::Python, log);
    const auto ids = codec.encode(inputs().lines, true, "bench");
    state.PauseTiming();
    if (ids != inputs().ids)
      state.SkipWithError("the Python path's ids differ from the native ones");
    state.ResumeTiming();
  }
  set_counters(state);
}

void decode_native(benchmark::State& state) {
  const auto tok = load_tokenizer(inputs().folder);
  for (auto _ : state) {
    for (const auto& i : inputs().ids) benchmark::DoNotOptimize(tok->decode(i));
  }
  set_counters(state);
}

void stream_native(benchmark::State& state) {
  const auto tok = load_tokenizer(inputs().folder);
  for (auto _ : state) {
    for (const auto& ids : inputs().ids) {
      TextStream stream(*tok);
      for (const int64_t id : ids) benchmark::DoNotOptimize(stream.push(id));
      benchmark::DoNotOptimize(stream.finish());
    }
  }
  set_counters(state);
}

}  // namespace

void register_text_benchmarks() {
  const fs::path folder = real_model_folder();
  if (!fs::exists(folder / "tokenizer.json")) {
    std::cerr << "text/*: not registered: the real model is not set up in " << folder.string()
              << " (scripts/setup.sh)\n";
    return;
  }
  benchmark::RegisterBenchmark("text/encode_native", encode_native)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark("text/load_and_encode_native", load_and_encode_native)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark("text/encode_python_subprocess", encode_python)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime()
      ->Iterations(bench_smoke() ? 1 : 3);
  benchmark::RegisterBenchmark("text/decode_native", decode_native)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  benchmark::RegisterBenchmark("text/stream_native", stream_native)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}

}  // namespace gengraph::bench

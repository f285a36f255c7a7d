// gengraph's Google Benchmark suite. Entries are registered at run time from the registries, over
// argument grids. Set GENGRAPH_BENCH_SMOKE=1 for a seconds-long run that only checks they work.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <iostream>
#include <map>

#include "bench/bench_common.h"
#include "framework/model/loader.h"
#include "framework/util/device.h"

namespace gengraph::bench {

c10::Device bench_device() {
  const char* d = std::getenv("GENGRAPH_BENCH_DEVICE");
  return parse_device(d ? d : "cpu");
}

std::shared_ptr<const CausalLM> preset_model(const std::string& preset, bool fused) {
  static std::map<std::pair<std::string, bool>, std::shared_ptr<const CausalLM>> cache;
  auto& m = cache[{preset, fused}];
  if (!m) {
    ModelSource s;
    s.preset = preset;
    s.load.device = bench_device();
    s.load.fused = fused;
    m = load_model(s).model;
  }
  return m;
}

namespace {
bool env_is_one(const char* name) {
  const char* value = std::getenv(name);
  return value && std::string(value) == "1";
}
}  // namespace

bool bench_smoke() { return env_is_one("GENGRAPH_BENCH_SMOKE"); }

bool bench_op_names() { return env_is_one("GENGRAPH_BENCH_OP_NAMES"); }

std::vector<std::string> bench_presets() {
  if (bench_smoke()) return {"gpt2-tiny"};
  return {"gpt2-tiny", "gpt2"};
}

}  // namespace gengraph::bench

int main(int argc, char** argv) {
  try {
    gengraph::bench::bench_device();  // a bad or absent GENGRAPH_BENCH_DEVICE fails here, clearly
  } catch (const std::exception& e) {
    std::cerr << "gengraph_bench: GENGRAPH_BENCH_DEVICE: " << e.what() << "\n";
    return 1;
  }
  gengraph::bench::register_backend_benchmarks();
  gengraph::bench::register_decoding_benchmarks();
  gengraph::bench::register_loop_benchmarks();
  gengraph::bench::register_text_benchmarks();
  gengraph::bench::register_kernel_benchmarks();
  gengraph::bench::register_serving_benchmarks();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

// The soak: many generations in one process through the public Engine, mixing models, backends and
// strategies, with the resident memory recorded as it goes. Memory must be flat once every
// combination has run once (caches built, traces made): a leak shows as a slope.
//   gengraph_soak [GENERATIONS=10000] [CSV=soak.csv]
// Writes CSV rows "generation,seconds,rss_bytes" every 100 generations; scripts/soak.sh plots them
// and judges the slope. Prints the combinations and a summary.
#include <gengraph/gengraph.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "bench/soak_common.h"

namespace {

using gengraph::bench::rss_bytes;

struct Combo {
  std::string model, backend;
  std::map<std::string, std::string> options;
  nlohmann::json settings;
  std::string label;
};

}  // namespace

int main(int argc, char** argv) {
  const int64_t total = argc > 1 ? std::stoll(argv[1]) : 10000;
  const std::string csv = argc > 2 ? argv[2] : "soak.csv";
  // Opened before the work: a CSV that cannot be written fails now, not after the generations.
  std::ofstream out(csv);
  if (!out) {
    std::fprintf(stderr, "error: cannot write the soak's CSV '%s': %s\n", csv.c_str(),
                 std::strerror(errno));
    return 1;
  }
  const std::vector<nlohmann::json> strategies = {
      {{"max_new_tokens", 8}},
      {{"max_new_tokens", 8}, {"do_sample", true}, {"top_p", 0.9}, {"temperature", 0.8}},
      {{"max_new_tokens", 6}, {"num_beams", 3}},
      {{"max_new_tokens", 6}, {"num_beams", 2}, {"do_sample", true}},
      {{"max_new_tokens", 6}, {"num_beams", 4}, {"num_beam_groups", 2}, {"diversity_penalty", 0.5}},
      {{"max_new_tokens", 8}, {"repetition_penalty", 1.3}, {"no_repeat_ngram_size", 2}}};
  struct Backend {
    std::string name;
    std::map<std::string, std::string> options;
  };
  const std::vector<Backend> backends = {
      {"eager", {}},
      {"eager", {{"cache", "static"}}},
      {"trace", {}},
      {"cuda_graph", {{"capture", "false"}, {"max_length", "64"}}}};
  std::vector<std::unique_ptr<gengraph::Engine>> engines;
  std::vector<std::string> labels;
  for (const std::string model : {"gpt2-tiny", "llama-tiny", "gptj-tiny"}) {
    for (const auto& b : backends) {
      gengraph::EngineOptions o;
      o.backend = b.name;
      o.backend_options = b.options;
      engines.push_back(std::make_unique<gengraph::Engine>(model, o));
      std::string label = model + "/" + b.name;
      for (const auto& [k, v] : b.options) label += " " + k + "=" + v;
      labels.push_back(label);
    }
  }
  const std::vector<std::vector<std::vector<int64_t>>> prompt_sets = {
      {{1, 2, 3, 4}}, {{5, 6}, {7, 8, 9, 10, 11}}, {{12}, {13, 14}, {15, 16, 17}}};
  const size_t combos = engines.size() * strategies.size() * prompt_sets.size();
  std::cout << engines.size() << " engines x " << strategies.size() << " strategies x "
            << prompt_sets.size() << " prompt sets = " << combos << " combinations, " << total
            << " generations\n";
  for (const auto& l : labels) std::cout << "  " << l << "\n";
  out << "generation,seconds,rss_bytes\n";
  const auto t0 = std::chrono::steady_clock::now();
  int64_t tokens = 0;
  for (int64_t i = 0; i < total; ++i) {
    const size_t e = static_cast<size_t>(i) % engines.size();
    const size_t s =
        static_cast<size_t>(i / static_cast<int64_t>(engines.size())) % strategies.size();
    const size_t p =
        static_cast<size_t>(i / static_cast<int64_t>(engines.size() * strategies.size())) %
        prompt_sets.size();
    engines[e]->manual_seed(static_cast<uint64_t>(i));
    const auto g = engines[e]->generate(prompt_sets[p], strategies[s]);
    for (const auto& in : g.outputs) tokens += static_cast<int64_t>(in.at(0).tokens.size());
    if (i % 100 == 0 || i == total - 1) {
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      out << i << "," << secs << "," << rss_bytes() << "\n" << std::flush;
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.close();
  if (!out) {
    std::fprintf(stderr, "error: writing the soak's CSV '%s' failed\n", csv.c_str());
    return 1;
  }
  std::printf("%lld generations, %lld tokens in %.1f s; final RSS %.1f MB\n",
              static_cast<long long>(total), static_cast<long long>(tokens), secs,
              static_cast<double>(rss_bytes()) / 1e6);
  return 0;
}

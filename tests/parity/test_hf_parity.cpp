// Token-exact parity with transformers' generate() (CPU float32), over the cases recorded by
// tools/make_fixtures.py in tests/fixtures/hf_generate.json, for each cache kind of the eager
// backend on the fused model (the default form), for the unfused form (transformers' formulation
// op by op), for the aoti backend (the model exported by torch.export, compiled by
// AOTInductor), and for the whole-step loop run uncaptured over cuda_graph's static step
// (framework/decoding/generator.h).
#include <ATen/ATen.h>
#include <gengraph/cli.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "backends/register_builtin.h"
#include "framework/backend/backend_registry.h"
#include "framework/decoding/generation_defaults.h"
#include "framework/decoding/generator.h"
#include "framework/model/loader.h"
#include "tests/parity/expect_outputs.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

struct ParityCase {
  nlohmann::json record;
  std::string variant;  // growing | static (eager's cache, fused model) | unfused | aoti |
                        // whole_step; rings | static_rings | whole_step_rings (windowed models)
};

const nlohmann::json& fixtures() {
  static const nlohmann::json doc = [] {
    std::ifstream in(testing::fixtures_dir() + "/hf_generate.json");
    return nlohmann::json::parse(in);
  }();
  return doc;
}

// Whether the fixture model has sliding-window layers (its cases then also run with rings).
bool windowed(const std::string& model) {
  std::ifstream in(testing::fixtures_dir() + "/models/" + model + "/config.json");
  const nlohmann::json c = nlohmann::json::parse(in);
  return c.contains("sliding_window") && c["sliding_window"].is_number_integer() &&
         c["sliding_window"].get<int64_t>() > 0;
}

std::vector<ParityCase> all_cases() {
  std::vector<ParityCase> out;
  for (const auto& rec : fixtures()["cases"]) {
    for (const std::string variant : {"growing", "static", "unfused", "aoti", "whole_step"})
      out.push_back({rec, variant});
    // The window layers in rings of window + 4 slots, so that the window matters within the
    // cases' lengths (prompt lookup proposes up to 4 candidates).
    if (windowed(rec["model"].get<std::string>())) {
      for (const std::string variant : {"rings", "static_rings", "whole_step_rings"})
        out.push_back({rec, variant});
    }
  }
  return out;
}

void PrintTo(const ParityCase& c, std::ostream* os) {
  *os << c.record["name"].get<std::string>() << "/" << c.variant;
}

class HfParity : public ::testing::TestWithParam<ParityCase> {};

TEST_P(HfParity, SameTokensAsTransformersGenerate) {
  const auto& rec = GetParam().record;
  ModelSource src;
  src.path = testing::fixtures_dir() + "/models/" + rec["model"].get<std::string>();
  src.load.fused = GetParam().variant != "unfused";
  const LoadedModel loaded = load_model(src);
  ResolvedSettings gen =
      resolve_generation(loaded, rec["generation"], rec["name"].get<std::string>());
  // Each token's score too, where transformers recorded them (diverse beam search: where 4.55's
  // own were right, see tools/groupbeam_oracle.py).
  const auto& expected = rec["expected"];
  const bool scored = expected.at(0).at(0).contains("token_scores");
  gen.output_scores = scored;
  register_builtin_backends();
  install_aoti_export_tool();  // one package per fixture model, kept in the package cache
  const std::string& variant = GetParam().variant;
  std::unique_ptr<ForwardBackend> backend;
  LoopOptions loop;
  if (variant == "aoti") {
    backend = BackendRegistry::instance().create("aoti", loaded.model, BackendOptions("aoti", {}));
  } else if (variant == "whole_step" || variant == "whole_step_rings") {
    std::map<std::string, std::string> options = {{"capture", "false"}};
    if (variant == "whole_step_rings") options["ring_spare"] = "4";
    backend = BackendRegistry::instance().create("cuda_graph", loaded.model,
                                                 BackendOptions("cuda_graph", options));
    // sync_every 3: some generations run steps past their end. Speculative decoding runs in the
    // host loop (auto falls back to it, saying why).
    loop.whole_step =
        gen.speculative() ? LoopOptions::WholeStep::kAuto : LoopOptions::WholeStep::kOn;
    loop.capture = false;
    loop.sync_every = 3;
  } else {
    std::map<std::string, std::string> options = {
        {"cache", variant == "static" || variant == "static_rings" ? "static" : "growing"}};
    if (variant == "rings" || variant == "static_rings") options["ring_spare"] = "4";
    backend =
        BackendRegistry::instance().create("eager", loaded.model, BackendOptions("eager", options));
  }
  const auto prompts = rec["prompts"].get<std::vector<std::vector<int64_t>>>();
  // Same seed, same draws: the default generator is where transformers' sampling draws from.
  at::manual_seed(rec["seed"].get<uint64_t>());
  const Generation r = Generator(gen, {}, loop).generate(*backend, prompts);
  if (variant.rfind("whole_step", 0) == 0) EXPECT_EQ(r.whole_step, !gen.speculative());
  if (gen.speculative()) EXPECT_GT(r.verify_steps, 0);
  testing::expect_outputs(r, expected, scored);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfParity, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) {
                           std::string n = info.param.record["name"].template get<std::string>() +
                                           "_" + info.param.variant;
                           for (char& ch : n) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return n;
                         });

TEST(HfParityFixtures, PinnedVersionsAndEnoughCases) {
  EXPECT_EQ(fixtures()["transformers_version"], "5.17.0");
  EXPECT_EQ(fixtures()["torch_version"], "2.11.0");
  EXPECT_GE(fixtures()["cases"].size(), 33u);
}

}  // namespace
}  // namespace gengraph

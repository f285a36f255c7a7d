// The aoti backend's ragged form (backends/aoti/aoti_ragged.cpp, tools/export_aoti_ragged.py): the
// scheduler's core (serving/batch_scheduler.h) over the invariant package (gengraph's kernels in
// eager's order: linear_f32, rms_norm, rotary_qkv, silu_mul, paged_attention) gives each request
// the tokens and log-probs, to the bit, of its solo run on eager's paged cache and of its solo run
// through the package, whatever shares its steps; the options and forms are refused by name. One
// package is built per weights and kept in the package cache (an AOTInductor compile of
// llama-tiny), so every test here shares it.
#include <ATen/ATen.h>
#include <gengraph/cli.h>
#include <gengraph/gengraph.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "backends/aoti/aoti_step.h"
#include "backends/register_builtin.h"
#include "framework/backend/backend_registry.h"
#include "framework/model/causal_lm.h"
#include "framework/model/loader.h"
#include "serving/batch_scheduler.h"
#include "tests/support/scheduler_driver.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using Json = nlohmann::json;
using testing::error_of;
using ::testing::HasSubstr;

constexpr uint64_t kWeights = 11;

using Request = testing::ScheduledRequest;

// Prompts of 3 to 40 tokens, some sharing a prefix of 9 (whole blocks and part of one), greedy and
// seeded sampling, arrivals spread over the first steps: decode steps beside prefill chunks.
std::vector<Request> requests(int64_t count) {
  return testing::small_requests(count, 1024, 31, {17, 230, 5, 998, 41, 7, 600, 3, 82});
}

CoreOptions core_options() {
  CoreOptions o;
  o.block_size = 4;
  o.kv_blocks = 400;
  o.prefill_chunk = 7;     // prompts prefill over several steps
  o.max_step_tokens = 40;  // past kernels::kStreamRows: the rows a GEMM would take uninvariant
  o.max_running = 8;
  return o;
}

// Runs `reqs` through a core over `backend`, each added before its arrival step; returns their
// sequences in order.
std::vector<Sequence> run_core(ForwardBackend& backend, const std::vector<Request>& reqs,
                               const CoreOptions& options) {
  BatchScheduler core(backend, options);
  return testing::drive_sequences(core, reqs);
}

std::string skip_reason() {
  if (testing::kAddressSanitizer) {
    return "the ragged export loads gengraph's operators, an AddressSanitizer library, in Python";
  }
  const char* cxx = std::getenv("CXX");
  const std::string compiler = cxx && *cxx ? cxx : "g++";
  if (std::system(("command -v '" + compiler + "' > /dev/null 2>&1").c_str()) != 0) {
    return "no C++ compiler '" + compiler + "' for AOTInductor";
  }
  return "";
}

class AotiRagged : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = skip_reason(); !why.empty()) GTEST_SKIP() << why;
    register_builtin_backends();
    install_aoti_export_tool();
    causal_ = testing::test_model("preset:llama-tiny", kWeights);
  }

  std::unique_ptr<ForwardBackend> make(const std::string& name,
                                       std::map<std::string, std::string> options) {
    return BackendRegistry::instance().create(name, causal_,
                                              BackendOptions(name, std::move(options)));
  }
  // The invariant ragged package, built on first use and kept in the package cache.
  std::unique_ptr<ForwardBackend> ragged() {
    return make("aoti", {{"ragged", "true"}, {"invariant", "true"}, {"max_rows", "16"}});
  }

  std::shared_ptr<const CausalLM> causal_;
};

TEST_F(AotiRagged, TheSchedulerOverTheInvariantPackageGivesEagersSoloLogProbsToTheBit) {
  const auto aoti = ragged();
  ASSERT_TRUE(aoti->runs_ragged());
  const auto eager = make("eager", {});
  const auto reqs = requests(24);
  const CoreOptions o = core_options();
  const std::vector<Sequence> over_aoti = run_core(*aoti, reqs, o);
  const std::vector<Sequence> over_eager = run_core(*eager, reqs, o);
  ModelOptions mo;
  mo.weights_seed = kWeights;
  Model model("preset:llama-tiny", mo);
  RunOptions ro;
  ro.backend_options = {{"cache", "paged"}, {"block_size", "16"}};
  Engine engine(model, ro);
  for (size_t i = 0; i < reqs.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_FALSE(over_aoti[i].tokens.empty());
    EXPECT_EQ(over_aoti[i].tokens, over_eager[i].tokens);
    // Alone through the same core over the same package: the same tokens and log-probs to the bit,
    // whatever shared its steps in the batch.
    const Sequence alone = run_core(*aoti, {reqs[i]}, o).at(0);
    EXPECT_EQ(over_aoti[i].tokens, alone.tokens);
    EXPECT_EQ(over_aoti[i].token_scores, alone.token_scores);
    // The invariant package runs eager's kernels in eager's order (use_eager_kernels in
    // tools/export_aoti_ragged.py): eager's log-probs to the bit, batched and alone through
    // Engine::generate on eager's paged cache.
    EXPECT_EQ(over_aoti[i].token_scores, over_eager[i].token_scores);
    engine.manual_seed(reqs[i].seed);
    const Sequence solo = engine.generate({reqs[i].prompt}, reqs[i].settings).outputs.at(0).at(0);
    EXPECT_EQ(over_aoti[i].tokens, solo.tokens);
    EXPECT_EQ(over_aoti[i].token_scores, solo.token_scores);
  }

  // Not vacuous: without the guard (LibTorch's GEMM from kernels::kStreamRows rows on), the
  // batch shows in some requests' floats.
  CoreOptions fast = o;
  fast.batch_invariant = false;
  const std::vector<Sequence> unguarded = run_core(*aoti, reqs, fast);
  int64_t differ = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    differ += unguarded[i].token_scores != over_aoti[i].token_scores;
  }
  EXPECT_GT(differ, 0);
}

// The check on aoti: 500 random requests (those of the eager invariance test: mixed
// lengths, greedy and seeded sampling, processors, EOS sets, stop sequences, random arrival steps,
// shared prefixes, chunked prefill) through the scheduler over the invariant package, each equal,
// tokens and log-probs to the bit, to its solo run through Engine::generate on eager's paged cache.
TEST_F(AotiRagged, FiveHundredRandomRequestsEqualTheirSoloRuns) {
  const auto aoti = ragged();
  const auto reqs = testing::random_requests(500, 1, 1024);
  CoreOptions o = core_options();
  o.kv_blocks = 1200;
  o.max_running = 12;
  BatchScheduler core(*aoti, o);
  const std::vector<CoreResult> results = testing::drive_core(core, reqs);
  const nlohmann::json stats = core.stats();
  EXPECT_GT(stats["prefix_hits"].get<int64_t>(), 50) << stats.dump();
  EXPECT_GT(stats["copy_on_write"].get<int64_t>(), 10) << stats.dump();
  ModelOptions mo;
  mo.weights_seed = kWeights;
  Model model("preset:llama-tiny", mo);
  RunOptions ro;
  ro.backend_options = {{"cache", "paged"}, {"block_size", "16"}};
  Engine engine(model, ro);
  int64_t differ = 0;
  for (size_t i = 0; i < reqs.size() && differ <= 3; ++i) {
    engine.manual_seed(reqs[i].seed);
    const Sequence solo = engine.generate({reqs[i].prompt}, reqs[i].settings).outputs.at(0).at(0);
    EXPECT_TRUE(results[i].finish == "stop" || results[i].finish == "length") << results[i].error;
    if (results[i].sequence.tokens != solo.tokens ||
        results[i].sequence.token_scores != solo.token_scores) {
      ++differ;
      ADD_FAILURE() << "request " << i << " (settings " << reqs[i].settings.dump()
                    << ") differs from its solo run";
    }
  }
}

// Without --invariant the projections are Inductor's GEMMs, whose sums change with the rows: the
// greedy tokens are eager's, the log-probs close.
TEST_F(AotiRagged, TheRaggedFormWithoutInvariantGivesEagersGreedyTokens) {
  const auto aoti = make("aoti", {{"ragged", "true"}, {"max_rows", "16"}});
  ASSERT_TRUE(aoti->runs_ragged());
  const auto eager = make("eager", {});
  std::vector<Request> reqs;
  for (Request& r : requests(16)) {
    r.settings.erase("do_sample");
    r.settings.erase("top_k");
    reqs.push_back(std::move(r));
  }
  const std::vector<Sequence> over_aoti = run_core(*aoti, reqs, core_options());
  const std::vector<Sequence> over_eager = run_core(*eager, reqs, core_options());
  for (size_t i = 0; i < reqs.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_EQ(over_aoti[i].tokens, over_eager[i].tokens);
    ASSERT_EQ(over_aoti[i].token_scores.size(), over_eager[i].token_scores.size());
    for (size_t t = 0; t < over_aoti[i].token_scores.size(); ++t) {
      EXPECT_NEAR(over_aoti[i].token_scores[t], over_eager[i].token_scores[t], 1e-4);
    }
  }
}

TEST_F(AotiRagged, FormsAndOptionsAreRefusedByName) {
  const auto aoti = ragged();
  // generate() takes the step form; the error names the package.
  const std::string err = error_of([&] { aoti->prepare(1, 8); });
  EXPECT_THAT(err, HasSubstr("holds the ragged form (option ragged: true), which runs continuous "
                             "batching's ragged batches only"));
  const auto start = err.find("package '") + 9;
  const std::string path = err.substr(start, err.find('\'', start) - start);
  ASSERT_TRUE(std::filesystem::is_regular_file(path)) << err;
  // The ragged package given where the step form is needed, by path.
  EXPECT_THAT(error_of([&] {
                make("aoti", {{"package", path}});
              }),
              HasSubstr("holds the invariant ragged form, but this run needs the step form"));
  EXPECT_THAT(error_of([&] {
                make("cuda_graph", {{"capture", "false"}, {"step", "aoti"}, {"package", path}});
              }),
              HasSubstr("this run needs the step form"));
  // By path with ragged: true it serves the scheduler as the cached one does.
  const auto given = make("aoti", {{"package", path}, {"ragged", "true"}, {"invariant", "true"}});
  EXPECT_TRUE(given->runs_ragged());
  const auto reqs = requests(3);
  const auto a = run_core(*given, reqs, core_options());
  const auto b = run_core(*aoti, reqs, core_options());
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(a[i].token_scores, b[i].token_scores);

  // A package of the step form (built as generate() uses it) runs no ragged batch: the scheduler
  // refuses the backend, forward_ragged names the package and what it lacks.
  const auto step_form = make("aoti", {{"max_rows", "16"}});
  EXPECT_FALSE(step_form->runs_ragged());
  EXPECT_THAT(error_of([&] { BatchScheduler core(*step_form, core_options()); }),
              HasSubstr("backend 'aoti' cannot run a ragged batch"));
  PagedCache pool({2, 2, 16, 4, 4}, at::TensorOptions().dtype(at::kFloat));
  RaggedBatch batch;
  batch.input_ids = at::ones({1}, at::kLong);
  batch.positions = at::zeros({1}, at::kLong);
  batch.logit_rows = at::zeros({1}, at::kLong);
  EXPECT_THAT(error_of([&] { step_form->forward_ragged(batch, pool); }),
              HasSubstr("has no ragged form (it holds the step form); continuous batching needs "
                        "one made by tools/export_aoti.py --ragged"));

  // Options: invariant needs ragged, and float32 weights on the CPU.
  EXPECT_THAT(error_of([&] {
                make("aoti", {{"invariant", "true"}});
              }),
              HasSubstr("option 'invariant' applies to the ragged form; set ragged: true"));
  LoadOptions lo;
  lo.weights.kind = WeightFormat::Kind::kInt8;
  const auto int8 = testing::test_model("preset:llama-tiny", kWeights, lo);
  EXPECT_THAT(error_of([&] {
                BackendRegistry::instance().create(
                    "aoti", int8,
                    BackendOptions("aoti", {{"ragged", "true"}, {"invariant", "true"}}));
              }),
              HasSubstr("option 'invariant': the invariant projections (gengraph::linear_f32) "
                        "take float32 weights on CPU"));
}

}  // namespace
}  // namespace gengraph

// Batch invariance: every request the scheduler runs gives, bit for bit (tokens and log-probs),
// what it gives alone through Engine::generate on eager's paged cache after manual_seed(seed),
// whatever shares its steps: random arrival steps, greedy and seeded sampling, processors, EOS sets
// and stop sequences, prefix sharing with copy on write, chunked prefill, preemption by recompute.
// The scheduler's core is driven step by step here, so that arrivals land on chosen steps.
#include <gengraph/gengraph.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "backends/register_builtin.h"
#include "framework/backend/backend_registry.h"
#include "framework/model/causal_lm.h"
#include "framework/model/loader.h"
#include "framework/quant/weight_format.h"
#include "serving/batch_scheduler.h"
#include "tests/support/scheduler_driver.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using Json = nlohmann::json;

using Spec = testing::ScheduledRequest;

class BatchInvariance : public ::testing::Test {
 protected:
  static constexpr uint64_t kWeights = 11;

  // The same weights twice: for the Engine (the solo runs) and for the core's backend.
  void load(const std::string& weights = "float", int64_t activation_rows = 0) {
    ModelOptions mo;
    mo.weights_seed = kWeights;
    mo.weights = weights;
    mo.group_size = weights == "int4" ? 32 : 0;  // int8: a scale per output channel
    mo.int8_activation_rows = activation_rows;
    // W4A8 takes activation blocks of 32; W8A8 here a scale per row.
    mo.int8_activation_block = weights == "int4" && activation_rows > 0 ? 32 : 0;
    model_ = std::make_unique<Model>("preset:llama-tiny", mo);
    RunOptions ro;
    ro.backend_options = {{"cache", "paged"}, {"block_size", "16"}};
    engine_ = std::make_unique<Engine>(*model_, ro);
    LoadOptions lo;
    lo.weights.kind = parse_weight_kind(weights, "test");
    lo.weights.group_size = mo.group_size;
    lo.weights.int8_activation_rows = activation_rows;
    lo.weights.int8_activation_block = mo.int8_activation_block;
    causal_ = testing::test_model("preset:llama-tiny", kWeights, lo);
    register_builtin_backends();
    backend_ = BackendRegistry::instance().create("eager", causal_, BackendOptions("eager", {}));
  }

  Sequence solo(const Spec& s) {
    engine_->manual_seed(s.seed);
    return engine_->generate({s.prompt}, s.settings).outputs.at(0).at(0);
  }

  // Runs `specs` through a core with `options`, each added before its arrival step; checks every
  // request against its solo run and that no block is left in use. Returns the core's counters.
  Json run_and_compare(const std::vector<Spec>& specs, const CoreOptions& options) {
    BatchScheduler core(*backend_, options);
    const std::vector<CoreResult> results = testing::drive_core(core, specs);
    int64_t differ = 0;
    for (size_t i = 0; i < results.size() && differ <= 3; ++i) {
      const CoreResult& r = results[i];
      const Spec& s = specs[i];
      EXPECT_TRUE(r.finish == "stop" || r.finish == "length") << r.finish << " " << r.error;
      const Sequence alone = solo(s);
      if (r.sequence.tokens != alone.tokens || r.sequence.token_scores != alone.token_scores) {
        ++differ;
        ADD_FAILURE() << "request " << i << " (prompt of " << s.prompt.size()
                      << " tokens, settings " << s.settings.dump() << ", seed " << s.seed
                      << ") differs from its solo run: " << r.sequence.tokens.size() << " vs "
                      << alone.tokens.size() << " tokens";
      }
    }
    return core.stats();
  }

  std::unique_ptr<Model> model_;
  std::unique_ptr<Engine> engine_;
  std::shared_ptr<const CausalLM> causal_;
  std::unique_ptr<ForwardBackend> backend_;
};

TEST_F(BatchInvariance, FiveHundredRandomRequestsEqualTheirSoloRuns) {
  load();
  const auto specs = testing::random_requests(500, 1, 1024);
  CoreOptions o;
  o.block_size = 4;
  o.kv_blocks = 1200;
  o.prefill_chunk = 7;  // prompts of up to 70 tokens prefill over several steps
  o.max_step_tokens = 40;
  o.max_running = 12;
  const Json stats = run_and_compare(specs, o);
  // The run exercised what it claims to: shared prefixes (whole blocks and copies on write) and
  // prefills split into chunks.
  EXPECT_GT(stats["prefix_hits"].get<int64_t>(), 50) << stats.dump();
  EXPECT_GT(stats["copy_on_write"].get<int64_t>(), 10) << stats.dump();
  EXPECT_GT(stats["prefill_tokens"].get<int64_t>(), 0) << stats.dump();
}

TEST_F(BatchInvariance, PreemptedRequestsResumeWithTheTokensTheyWouldHaveGiven) {
  load();
  const auto specs = testing::random_requests(120, 2, 1024);
  CoreOptions o;
  o.policy = "priority";
  o.block_size = 4;
  o.kv_blocks = 40;  // 160 positions for up to 8 requests of up to 94: preemption is certain
  o.prefill_chunk = 16;
  o.max_step_tokens = 64;
  o.max_running = 8;
  const Json stats = run_and_compare(specs, o);
  EXPECT_GT(stats["preemptions"].get<int64_t>(), 0) << stats.dump();
}

// Requests that arrive together behind one system prompt compute it once: the first computes it,
// the others wait for its blocks to be published instead of computing them a second time.
TEST_F(BatchInvariance, RequestsArrivingTogetherBehindOnePrefixComputeItOnce) {
  load();
  std::vector<Spec> specs;
  for (int64_t i = 0; i < 8; ++i) {
    Spec s;
    for (int64_t t = 0; t < 64; ++t) s.prompt.push_back(100 + t);
    for (int64_t t = 0; t < 5; ++t) s.prompt.push_back(300 + 10 * i + t);
    s.settings = {{"max_new_tokens", 4}, {"output_scores", true}};
    s.seed = static_cast<uint64_t>(i);
    specs.push_back(s);
  }
  CoreOptions o;
  o.block_size = 16;
  o.kv_blocks = 200;
  o.prefill_chunk = 32;
  o.max_step_tokens = 64;
  const Json stats = run_and_compare(specs, o);
  EXPECT_EQ(stats["prefill_tokens"].get<int64_t>(), 64 + 8 * 5) << stats.dump();
  EXPECT_EQ(stats["reused_tokens"].get<int64_t>(), 7 * 64) << stats.dump();
}

TEST_F(BatchInvariance, EveryPolicyAndNoPrefixSharing) {
  load();
  for (const std::string policy : {"fcfs", "shortest_prompt_first", "longest_prefix_first"}) {
    SCOPED_TRACE(policy);
    CoreOptions o;
    o.policy = policy;
    o.block_size = 8;
    o.kv_blocks = 300;
    o.prefill_chunk = 11;
    o.max_step_tokens = 30;
    o.prefix_sharing = policy != "fcfs";
    run_and_compare(testing::random_requests(40, 3, 1024), o);
  }
}

// The check is not vacuous: with the fastest kernels for many rows (LibTorch's GEMMs from
// kStreamRows rows), the same requests' log-probs come out differently in a batch.
TEST_F(BatchInvariance, WithoutTheInvariantKernelsTheBatchShowsInTheFloats) {
  load();
  const auto specs = testing::random_requests(60, 5, 1024);
  CoreOptions o;
  o.batch_invariant = false;
  o.block_size = 4;
  o.kv_blocks = 1200;
  o.prefill_chunk = 40;
  o.max_step_tokens = 96;
  std::vector<Spec> at_once = specs;
  for (Spec& s : at_once) s.arrival = 0;
  BatchScheduler core(*backend_, o);
  const std::vector<CoreResult> results = testing::drive_core(core, at_once);
  int64_t differ = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    differ += results[i].sequence.token_scores != solo(specs[i]).token_scores;
  }
  EXPECT_GT(differ, 0);
}

TEST_F(BatchInvariance, Int8AndInt4WeightsAndInt8Activations) {
  for (const std::string kind : {"int8", "int4", "w8a8", "w4a8"}) {
    SCOPED_TRACE(kind);
    const bool w8 = kind == "w8a8" || kind == "w4a8";
    load(kind == "int8" || kind == "w8a8" ? "int8" : "int4", w8 ? 4 : 0);
    CoreOptions o;
    o.block_size = 4;
    o.kv_blocks = 600;
    o.prefill_chunk = 5;
    o.max_step_tokens = 48;  // past kStreamRows: the GEMM path a batch would take uninvariant
    run_and_compare(testing::random_requests(40, 4, 1024), o);
  }
}

}  // namespace
}  // namespace gengraph

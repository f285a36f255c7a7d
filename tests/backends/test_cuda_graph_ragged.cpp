// cuda_graph's continuous-batching step (backends/cuda_graph/ragged_graphs.h): the scheduler's core
// (serving/batch_scheduler.h) over cuda_graph gives each request the tokens it gives over eager.
// On the CPU the padded static-buffer step runs uncaptured (capture: false) and must equal eager
// to the bit; option errors name the option. On a GPU (skipped without one) the steps are captured
// per bucket of tokens: replay equals the uncaptured padded step to the bit, greedy tokens equal
// eager's in float32, a new pool is captured again, and the paged attention op captures.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "backends/cuda_graph/cuda_graph_backend.h"
#include "backends/register_builtin.h"
#include "framework/backend/backend_registry.h"
#include "framework/kernels/paged_attention.h"
#include "framework/model/causal_lm.h"
#include "framework/model/loader.h"
#include "framework/util/device.h"
#include "framework/util/step_graph.h"
#include "serving/batch_scheduler.h"
#include "tests/support/scheduler_driver.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using Json = nlohmann::json;
using testing::error_of;
using ::testing::HasSubstr;

// Bit-reproducible cuBLAS across streams (as test_cuda_graph.cpp; a value already set is kept).
const bool kCublasWorkspaceFixed =
    setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0) == 0;

using Request = testing::ScheduledRequest;

// Prompts of 3 to 21 tokens, greedy and seeded sampling, arrivals spread over the first steps: a
// mix of decode steps and prefill chunks, sequences that grow past a few blocks.
std::vector<Request> requests(int64_t count, int64_t vocab) {
  return testing::small_requests(count, vocab, 19);
}

// Every request through `core`; the sequences in the requests' order.
std::vector<Sequence> drive(BatchScheduler& core, const std::vector<Request>& reqs) {
  return testing::drive_sequences(core, reqs, 10000);
}

std::vector<Sequence> run_core(ForwardBackend& backend, const std::vector<Request>& reqs,
                               const CoreOptions& options) {
  BatchScheduler core(backend, options);
  return drive(core, reqs);
}

// Same tokens; with `scores`, the same log-probs to the bit.
void expect_same(const std::vector<Sequence>& want, const std::vector<Sequence>& got, bool scores,
                 const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(want[i].tokens, got[i].tokens) << what << ": request " << i;
    if (scores) EXPECT_EQ(want[i].token_scores, got[i].token_scores) << what << ": request " << i;
  }
}

std::unique_ptr<ForwardBackend> make(const std::shared_ptr<const CausalLM>& m,
                                     const std::string& name,
                                     std::map<std::string, std::string> options = {}) {
  register_builtin_backends();
  return BackendRegistry::instance().create(name, m, BackendOptions(name, std::move(options)));
}

std::shared_ptr<const CausalLM> model(const std::string& which, const std::string& device) {
  return testing::test_model(which, 5, LoadOptions{at::kFloat, parse_device(device)});
}

TEST(CudaGraphRagged, OptionsNameTheOption) {
  const auto info = cuda_graph_backend_info();
  const auto cpu = model("tiny", "cpu");
  const auto create = [&](std::map<std::string, std::string> o) {
    o["capture"] = "false";
    const BackendOptions options("cuda_graph", std::move(o));
    const std::string checked =
        error_of([&] { info.check_options(options, c10::Device(c10::kCPU)); });
    const std::string created = error_of([&] { info.create(cpu, options); });
    EXPECT_EQ(checked, created);
    return created;
  };
  EXPECT_THAT(create({{"ragged_max_tokens", "100"}}),
              HasSubstr("option 'ragged_max_tokens': expected a power of two"));
  EXPECT_THAT(create({{"ragged_max_tokens", "0"}}),
              HasSubstr("option 'ragged_max_tokens': expected an integer in [1, 65536]"));
  EXPECT_THAT(create({{"ragged_max_tokens", "many"}}), HasSubstr("option 'ragged_max_tokens'"));
  EXPECT_THAT(create({{"ragged_max_tokens", "131072"}}),
              HasSubstr("option 'ragged_max_tokens': too large"));
  EXPECT_THAT(create({{"ragged_max_blocks", "-1"}}),
              HasSubstr("option 'ragged_max_blocks': expected an integer in [0, "));
  EXPECT_EQ(create({{"ragged_max_tokens", "1"}, {"ragged_max_blocks", "3"}}), "<no error>");
  EXPECT_EQ(create({{"ragged_max_tokens", "1024"}}), "<no error>");
}

TEST(CudaGraphRagged, OnlyTheEagerStepRunsRaggedBatches) {
  const auto cpu = model("tiny", "cpu");
  auto traced = make(cpu, "cuda_graph", {{"capture", "false"}, {"step", "trace"}});
  EXPECT_FALSE(traced->runs_ragged());
  EXPECT_THAT(error_of([&] { BatchScheduler core(*traced, CoreOptions{}); }),
              HasSubstr("backend 'cuda_graph' cannot run a ragged batch"));
  PagedCache cache(PagedLayout{2, 4, 16, 4, 4}, at::TensorOptions().dtype(at::kFloat));
  EXPECT_THAT(error_of([&] { traced->forward_ragged(RaggedBatch{}, cache); }),
              HasSubstr("runs with step: eager only, found step: trace"));
  EXPECT_TRUE(make(cpu, "cuda_graph", {{"capture", "false"}})->runs_ragged());
}

// Uncaptured, the padded static-buffer step runs on the CPU: with the scheduler's batch-invariant
// kernels padding changes no real row, so every request's tokens and log-probs equal eager's to
// the bit. Steps of more than ragged_max_tokens tokens, and sequences wider than
// ragged_max_blocks, take the direct forward.
TEST(CudaGraphRagged, UncapturedPaddedStepsEqualEagerToTheBit) {
  for (const std::string which : {"tiny", "preset:llama-tiny"}) {
    SCOPED_TRACE(which);
    const auto cpu = model(which, "cpu");
    CoreOptions o;
    o.block_size = 4;
    o.kv_blocks = 200;
    o.prefill_chunk = 7;
    o.max_step_tokens = 20;
    o.max_running = 6;
    const auto reqs = requests(14, 1024);
    auto eager = make(cpu, "eager");
    auto padded =
        make(cpu, "cuda_graph",
             {{"capture", "false"}, {"ragged_max_tokens", "8"}, {"ragged_max_blocks", "6"}});
    expect_same(run_core(*eager, reqs, o), run_core(*padded, reqs, o), true,
                "cuda_graph uncaptured vs eager");
    const BackendReport r = padded->report();
    EXPECT_GT(r.at("ragged_padded_tokens"), 0.0);
    EXPECT_GT(r.at("ragged_uncaptured_steps"), 0.0);
    EXPECT_EQ(r.at("ragged_graphs"), 0.0);
    EXPECT_EQ(r.at("ragged_max_tokens"), 8.0);
    EXPECT_EQ(r.at("ragged_max_blocks"), 6.0);
    // The default width: the model's max_positions in blocks, at most the pool's.
    auto wide = make(cpu, "cuda_graph", {{"capture", "false"}});
    run_core(*wide, requests(2, 1024), o);
    EXPECT_EQ(wide->report().at("ragged_max_blocks"),
              double(std::min<int64_t>(o.kv_blocks, (cpu->config().max_positions + 3) / 4)));
  }
}

class CudaGraphRaggedGpu : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    ASSERT_TRUE(kCublasWorkspaceFixed);
  }
  CoreOptions options() const {
    CoreOptions o;
    o.block_size = 16;
    o.kv_blocks = 64;
    o.prefill_chunk = 16;
    o.max_step_tokens = 48;  // steps of 17 .. 48 tokens pass ragged_max_tokens 16: uncaptured
    o.max_running = 8;
    o.batch_invariant = false;  // refused on CUDA (cuBLAS picks its kernels by shape)
    return o;
  }
};

// Captured per bucket: replay gives the uncaptured padded step's logits to the bit (same shapes),
// so tokens and log-probs are equal; float32 greedy tokens equal eager's (whose unpadded shapes
// change the floats by rounding only).
TEST_P(CudaGraphRaggedGpu, CapturedStepsGiveTheUncapturedStepsAndEagersTokens) {
  const auto m = model(GetParam(), "cuda");
  const auto reqs = requests(16, m->config().vocab_size);
  std::vector<Request> greedy;
  for (const Request& r : reqs) {
    if (!r.settings.contains("do_sample")) greedy.push_back(r);
  }
  const std::map<std::string, std::string> ragged = {{"ragged_max_tokens", "16"}};
  auto graph = make(m, "cuda_graph", ragged);
  auto uncaptured = make(m, "cuda_graph", {{"ragged_max_tokens", "16"}, {"capture", "false"}});
  auto eager = make(m, "eager");
  expect_same(run_core(*uncaptured, reqs, options()), run_core(*graph, reqs, options()), true,
              "captured vs uncaptured");
  expect_same(run_core(*eager, greedy, options()), run_core(*graph, greedy, options()), false,
              "captured vs eager, greedy");
  const BackendReport r = graph->report();
  EXPECT_GT(r.at("ragged_graphs"), 0.0);
  // Buckets 1, 2, 4, 8 and 16, once per pool (a core's pool may take its predecessor's place).
  EXPECT_LE(r.at("ragged_graphs"), 5.0 * (1.0 + r.at("ragged_recaptures")));
  EXPECT_GT(r.at("ragged_replays"), r.at("ragged_graphs"));
  EXPECT_GT(r.at("ragged_uncaptured_steps"), 0.0);
  const int64_t width = std::min<int64_t>(64, (m->config().max_positions + 15) / 16);
  EXPECT_EQ(r.at("ragged_max_blocks"), double(width));
}

// Graphs hold the pool's addresses: a second core (another pool, the first still alive) is
// captured again and gives the same tokens.
TEST_P(CudaGraphRaggedGpu, AnotherPoolIsCapturedAgain) {
  const auto m = model(GetParam(), "cuda");
  auto graph = make(m, "cuda_graph", {{"ragged_max_tokens", "16"}});
  const auto reqs = requests(6, m->config().vocab_size);
  BatchScheduler one(*graph, options()), two(*graph, options());  // two pools, both alive
  const auto first = drive(one, reqs);
  const double graphs = graph->report().at("ragged_graphs");
  const auto second = drive(two, reqs);
  expect_same(first, second, true, "second pool vs first");
  EXPECT_GE(graph->report().at("ragged_recaptures"), 1.0);
  EXPECT_GT(graph->report().at("ragged_graphs"), graphs);
}

INSTANTIATE_TEST_SUITE_P(Models, CudaGraphRaggedGpu, ::testing::Values("tiny", "preset:llama-tiny"),
                         [](const auto& info) {
                           return info.param == "tiny" ? std::string("gpt2_tiny")
                                                       : std::string("llama_tiny");
                         });

// The attention op itself: captured over static inputs, its replay follows new values in them
// (other lengths, another block table) exactly as uncaptured calls do, and agrees with the CPU
// kernel.
TEST(CudaGraphRaggedGpuOps, PagedAttentionCapturesAndFollowsItsInputs) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  const at::Device dev(at::kCUDA, 0);
  const int64_t bs = 4, blocks = 16, width = 5, n = 6, heads = 4, kv = 2, hd = 8;
  at::manual_seed(7);
  const auto f = at::TensorOptions().dtype(at::kFloat);
  const auto l = at::TensorOptions().dtype(at::kLong);
  const at::Tensor kp = at::randn({blocks * bs, kv, hd}, f),
                   vp = at::randn({blocks * bs, kv, hd}, f);
  const at::Tensor q = at::randn({n, heads, hd}, f);
  struct Inputs {
    at::Tensor tables, seq, first, last;
  };
  const Inputs a{at::randperm(blocks, l).narrow(0, 0, 3 * width).view({3, width}),
                 at::tensor({0, 0, 1, 2, 2, 2}, l), at::tensor({0, 0, 0, 0, 2, 0}, l),
                 at::tensor({3, 4, 19, 0, 9, 10}, l)};
  const Inputs b{at::randperm(blocks, l).narrow(0, 0, 3 * width).view({3, width}),
                 at::tensor({2, 1, 1, 0, 0, 2}, l), at::tensor({1, 0, 5, 0, 0, 0}, l),
                 at::tensor({1, 7, 12, 0, 15, 2}, l)};
  const auto on_cpu = [&](const Inputs& in) {
    return kernels::paged_attention(q, kp, vp, in.tables, in.seq, in.first, in.last, bs, 0.3);
  };
  const at::Tensor qd = q.to(dev), kd = kp.to(dev), vd = vp.to(dev);
  const auto uncaptured = [&](const Inputs& in) {
    return kernels::paged_attention(qd, kd, vd, in.tables.to(dev), in.seq.to(dev), in.first.to(dev),
                                    in.last.to(dev), bs, 0.3);
  };
  Inputs st{a.tables.to(dev), a.seq.to(dev), a.first.to(dev), a.last.to(dev)};
  const auto set = [&](const Inputs& in) {
    st.tables.copy_(in.tables);
    st.seq.copy_(in.seq);
    st.first.copy_(in.first);
    st.last.copy_(in.last);
  };
  at::Tensor out = at::zeros({n, heads * hd}, qd.options());
  const auto step = [&] {
    out.copy_(kernels::paged_attention(qd, kd, vd, st.tables, st.seq, st.first, st.last, bs, 0.3));
  };
  step();  // uncaptured once first (capture_step's contract)
  const auto replay = capture_step(dev, step);
  for (const Inputs* in : {&a, &b, &a}) {
    set(*in);
    replay();
    synchronize(dev);
    EXPECT_TRUE(at::equal(out.cpu(), uncaptured(*in).cpu()));
    EXPECT_TRUE(at::allclose(out.cpu(), on_cpu(*in), 1e-5, 1e-5));
  }
}

}  // namespace
}  // namespace gengraph

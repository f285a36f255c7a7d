// The cuda_graph backend. Option and device errors are checked everywhere; the GPU suite (token
// equality of eager, trace and cuda_graph on CUDA, float32 and bfloat16) skips without a GPU.
#include <ATen/ATen.h>
#include <gengraph/cli.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "backends/cuda_graph/cuda_graph_backend.h"
#include "backends/register_builtin.h"
#include "framework/backend/backend_registry.h"
#include "framework/backend/model_step.h"
#include "framework/decoding/generator.h"
#include "framework/model/causal_lm.h"
#include "framework/model/loader.h"
#include "framework/util/device.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using testing::error_of;
using ::testing::HasSubstr;

// cuBLAS is bit-reproducible across streams (capture runs on a side stream) only with a fixed
// workspace configuration (NVIDIA's cuBLAS docs, "Results reproducibility"). Set before any CUDA
// use, at static initialisation; a value already in the environment is kept.
const bool kCublasWorkspaceFixed =
    setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0) == 0;

std::shared_ptr<const CausalLM> model(const std::string& which, at::ScalarType dtype,
                                      const std::string& device) {
  return testing::test_model(which, 3, LoadOptions{dtype, parse_device(device)});
}

TEST(CudaGraphBackend, ListedWithTheReasonWhenUnavailable) {
  register_builtin_backends();
  const auto& info = BackendRegistry::instance().get("cuda_graph");
  if (cuda_available()) {
    EXPECT_EQ(info.unavailable_reason(BackendOptions("cuda_graph", {})), "");
  } else {
    EXPECT_THAT(info.unavailable_reason(BackendOptions("cuda_graph", {})),
                HasSubstr("needs a CUDA device"));
    EXPECT_EQ(info.unavailable_reason(BackendOptions("cuda_graph", {{"capture", "false"}})), "");
    EXPECT_THAT(error_of([] {
                  BackendRegistry::instance().create("cuda_graph", model("tiny", at::kFloat, "cpu"),
                                                     BackendOptions("cuda_graph", {}));
                }),
                HasSubstr("backend 'cuda_graph' is unavailable here: capture needs a CUDA device"));
  }
}

TEST(CudaGraphBackend, OptionsAndDeviceErrorsNameTheOption) {
  const auto info = cuda_graph_backend_info();
  const auto cpu = model("tiny", at::kFloat, "cpu");
  auto create = [&](std::map<std::string, std::string> o) {
    return error_of([&] { info.create(cpu, BackendOptions("cuda_graph", std::move(o))); });
  };
  EXPECT_THAT(create({{"buckets", "1,two"}}),
              HasSubstr("option 'buckets': expected comma-separated positive"));
  EXPECT_THAT(create({{"buckets", "0"}}), HasSubstr("option 'buckets'"));
  EXPECT_THAT(create({{"step", "script"}}),
              HasSubstr("option 'step': expected one of aoti, eager, trace"));
  EXPECT_THAT(create({}),
              HasSubstr("needs the model on a CUDA device; set model.device: cuda (found cpu)"));
  EXPECT_THAT(create({{"capture", "maybe"}}), HasSubstr("option 'capture'"));
  EXPECT_THAT(create({{"fuser", "none"}, {"capture", "false"}}),
              HasSubstr("option 'fuser' applies to the trace step; set step: trace"));
  EXPECT_THAT(create({{"step", "trace"}, {"fuser", "nnc"}}),
              HasSubstr("option 'fuser': expected one of default, none, te"));
  EXPECT_EQ(
      create({{"step", "trace"}, {"fuser", "none"}, {"freeze", "false"}, {"capture", "false"}}),
      "<no error>");
  EXPECT_EQ(create({{"capture", "false"}}), "<no error>");
}

// Uncaptured, the backend runs anywhere; token equality with eager is in the conformance suite
// (tests/backends/test_backend_conformance.cpp). Here: which buckets a batch lands in.
TEST(CudaGraphBackend, UncapturedPicksTheSmallestBucketThatFits) {
  register_builtin_backends();
  auto b = BackendRegistry::instance().create(
      "cuda_graph", model("tiny", at::kFloat, "cpu"),
      BackendOptions("cuda_graph",
                     {{"capture", "false"}, {"buckets", "2,4,16"}, {"max_length", "16"}}));
  ResolvedSettings g;
  g.max_new_tokens = 3;
  Generator(g).generate(*b, {{1}, {2}, {3}});  // 3 rows: bucket 4
  EXPECT_EQ(b->report().at("buckets"), 1.0);
  Generator(g).generate(*b, {{1, 2}, {3}});  // 2 rows: bucket 2
  g.num_beams = 4;
  Generator(g).generate(*b, {{1, 2}, {3}});  // 8 rows: bucket 16
  EXPECT_EQ(b->report().at("buckets"), 3.0);
  EXPECT_EQ(b->report().at("graphs"), 0.0);
  EXPECT_EQ(b->report().at("captured"), 0.0);
  g.num_beams = 9;
  EXPECT_THAT(error_of([&] {
                Generator(g).generate(*b, {{1, 2}, {3}});
              }),
              HasSubstr("18 rows (batch x beams) exceed the largest bucket 16"));
}

// A model step kind registered from outside (framework/backend/model_step.h) runs inside
// cuda_graph as the built-in ones do: the model's forward, counted, with an option of its own.
class CountingStep final : public ModelStep {
 public:
  CountingStep(const CausalLM& m, int64_t* decodes) : model_(m), decodes_(decodes) {}
  std::string kind() const override { return "test_counting"; }
  at::Tensor prefill(const StepArgs& a) override { return forward(a); }
  at::Tensor decode(const StepArgs& a) override {
    ++*decodes_;
    return forward(a);
  }

 private:
  at::Tensor forward(const StepArgs& a) {
    return run_forward_step(model_, *a.cache, a.input_ids, a.positions, a.slots, a.token_valid);
  }
  const CausalLM& model_;
  int64_t* decodes_;
};

TEST(CudaGraphBackend, ARegisteredModelStepRunsLikeTheBuiltinOnes) {
  register_builtin_backends();
  static int64_t decodes = 0;
  if (ModelStepRegistry::instance().owner_of("test_every").empty()) {
    ModelStepInfo info;
    info.name = "test_counting";
    info.option_keys = {"test_every"};
    info.check_options = [](const BackendOptions& o) { o.get_int("test_every", 1, 1, 8); };
    info.create = [](const CausalLM& m, const BackendOptions& o, int64_t) {
      o.get_int("test_every", 1, 1, 8);
      return std::make_unique<CountingStep>(m, &decodes);
    };
    ModelStepRegistry::instance().add(info);
  }
  const auto cpu = model("tiny", at::kFloat, "cpu");
  ResolvedSettings g;
  g.max_new_tokens = 5;
  g.num_beams = 2;
  const std::vector<std::vector<int64_t>> prompts = {{1, 2, 3}, {4, 5}};
  auto eager = BackendRegistry::instance().create("eager", cpu, BackendOptions("eager", {}));
  auto mine = BackendRegistry::instance().create(
      "cuda_graph", cpu,
      BackendOptions("cuda_graph",
                     {{"capture", "false"}, {"step", "test_counting"}, {"test_every", "2"}}));
  const auto want = Generator(g).generate(*eager, prompts).outputs;
  const auto got = Generator(g).generate(*mine, prompts).outputs;
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i][0].tokens, want[i][0].tokens);
  EXPECT_GE(decodes, 4);  // the decode steps ran through the registered step
  EXPECT_EQ(mine->report().at("step_is_test_counting"), 1.0);
  EXPECT_EQ(mine->report().at("step_is_trace"), 0.0);
  // Its option belongs to it: with another step it is refused naming the kind that reads it.
  EXPECT_THAT(error_of([&] {
                BackendRegistry::instance().create(
                    "cuda_graph", cpu,
                    BackendOptions("cuda_graph", {{"capture", "false"}, {"test_every", "2"}}));
              }),
              HasSubstr("option 'test_every' applies to the test_counting step; set step: "
                        "test_counting"));
}

// On the GPU, three claims, each as strong as the numerics allow:
//  1. Replay changes nothing: a captured step gives bit-identical logits to the same step run
//     uncaptured on the same shapes, so tokens and beam scores are equal, float32 and bfloat16.
//  2. float32: every backend and option gives the same tokens as eager (growing cache), as the
//     CPU conformance suite asks. Different shapes (bucket padding rows, a static cache length)
//     and kernels change logits by ~1e-6, far below the gaps between tokens.
//  3. bfloat16 across different kernels: logits differ by bfloat16 rounding, so near-ties can
//     flip a token; instead each backend's logits must be as close to eager's as bfloat16 eager
//     is to float32 eager (twice that error, measured in the same test).
class CudaGraphGpu : public ::testing::TestWithParam<std::tuple<std::string, at::ScalarType>> {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    register_builtin_backends();
  }
};
class CudaGraphGpuModels : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    register_builtin_backends();
  }
};

const std::vector<std::vector<int64_t>> kPrompts = {{3, 4, 5, 6, 7, 8}, {9}, {10, 11, 12}};

std::vector<std::pair<std::string, ResolvedSettings>> modes() {
  ResolvedSettings greedy;
  greedy.max_new_tokens = 16;
  ResolvedSettings sample = greedy;
  sample.do_sample = true;
  ResolvedSettings beam = greedy;
  beam.num_beams = 4;
  beam.num_return_sequences = 2;
  return {{"greedy", greedy}, {"sample", sample}, {"beam", beam}};
}

std::unique_ptr<ForwardBackend> make(const std::shared_ptr<const CausalLM>& m,
                                     const std::string& name,
                                     std::map<std::string, std::string> options = {}) {
  return BackendRegistry::instance().create(name, m, BackendOptions(name, std::move(options)));
}

Generation run(const ResolvedSettings& config, ForwardBackend& b) {
  at::manual_seed(23);
  return Generator(config, [] { synchronize(at::Device(at::kCUDA, 0)); }).generate(b, kPrompts);
}

// Same tokens (and, when `exact_scores`, bit-identical beam scores) as `want`.
void expect_same(const Generation& want, const Generation& got, bool exact_scores,
                 const std::string& what) {
  ASSERT_EQ(want.outputs.size(), got.outputs.size()) << what;
  for (size_t i = 0; i < want.outputs.size(); ++i) {
    ASSERT_EQ(want.outputs[i].size(), got.outputs[i].size()) << what;
    for (size_t j = 0; j < want.outputs[i].size(); ++j) {
      EXPECT_EQ(want.outputs[i][j].tokens, got.outputs[i][j].tokens)
          << what << ", input " << i << " sequence " << j;
      if (exact_scores && want.outputs[i][j].score) {
        EXPECT_EQ(*want.outputs[i][j].score, *got.outputs[i][j].score) << what << ", input " << i;
      }
    }
  }
}

TEST_P(CudaGraphGpu, ReplayIsBitwiseTheUncapturedStep) {
  ASSERT_TRUE(kCublasWorkspaceFixed);
  const auto& [which, dtype] = GetParam();
  const auto m = model(which, dtype, "cuda");
  // Buckets of exactly the rows used (3 prompts; 3 x 4 beams), so shapes match the references.
  const std::map<std::string, std::string> exact = {{"buckets", "3,12"}};
  auto with = [&](std::map<std::string, std::string> o) {
    o.insert(exact.begin(), exact.end());
    return o;
  };
  auto eager_static = make(m, "eager", {{"cache", "static"}});
  auto graph = make(m, "cuda_graph", exact);
  auto trace = make(m, "trace");
  auto graph_trace = make(m, "cuda_graph", with({{"step", "trace"}}));
  // Sliding-window layers (gemma3-a's) in rings of window + 3 slots, captured.
  auto eager_rings = make(m, "eager", {{"cache", "static"}, {"ring_spare", "3"}});
  auto graph_rings = make(m, "cuda_graph", with({{"ring_spare", "3"}}));
  for (const auto& [what, config] : modes()) {
    expect_same(run(config, *eager_static), run(config, *graph), true,
                what + ": cuda_graph vs eager static");
    expect_same(run(config, *trace), run(config, *graph_trace), true,
                what + ": cuda_graph step trace vs trace");
    expect_same(run(config, *eager_rings), run(config, *graph_rings), true,
                what + ": cuda_graph vs eager static, rings");
  }
  EXPECT_EQ(graph->report().at("graphs"), 4.0);  // buckets 3 and 12, each with and without reorder
  EXPECT_GT(graph->report().at("graph_pool_bytes"), 0.0);
}

TEST_P(CudaGraphGpuModels, Float32SameTokensOnEveryBackend) {
  const auto m = model(GetParam(), at::kFloat, "cuda");
  auto reference = make(m, "eager");
  std::vector<std::pair<std::string, std::unique_ptr<ForwardBackend>>> backends;
  backends.emplace_back("eager static", make(m, "eager", {{"cache", "static"}}));
  backends.emplace_back("trace", make(m, "trace"));
  backends.emplace_back("trace unfrozen unfused",
                        make(m, "trace", {{"freeze", "false"}, {"fuser", "none"}}));
  backends.emplace_back("cuda_graph", make(m, "cuda_graph"));  // 3 rows in bucket 4, 12 in 16
  backends.emplace_back("cuda_graph step trace", make(m, "cuda_graph", {{"step", "trace"}}));
  backends.emplace_back("cuda_graph uncaptured", make(m, "cuda_graph", {{"capture", "false"}}));
  backends.emplace_back("cuda_graph rings", make(m, "cuda_graph", {{"ring_spare", "3"}}));
  for (const auto& [what, config] : modes()) {
    const auto want = run(config, *reference);
    for (auto& [name, b] : backends)
      expect_same(want, run(config, *b), false, what + ": " + name + " vs eager");
  }
}

TEST_P(CudaGraphGpuModels, Bfloat16LogitsAsCloseAsBfloat16Eager) {
  const auto m32 = model(GetParam(), at::kFloat, "cuda");
  const auto m16 = model(GetParam(), at::kBFloat16, "cuda");
  const auto dev = at::Device(at::kCUDA, 0);
  const auto ids = at::tensor({0, 0, 3, 4, 5, 6}, at::kLong).reshape({2, 3}).to(dev);
  const auto valid = ids.ne(0);
  const auto pos = valid.to(at::kLong).cumsum(1).sub(1).clamp_min(0);
  const auto next = at::tensor({7, 8}, at::kLong).reshape({2, 1}).to(dev);
  const auto p2 = pos.select(1, 2).unsqueeze(1) + 1;
  const auto parents = at::tensor({1, 1}, at::kLong).to(dev);  // a beam reorder
  // Prefill logits and one decode step's (with the reorder), as float32.
  auto logits = [&](ForwardBackend& b) {
    b.prepare(2, 8);
    at::Tensor a = b.prefill(StepInputs{ids, pos, valid, {}}).to(at::kFloat);
    at::Tensor d =
        b.decode(StepInputs{next, p2, at::ones({2, 1}, valid.options()), parents}).to(at::kFloat);
    return std::make_pair(a, d);
  };
  auto e32 = make(m32, "eager");
  auto e16 = make(m16, "eager");
  const auto [ref_a, ref_d] = logits(*e32);
  const auto [a16, d16] = logits(*e16);
  const double err_a = (a16 - ref_a).abs().max().item<double>(),
               err_d = (d16 - ref_d).abs().max().item<double>();
  std::vector<std::pair<std::string, std::unique_ptr<ForwardBackend>>> backends;
  backends.emplace_back("eager static", make(m16, "eager", {{"cache", "static"}}));
  backends.emplace_back("trace", make(m16, "trace"));
  backends.emplace_back("cuda_graph", make(m16, "cuda_graph"));
  backends.emplace_back("cuda_graph step trace", make(m16, "cuda_graph", {{"step", "trace"}}));
  for (auto& [name, b] : backends) {
    const auto [a, d] = logits(*b);
    EXPECT_LE((a - a16).abs().max().item<double>(), 2 * err_a)
        << name << " prefill; bf16 eager vs fp32: " << err_a;
    EXPECT_LE((d - d16).abs().max().item<double>(), 2 * err_d)
        << name << " decode; bf16 eager vs fp32: " << err_d;
  }
}

// Quantized weights on the GPU (bfloat16 activations, the seed's dtype): a captured step replays
// the uncaptured one bit for bit, for int8 (at::_weight_int8pack_mm), int4
// (at::_weight_int4pack_mm) and bfloat16 weights, greedy, sampling and beams; the trace step too.
class CudaGraphGpuQuantized : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
    register_builtin_backends();
  }
};

TEST_P(CudaGraphGpuQuantized, ReplayIsBitwiseTheUncapturedStep) {
  ASSERT_TRUE(kCublasWorkspaceFixed);
  LoadOptions o{at::kBFloat16, parse_device("cuda")};
  o.weights.kind = parse_weight_kind(GetParam(), "test");
  for (const std::string which : {"tiny", "preset:llama-tiny"}) {
    SCOPED_TRACE(which);
    const auto m = testing::test_model(which, 3, o);
    const std::map<std::string, std::string> exact = {{"buckets", "3,12"}};
    auto eager_static = make(m, "eager", {{"cache", "static"}});
    auto graph = make(m, "cuda_graph", exact);
    auto trace = make(m, "trace");
    auto graph_trace = make(m, "cuda_graph", {{"buckets", "3,12"}, {"step", "trace"}});
    for (const auto& [what, config] : modes()) {
      expect_same(run(config, *eager_static), run(config, *graph), true,
                  what + ": cuda_graph vs eager static");
      expect_same(run(config, *trace), run(config, *graph_trace), true,
                  what + ": cuda_graph step trace vs trace");
    }
    EXPECT_EQ(graph->report().at("graphs"), 4.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaGraphGpuQuantized,
                         ::testing::Values("int8", "int4", "bfloat16"));

INSTANTIATE_TEST_SUITE_P(Models, CudaGraphGpu,
                         ::testing::Combine(::testing::Values("tiny", "gpt2-a", "gptj-a", "llama-a",
                                                              "gemma3-a"),
                                            ::testing::Values(at::kFloat, at::kBFloat16)),
                         [](const auto& info) {
                           std::string m = std::get<0>(info.param);
                           std::replace(m.begin(), m.end(), '-', '_');
                           return m + (std::get<1>(info.param) == at::kFloat ? "_float32"
                                                                             : "_bfloat16");
                         });
INSTANTIATE_TEST_SUITE_P(Models, CudaGraphGpuModels,
                         ::testing::Values("tiny", "gpt2-a", "gptj-a", "llama-a", "gemma3-a"),
                         [](const auto& info) {
                           std::string m = info.param;
                           std::replace(m.begin(), m.end(), '-', '_');
                           return m;
                         });

// Prompt lookup on `backend` gives `reference`'s plain greedy tokens, with at least one verify.
void expect_lookup_gives_greedy(ForwardBackend& backend, ForwardBackend& reference,
                                int64_t new_tokens, int64_t candidates) {
  ResolvedSettings g;
  g.max_new_tokens = new_tokens;
  const std::vector<std::vector<int64_t>> prompt = {{5, 6, 7, 8, 5, 6, 7, 8, 5, 6}};
  const auto want = Generator(g).generate(reference, prompt).outputs[0][0].tokens;
  g.prompt_lookup_num_tokens = candidates;
  const Generation got = Generator(g).generate(backend, prompt);
  EXPECT_EQ(got.outputs[0][0].tokens, want);
  EXPECT_GT(got.verify_steps, 0);
}

// Speculative decoding's verify in one forward through a verify step per bucket of positions,
// uncaptured here on the CPU (eager, trace and aoti steps, a bucket with a padding row): the logits
// equal eager's, the filler positions leave nothing behind, prompt lookup gives greedy's tokens.
TEST(CudaGraphBackend, VerifiesInOneForwardPerBucketOfPositions) {
  register_builtin_backends();
  const auto m = model("tiny", at::kFloat, "cpu");
  auto e = BackendRegistry::instance().create("eager", m,
                                              BackendOptions("eager", {{"cache", "static"}}));
  const auto inputs = [](std::vector<int64_t> v, int64_t from) {
    const at::Tensor x = at::tensor(v, at::kLong).unsqueeze(0);
    return StepInputs{x, at::arange(from, from + x.size(1), at::kLong).unsqueeze(0), x.ne(-1), {}};
  };
  install_aoti_export_tool();  // the aoti step builds (or reuses) a package for the model
  for (const std::string step : {"eager", "trace", "aoti"}) {
    SCOPED_TRACE(step);
    auto c = BackendRegistry::instance().create(
        "cuda_graph", m,
        BackendOptions(
            "cuda_graph",
            {{"capture", "false"}, {"buckets", "2"}, {"max_length", "32"}, {"step", step}}));
    for (auto* b : {c.get(), e.get()}) {
      b->prepare(1, 12);
      b->prefill(inputs({1, 2, 3}, 0));
    }
    // 3 positions traced as 4, the filler dropped; then a decode where the filler was.
    EXPECT_TRUE(
        at::allclose(c->verify(inputs({7, 8, 9}, 3)), e->verify(inputs({7, 8, 9}, 3)), 1e-4, 1e-5));
    c->rewind(1);
    e->rewind(1);
    EXPECT_TRUE(at::allclose(c->decode(inputs({4}, 5)), e->decode(inputs({4}, 5)), 1e-4, 1e-5));
    expect_lookup_gives_greedy(*c, *e, 16, 4);
  }
}

// On a GPU each verify bucket is captured as a graph of its own, in the middle of a generation:
// prompt lookup still gives plain greedy's tokens, and the graphs are counted.
TEST(CudaGraphGpu, SpeculativeVerifyGraphsGiveGreedysTokens) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  register_builtin_backends();
  const auto m = model("tiny", at::kFloat, "cuda");
  auto e = BackendRegistry::instance().create("eager", m, BackendOptions("eager", {}));
  for (const std::string step : {"eager", "trace"}) {
    SCOPED_TRACE(step);
    auto c = BackendRegistry::instance().create(
        "cuda_graph", m, BackendOptions("cuda_graph", {{"buckets", "1,2"}, {"step", step}}));
    expect_lookup_gives_greedy(*c, *e, 24, 6);
    EXPECT_GT(c->report().at("verify_graphs"), 0.0);
  }
}

TEST(CudaGraphGpuErrors, BucketsAndLengthLimitsNameTheOption) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  register_builtin_backends();
  const auto m = model("tiny", at::kFloat, "cuda");
  auto b = BackendRegistry::instance().create(
      "cuda_graph", m, BackendOptions("cuda_graph", {{"buckets", "1,2"}, {"max_length", "12"}}));
  ResolvedSettings g;
  g.max_new_tokens = 4;
  EXPECT_THAT(error_of([&] {
                Generator(g).generate(*b, {{1}, {2}, {3}});
              }),
              HasSubstr("3 rows (batch x beams) exceed the largest bucket 2; add a larger one to "
                        "the option 'buckets'"));
  g.max_new_tokens = 20;
  EXPECT_THAT(error_of([&] {
                Generator(g).generate(*b, {{1, 2}});
              }),
              HasSubstr("raise the backend option 'max_length'"));
}

}  // namespace
}  // namespace gengraph

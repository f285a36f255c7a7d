// One suite over every registered backend configuration: tokens identical to the eager reference
// (growing cache) and logits within tolerance, on CPU. CUDA-only backends skip without a GPU.
#include <ATen/ATen.h>
#include <gengraph/cli.h>
#include <gtest/gtest.h>

#include "backends/register_builtin.h"
#include "framework/backend/backend_registry.h"
#include "framework/decoding/generator.h"
#include "framework/decoding/registry.h"
#include "framework/model/loader.h"
#include "framework/util/device.h"
#include "framework/util/error.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

struct Variant {
  std::string label;
  std::string backend;
  std::map<std::string, std::string> options;
  bool fused = true;  // the form of the model the backend runs (the reference's is fused)
  LoopOptions loop;   // the loop that drives it (the reference's is the host loop)
};

LoopOptions whole_step_uncaptured() {
  LoopOptions o;
  o.whole_step = LoopOptions::WholeStep::kOn;
  o.capture = false;
  o.sync_every = 3;  // so that some generations run steps past their end
  return o;
}

// Every backend in the registry with its option variants worth covering.
std::vector<Variant> variants() {
  register_builtin_backends();
  install_aoti_export_tool();  // aoti builds (or reuses from its cache) a package per test model
  std::vector<Variant> v;
  for (const auto& name : BackendRegistry::instance().names()) {
    if (name == "eager") {
      v.push_back({"eager_growing", "eager", {{"cache", "growing"}}});
      v.push_back({"eager_static", "eager", {{"cache", "static"}}});
      // transformers' formulation op by op against the fused reference, on every test model
      v.push_back({"eager_unfused", "eager", {{"cache", "growing"}}, false});
      v.push_back({"eager_static_unfused", "eager", {{"cache", "static"}}, false});
      // Sliding-window layers in rings of window + 3 slots (the models with a window; the
      // verifies below take 3 candidates, which a spare of 3 rewrites in place).
      v.push_back({"eager_growing_rings", "eager", {{"cache", "growing"}, {"ring_spare", "3"}}});
      v.push_back({"eager_static_rings", "eager", {{"cache", "static"}, {"ring_spare", "3"}}});
      v.push_back({"eager_static_rings_unfused",
                   "eager",
                   {{"cache", "static"}, {"ring_spare", "3"}},
                   false});
    } else if (name == "cuda_graph") {
      // Captured only on CUDA (tests/backends/test_cuda_graph.cpp); uncaptured, its static-buffer
      // step (bucket padding rows, the beam reorder inside the step) runs on any device.
      v.push_back({"cuda_graph_uncaptured", name, {{"capture", "false"}}});
      v.push_back({"cuda_graph_uncaptured_trace", name, {{"capture", "false"}, {"step", "trace"}}});
      v.push_back({"cuda_graph_uncaptured_aoti", name, {{"capture", "false"}, {"step", "aoti"}}});
      // The whole decoding step over the static step, uncaptured: what a whole-step graph replays.
      v.push_back(
          {"whole_step_uncaptured", name, {{"capture", "false"}}, true, whole_step_uncaptured()});
      v.push_back(
          {"cuda_graph_uncaptured_rings", name, {{"capture", "false"}, {"ring_spare", "3"}}});
      v.push_back({"whole_step_uncaptured_rings",
                   name,
                   {{"capture", "false"}, {"ring_spare", "3"}},
                   true,
                   whole_step_uncaptured()});
    } else {
      v.push_back({name, name, {}});
    }
  }
  return v;
}

class BackendConformance : public ::testing::TestWithParam<std::tuple<Variant, std::string>> {
 protected:
  // A backend this machine lacks (CUDA-only ones without a GPU) skips.
  void SetUp() override {
    const Variant& variant = std::get<0>(GetParam());
    const auto& info = BackendRegistry::instance().get(variant.backend);
    const BackendOptions options(variant.backend, variant.options);
    if (info.unavailable_reason && !info.unavailable_reason(options).empty()) {
      GTEST_SKIP() << variant.backend << ": " << info.unavailable_reason(options);
    }
    if (variant.options.count("ring_spare") &&
        testing::test_model(std::get<1>(GetParam()), 11)->config().sliding_window == 0) {
      GTEST_SKIP() << "rings hold sliding-window layers; " << std::get<1>(GetParam())
                   << " has none";
    }
  }
  // The variant's backend over `model` (fused), or over the test model's unfused form.
  std::unique_ptr<ForwardBackend> under_test(std::shared_ptr<const CausalLM> model) const {
    const auto& [variant, which] = GetParam();
    LoadOptions form;
    form.fused = variant.fused;
    return BackendRegistry::instance().create(
        variant.backend, variant.fused ? std::move(model) : testing::test_model(which, 11, form),
        BackendOptions(variant.backend, variant.options));
  }
};

TEST_P(BackendConformance, MatchesEagerTokensAndLogits) {
  const auto& [variant, which] = GetParam();
  const auto model = testing::test_model(which, 11);
  auto reference = BackendRegistry::instance().create("eager", model, BackendOptions("eager", {}));
  auto backend = under_test(model);
  const std::vector<std::vector<int64_t>> prompts = {{3, 4, 5, 6, 7, 8}, {9}, {10, 11, 12}};
  ResolvedSettings g;
  g.max_new_tokens = 12;
  // Greedy, seeded sampling, beam search, beam sampling and diverse beam search (the beam reorder
  // runs inside decode).
  for (const auto& [what, config] : testing::every_strategy(g)) {
    at::manual_seed(17);
    const auto a = Generator(config).generate(*reference, prompts);
    at::manual_seed(17);
    const auto b = Generator(config, {}, variant.loop).generate(*backend, prompts);
    EXPECT_EQ(b.whole_step, variant.loop.whole_step == LoopOptions::WholeStep::kOn) << what;
    EXPECT_EQ(a.steps, b.steps) << what;
    for (size_t i = 0; i < prompts.size(); ++i) {
      ASSERT_EQ(a.outputs[i].size(), b.outputs[i].size());
      for (size_t j = 0; j < a.outputs[i].size(); ++j) {
        EXPECT_EQ(a.outputs[i][j].tokens, b.outputs[i][j].tokens)
            << what << " input " << i << " sequence " << j;
        if (a.outputs[i][j].score)
          EXPECT_NEAR(*a.outputs[i][j].score, *b.outputs[i][j].score, 1e-4) << what;
      }
    }
  }
  // Logits of prefill and of one decode step, directly.
  const auto ids = at::tensor({0, 0, 3, 4, 5, 6}, at::kLong).reshape({2, 3});
  const auto valid = ids.ne(0);
  const auto pos = valid.to(at::kLong).cumsum(1).sub(1).clamp_min(0);
  for (auto* be : {reference.get(), backend.get()}) be->prepare(2, 8);
  const auto la = reference->prefill(StepInputs{ids, pos, valid, {}});
  const auto lb = backend->prefill(StepInputs{ids, pos, valid, {}});
  EXPECT_TRUE(at::allclose(la, lb, 1e-4, 1e-5)) << (la - lb).abs().max().item<float>();
  const auto next = la.argmax(-1).unsqueeze(1);
  const auto p2 = pos.select(1, 2).unsqueeze(1) + 1;
  const auto parents = at::tensor({1, 1}, at::kLong);  // both rows continue row 1: a beam reorder
  const auto da = reference->decode(StepInputs{next, p2, at::ones({2, 1}, at::kBool), parents});
  const auto db = backend->decode(StepInputs{next, p2, at::ones({2, 1}, at::kBool), parents});
  EXPECT_TRUE(at::allclose(da, db, 1e-4, 1e-5)) << (da - db).abs().max().item<float>();
}

// A candidate generator that proposes a script: the next three tokens of a known output with the
// third made wrong, so that every verify keeps two candidates and rewinds past the third,
// whatever the model (what prompt lookup proposes depends on the model's repetitions).
struct Script {
  std::vector<int64_t> tokens;  // the output to propose from
  size_t prompt_length = 0;
  int64_t vocab = 1;
};
Script& script() {
  static Script s;
  return s;
}

class ScriptedCandidates final : public CandidateGenerator {
 public:
  std::string name() const override { return "scripted"; }
  std::vector<int64_t> propose(const std::vector<int64_t>& history, int64_t max,
                               const std::function<size_t(const std::vector<int64_t>&)>&) override {
    const Script& s = script();
    const size_t at = history.size() - s.prompt_length;  // tokens generated so far
    std::vector<int64_t> out;
    for (size_t i = 0; i < 3 && static_cast<int64_t>(out.size()) < max && at + i < s.tokens.size();
         ++i) {
      out.push_back(i == 2 ? (s.tokens[at + i] + 1) % s.vocab : s.tokens[at + i]);
    }
    return out;
  }
};

void register_scripted() {
  if (candidate_registry().contains("scripted")) return;
  CandidateGeneratorInfo info;
  info.name = "scripted";
  info.description = "the test's script";
  info.create = [](const nlohmann::json&, const PartContext&) {
    return std::make_unique<ScriptedCandidates>();
  };
  candidate_registry().add(std::move(info));
}

// Speculative decoding on every backend: verify() gives the logits decode() gives position by
// position, rewind() forgets the positions dropped, and prompt lookup changes no token of greedy
// search or of seeded sampling (each kept token is one decision and one draw, as without it).
TEST_P(BackendConformance, VerifyRewindAndPromptLookupChangeNoToken) {
  const auto& [variant, which] = GetParam();
  const auto model = testing::test_model(which, 11);
  auto backend = under_test(model);
  auto reference = BackendRegistry::instance().create("eager", model, BackendOptions("eager", {}));

  // verify([x, a, b, c]) against decode x, a, b, c one at a time; then rewind past b and c and
  // decode y, against decode x, a, y.
  const auto ids = at::tensor({3, 4, 5, 6, 7}, at::kLong).unsqueeze(0);
  const auto one = [](int64_t t) { return at::tensor({t}, at::kLong).unsqueeze(0); };
  const auto pos = [](int64_t p) { return at::tensor({p}, at::kLong).unsqueeze(0); };
  const auto yes = at::ones({1, 1}, at::kBool);
  for (auto* be : {reference.get(), backend.get()}) {
    be->prepare(1, 26);  // what the generations below need (cuda_graph keeps its first size)
    be->prefill(StepInputs{ids, at::arange(5, at::kLong).unsqueeze(0), ids.ne(-1), {}});
  }
  // Every built-in configuration scores the candidates in one forward (aoti through its program's
  // `keep` input, cuda_graph through its step's verify), not one decode step per position.
  EXPECT_TRUE(backend->verifies_at_once()) << variant.label;
  const auto fed = at::tensor({8, 9, 10, 11}, at::kLong).unsqueeze(0);
  const auto v = backend->verify(
      StepInputs{fed, at::arange(5, 9, at::kLong).unsqueeze(0), at::ones({1, 4}, at::kBool), {}});
  ASSERT_EQ(v.sizes(), (std::vector<int64_t>{1, 4, model->config().vocab_size}));
  EXPECT_EQ(backend->length(), 9);
  std::vector<at::Tensor> steps;
  for (int64_t i = 0; i < 4; ++i)
    steps.push_back(reference->decode(StepInputs{one(8 + i), pos(5 + i), yes, {}}));
  const auto sequential = at::stack(steps, 1);
  EXPECT_TRUE(at::allclose(v, sequential, 1e-4, 1e-5))
      << (v - sequential).abs().max().item<float>();
  backend->rewind(2);
  EXPECT_EQ(backend->length(), 7);
  const auto after = backend->decode(StepInputs{one(12), pos(7), yes, {}});
  auto fresh = BackendRegistry::instance().create("eager", model, BackendOptions("eager", {}));
  fresh->prepare(1, 26);
  fresh->prefill(StepInputs{ids, at::arange(5, at::kLong).unsqueeze(0), ids.ne(-1), {}});
  fresh->decode(StepInputs{one(8), pos(5), yes, {}});
  fresh->decode(StepInputs{one(9), pos(6), yes, {}});
  const auto want = fresh->decode(StepInputs{one(12), pos(7), yes, {}});
  EXPECT_TRUE(at::allclose(after, want, 1e-4, 1e-5)) << (after - want).abs().max().item<float>();

  // Generation: a prompt that repeats itself, so that candidates are proposed from the first
  // step; greedy and seeded sampling against the reference without candidates.
  const std::vector<std::vector<int64_t>> prompt = {{3, 4, 5, 6, 3, 4, 5, 6, 3, 4}};
  ResolvedSettings plain;
  plain.max_new_tokens = 16;
  for (const bool sample : {false, true}) {
    ResolvedSettings g = plain;
    g.do_sample = sample;
    g.top_k = 0;
    g.temperature = 0.3;  // sharp enough for the random models to repeat, so lookups match
    ResolvedSettings lookup = g;
    lookup.prompt_lookup_num_tokens = 3;
    const std::string what = sample ? "sampling" : "greedy";
    if (variant.loop.whole_step == LoopOptions::WholeStep::kOn) {
      EXPECT_THROW(Generator(lookup, {}, variant.loop).generate(*backend, prompt), Error) << what;
      continue;
    }
    at::manual_seed(5);
    const auto a = Generator(g).generate(*reference, prompt);
    at::manual_seed(5);
    const auto b = Generator(lookup, {}, variant.loop).generate(*backend, prompt);
    EXPECT_EQ(a.outputs[0][0].tokens, b.outputs[0][0].tokens) << what;
    EXPECT_EQ(a.steps, b.steps) << what;
    EXPECT_GT(b.verify_steps, 0) << what;
    // Every token after the first came from a verify forward.
    EXPECT_LE(b.verify_steps, b.steps - 1) << what;
    // The scripted candidates: two kept and one rewound per verify, the same tokens.
    register_scripted();
    script() = Script{a.outputs[0][0].tokens, prompt[0].size(), model->config().vocab_size};
    ResolvedSettings scripted = g;
    scripted.candidate_generator = PartSpec{"scripted", nlohmann::json::object()};
    at::manual_seed(5);
    const auto c = Generator(scripted, {}, variant.loop).generate(*backend, prompt);
    EXPECT_EQ(a.outputs[0][0].tokens, c.outputs[0][0].tokens) << what << " (scripted)";
    EXPECT_EQ(c.steps, a.steps) << what;
    EXPECT_GT(c.candidates_accepted, 0) << what;
    EXPECT_LT(c.candidates_accepted, c.candidates_proposed) << what;
    EXPECT_EQ(c.steps - 1, c.verify_steps + c.candidates_accepted) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Registry, BackendConformance,
                         ::testing::Combine(::testing::ValuesIn(variants()),
                                            ::testing::Values("tiny", "gpt2-a", "gpt2-b", "gptj-a",
                                                              "llama-a", "llama-b", "mistral-a",
                                                              "qwen2-a", "gemma3-a")),
                         [](const auto& info) {
                           std::string m = std::get<1>(info.param);
                           std::replace(m.begin(), m.end(), '-', '_');
                           return std::get<0>(info.param).label + "_" + m;
                         });

}  // namespace
}  // namespace gengraph

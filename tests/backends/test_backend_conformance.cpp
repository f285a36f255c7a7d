// One suite over every registered backend configuration: tokens identical to the eager reference
// (growing cache) and logits within tolerance, on CPU. CUDA-only backends skip without a GPU.
#include <ATen/ATen.h>
#include <gengraph/cli.h>
#include <gtest/gtest.h>

#include "backends/register_builtin.h"
#include "framework/backend/backend_registry.h"
#include "framework/decoding/generator.h"
#include "framework/model/loader.h"
#include "framework/util/device.h"
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
    } else if (name == "cuda_graph") {
      // Captured only on CUDA (tests/backends/test_cuda_graph.cpp); uncaptured, its static-buffer
      // step (bucket padding rows, the beam reorder inside the step) runs on any device.
      v.push_back({"cuda_graph_uncaptured", name, {{"capture", "false"}}});
      v.push_back({"cuda_graph_uncaptured_trace", name, {{"capture", "false"}, {"step", "trace"}}});
      v.push_back({"cuda_graph_uncaptured_aoti", name, {{"capture", "false"}, {"step", "aoti"}}});
      // The whole decoding step over the static step, uncaptured: what a whole-step graph replays.
      v.push_back(
          {"whole_step_uncaptured", name, {{"capture", "false"}}, true, whole_step_uncaptured()});
    } else {
      v.push_back({name, name, {}});
    }
  }
  return v;
}

class BackendConformance : public ::testing::TestWithParam<std::tuple<Variant, std::string>> {};

TEST_P(BackendConformance, MatchesEagerTokensAndLogits) {
  const auto& [variant, which] = GetParam();
  const auto& info = BackendRegistry::instance().get(variant.backend);
  const BackendOptions options(variant.backend, variant.options);
  if (info.unavailable_reason && !info.unavailable_reason(options).empty()) {
    GTEST_SKIP() << variant.backend << ": " << info.unavailable_reason(options);
  }
  const auto model = testing::test_model(which, 11);
  auto reference = BackendRegistry::instance().create("eager", model, BackendOptions("eager", {}));
  LoadOptions form;
  form.fused = variant.fused;
  auto backend = BackendRegistry::instance().create(
      variant.backend, variant.fused ? model : testing::test_model(which, 11, form),
      BackendOptions(variant.backend, variant.options));
  const std::vector<std::vector<int64_t>> prompts = {{3, 4, 5, 6, 7, 8}, {9}, {10, 11, 12}};
  GenerationConfig g;
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

INSTANTIATE_TEST_SUITE_P(Registry, BackendConformance,
                         ::testing::Combine(::testing::ValuesIn(variants()),
                                            ::testing::Values("tiny", "gpt2-a", "gpt2-b", "gptj-a",
                                                              "llama-a", "llama-b", "mistral-a",
                                                              "qwen2-a")),
                         [](const auto& info) {
                           std::string m = std::get<1>(info.param);
                           std::replace(m.begin(), m.end(), '-', '_');
                           return std::get<0>(info.param).label + "_" + m;
                         });

}  // namespace
}  // namespace gengraph

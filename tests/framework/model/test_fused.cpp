// The fused form of every architecture (ModelConfig::fused, the default) against transformers'
// formulation op by op (fused = false): the same logits, the checkpoint's tensors unchanged in
// weights(), one copy of the weights, and fewer kernels per step. And the shared prefill of beams.
#include <ATen/ATen.h>
#include <gengraph/cli.h>
#include <gtest/gtest.h>

#include <set>

#include "backends/register_builtin.h"
#include "framework/backend/backend_registry.h"
#include "framework/cache/kv_cache.h"
#include "framework/model/loader.h"
#include "framework/util/op_counter.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

// The fixture models cover every architecture and option the fused form handles differently:
// GPT-2, GPT-J (partial rotary), LLaMA (grouped-query attention, biases), Mistral and Qwen2
// (sliding windows), Gemma 3 (q/k norms, local and global layers with their own rope).
const std::vector<std::string> kModels = {"tiny",    "gpt2-a",    "gptj-a",  "llama-a",
                                          "llama-b", "mistral-a", "qwen2-a", "gemma3-a"};

std::shared_ptr<const CausalLM> model_in_form(const std::string& which, bool fused) {
  LoadOptions load;
  load.fused = fused;
  return testing::test_model(which, 5, load);
}

// Kernels of one decode step of one row.
int64_t decode_kernels(const CausalLM& m) {
  StaticCache cache(m.cache_shape(1, 8), at::TensorOptions().dtype(m.dtype()));
  const auto ids = at::tensor({3, 4, 5}, at::kLong).reshape({1, 3});
  const auto valid = at::ones({1, 3}, at::kBool);
  const auto first = run_forward_step(m, cache, ids, at::arange(3, at::kLong).unsqueeze(0),
                                      at::arange(3, at::kLong), valid);
  AtenOpCounter counter;
  run_forward_step(m, cache, first.argmax(-1).unsqueeze(1), at::full({1, 1}, 3, at::kLong),
                   at::tensor({3}, at::kLong), at::ones({1, 1}, at::kBool));
  return counter.kernels();
}

// Prefill of two left-padded rows, then three decode steps with a beam-style reorder: the logits
// of every call, concatenated [calls * rows, vocab].
at::Tensor step_logits(const CausalLM& m) {
  StaticCache cache(m.cache_shape(2, 16), at::TensorOptions().dtype(m.dtype()));
  const auto ids = at::tensor({0, 0, 3, 4, 5, 6, 7, 8}, at::kLong).reshape({2, 4});
  const auto valid = ids.ne(0);
  auto pos = valid.to(at::kLong).cumsum(1).sub(1).clamp_min(0);
  std::vector<at::Tensor> out = {
      run_forward_step(m, cache, ids, pos, at::arange(4, at::kLong), valid)};
  auto next = out.back().argmax(-1).unsqueeze(1);
  pos = pos.select(1, 3).unsqueeze(1);
  for (int64_t s = 0; s < 3; ++s) {
    pos = pos + 1;
    cache.reorder(at::tensor({int64_t{1}, s % 2}, at::kLong));
    const auto slot = at::tensor({4 + s}, at::kLong);
    out.push_back(run_forward_step(m, cache, next, pos, slot, at::ones({2, 1}, at::kBool)));
    next = out.back().argmax(-1).unsqueeze(1);
  }
  return at::cat(out);
}

TEST(FusedForm, SameLogitsAsTheUnfusedFormOnEveryArchitecture) {
  for (const auto& which : kModels) {
    const auto fused = model_in_form(which, true), plain = model_in_form(which, false);
    ASSERT_TRUE(fused->config().fused);
    ASSERT_FALSE(plain->config().fused);
    const auto a = step_logits(*fused), b = step_logits(*plain);
    EXPECT_TRUE(at::allclose(a, b, 1e-5, 1e-5))
        << which << ": max difference " << (a - b).abs().max().item<float>();
    // Fewer kernels in the decode step (the projections fused, the mask made once per step).
    EXPECT_LT(decode_kernels(*fused), decode_kernels(*plain)) << which;
  }
}

TEST(FusedForm, WeightsKeepTheirValuesAndAreStoredOnce) {
  for (const auto& which : kModels) {
    const auto fused = model_in_form(which, true), plain = model_in_form(which, false);
    ASSERT_EQ(fused->weights().size(), plain->weights().size()) << which;
    int64_t fused_bytes = 0, plain_bytes = 0;
    std::set<const void*> storages;
    for (const auto& [name, t] : plain->weights()) {
      const at::Tensor& f = fused->weights().at(name);
      EXPECT_EQ(f.sizes(), t.sizes()) << which << ": " << name;
      EXPECT_TRUE(at::equal(f, t)) << which << ": " << name;
      plain_bytes += t.nbytes();
      if (storages.insert(f.storage().data()).second) fused_bytes += f.storage().nbytes();
    }
    // One copy: the fused tensors own storages that the checkpoint names view, no more bytes.
    EXPECT_EQ(fused_bytes, plain_bytes) << which;
    // GPT-2's c_attn is fused in the checkpoint already; the other architectures fuse at load.
    if (fused->config().model_type != "gpt2") {
      EXPECT_LT(storages.size(), plain->weights().size()) << which;
    }
  }
}

}  // namespace
}  // namespace gengraph

namespace gengraph {
namespace {

// A prefill whose rows stand for several each (the beams of one input): the eager and aoti
// backends and cuda_graph's eager and compiled steps run each prompt once and copy its cache; the
// logits and the next step equal those of a prefill of every row. A backend that does not share
// (cuda_graph's traced step) repeats the rows itself.
TEST(SharedPrefill, EqualsAPrefillOfEveryRow) {
  register_builtin_backends();
  install_aoti_export_tool();
  // The conformance suite's llama-a: its aoti package is built once for both.
  const auto model = testing::test_model("llama-a", 11);
  const auto ids = at::tensor({0, 3, 4, 5, 6, 7}, at::kLong).reshape({2, 3});
  const auto valid = ids.ne(0);
  const auto pos = valid.to(at::kLong).cumsum(1).sub(1).clamp_min(0);
  const int64_t copies = 3, rows = 6;
  const auto each = [&](const at::Tensor& t) { return t.repeat_interleave(copies, 0); };
  for (const auto& [name, options] :
       std::vector<std::pair<std::string, std::map<std::string, std::string>>>{
           {"eager", {{"cache", "growing"}}},
           {"eager", {{"cache", "static"}}},
           {"aoti", {}},
           {"cuda_graph", {{"capture", "false"}}},  // 6 rows in bucket 8: 2 padding rows
           {"cuda_graph", {{"capture", "false"}, {"step", "aoti"}}},
           {"cuda_graph", {{"capture", "false"}, {"step", "trace"}}}}) {
    auto shared = BackendRegistry::instance().create(name, model, BackendOptions(name, options));
    auto full = BackendRegistry::instance().create("eager", model, BackendOptions("eager", {}));
    // A traced prefill gets every row.
    EXPECT_EQ(shared->shares_prefill(), !options.count("step") || options.at("step") != "trace");
    shared->prepare(rows, 8);
    full->prepare(rows, 8);
    const auto a = shared->prefill(StepInputs{ids, pos, valid, {}, copies});
    const auto b = full->prefill(StepInputs{each(ids), each(pos), each(valid), {}});
    ASSERT_EQ(a.sizes(), b.sizes()) << name;
    // The compiled program's kernels differ from eager's by up to the conformance suite's bound.
    const bool compiled = name == "aoti" || (options.count("step") && options.at("step") == "aoti");
    const double rtol = compiled ? 1e-4 : 1e-5, atol = compiled ? 1e-5 : 1e-6;
    EXPECT_TRUE(at::allclose(a, b, rtol, atol)) << name;
    // A decode step with a beam reorder reads the copied caches.
    const auto next = b.argmax(-1).unsqueeze(1);
    const auto p2 = each(pos).select(1, 2).unsqueeze(1) + 1;
    const auto parents = at::tensor({2, 0, 1, 5, 5, 3}, at::kLong);
    const auto da = shared->decode(StepInputs{next, p2, at::ones({rows, 1}, at::kBool), parents});
    const auto db = full->decode(StepInputs{next, p2, at::ones({rows, 1}, at::kBool), parents});
    EXPECT_TRUE(at::allclose(da, db, rtol, atol)) << name;
    // Copies that do not divide the prepared rows are refused.
    shared->prepare(rows, 8);
    EXPECT_NE(testing::error_of([&] {
                shared->prefill(StepInputs{ids, pos, valid, {}, 4});
              }).find("copies 4 does not divide the prepared 6 rows"),
              std::string::npos);
  }
  // share_prefill: false prefills every row (for comparison), with the same logits.
  for (const auto& name : {"eager", "aoti", "cuda_graph"}) {
    std::map<std::string, std::string> options = {{"share_prefill", "false"}};
    if (std::string(name) == "cuda_graph") options["capture"] = "false";
    auto unshared = BackendRegistry::instance().create(name, model, BackendOptions(name, options));
    EXPECT_FALSE(unshared->shares_prefill()) << name;
    unshared->prepare(rows, 8);
    auto full = BackendRegistry::instance().create("eager", model, BackendOptions("eager", {}));
    full->prepare(rows, 8);
    const auto a = unshared->prefill(StepInputs{ids, pos, valid, {}, copies});
    const auto b = full->prefill(StepInputs{each(ids), each(pos), each(valid), {}});
    EXPECT_TRUE(at::allclose(a, b, 1e-4, 1e-5)) << name;
  }

  EXPECT_NE(testing::error_of([&] {
              BackendRegistry::instance().create(
                  "eager", model, BackendOptions("eager", {{"share_prefill", "no"}}));
            }).find("share_prefill"),
            std::string::npos);
}

}  // namespace
}  // namespace gengraph

#include "engine/conformance.h"

#include <ATen/ATen.h>

#include <functional>
#include <sstream>

#include "backends/register_builtin.h"
#include "framework/backend/backend_registry.h"
#include "framework/decoding/generator.h"
#include "framework/model/loader.h"
#include "framework/util/error.h"
#include "framework/util/path_errors.h"

namespace gengraph {

std::vector<std::pair<std::string, ResolvedSettings>> every_strategy(const ResolvedSettings& base) {
  ResolvedSettings sample = base;
  sample.do_sample = true;
  sample.top_k = 20;
  ResolvedSettings beam = base;
  beam.num_beams = 3;
  beam.num_return_sequences = 2;
  ResolvedSettings beam_sample = beam;
  beam_sample.do_sample = true;
  beam_sample.early_stopping = EarlyStopping::kTrue;
  ResolvedSettings diverse = beam;
  diverse.num_beams = 4;
  diverse.num_beam_groups = 2;
  diverse.diversity_penalty = 0.5;
  return {{"greedy", base},
          {"sample", sample},
          {"beam", beam},
          {"beam_sample", beam_sample},
          {"diverse_beam", diverse}};
}

namespace {

std::shared_ptr<const CausalLM> conformance_model(const std::string& which, uint64_t seed) {
  ModelSource s;
  if (checked_is_directory(which, "model folder")) {
    s.path = which;
  } else {
    s.preset = which.rfind("preset:", 0) == 0 ? which.substr(7) : which;
    s.seed = seed;
  }
  return load_model(s).model;
}

std::string max_difference(const at::Tensor& a, const at::Tensor& b) {
  if (!a.sizes().equals(b.sizes())) {
    std::ostringstream o;
    o << "shape " << b.sizes() << " against eager's " << a.sizes();
    return o.str();
  }
  std::ostringstream o;
  o << "largest difference " << (a.to(at::kFloat) - b.to(at::kFloat)).abs().max().item<float>();
  return o.str();
}

// One check's record; `body` returns "" when it passed, else what differed. An Error from the
// backend fails the check with its message; "skip: ..." marks a check the backend cannot take.
nlohmann::json run_check(const std::string& model, const std::string& check,
                         const std::function<std::string()>& body) {
  std::string detail;
  try {
    detail = body();
  } catch (const std::exception& e) {
    detail = std::string("error: ") + e.what();
  }
  const bool skipped = detail.rfind("skip: ", 0) == 0;
  return {{"model", model},
          {"check", check},
          {"passed", detail.empty() || skipped},
          {"skipped", skipped},
          {"detail", skipped ? detail.substr(6) : detail}};
}

std::string compare_generations(const Generation& a, const Generation& b, double tol) {
  if (a.steps != b.steps) {
    return std::to_string(b.steps) + " steps against eager's " + std::to_string(a.steps);
  }
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    if (a.outputs[i].size() != b.outputs[i].size()) {
      return "input " + std::to_string(i) + ": " + std::to_string(b.outputs[i].size()) +
             " sequences against eager's " + std::to_string(a.outputs[i].size());
    }
    for (size_t j = 0; j < a.outputs[i].size(); ++j) {
      const Sequence &x = a.outputs[i][j], &y = b.outputs[i][j];
      if (x.tokens != y.tokens) {
        return "input " + std::to_string(i) + " sequence " + std::to_string(j) +
               ": other tokens than eager's";
      }
      if (x.score && (!y.score || std::abs(*x.score - *y.score) > tol)) {
        return "input " + std::to_string(i) + " sequence " + std::to_string(j) + ": score " +
               (y.score ? std::to_string(*y.score) : std::string("none")) + " against eager's " +
               std::to_string(*x.score);
      }
    }
  }
  return "";
}

}  // namespace

nlohmann::json check_backend_conformance(const std::string& backend,
                                         const std::map<std::string, std::string>& options,
                                         const ConformanceOptions& how) {
  register_builtin_backends();  // eager is the reference
  auto& registry = BackendRegistry::instance();
  const BackendOptions bo(backend, options);
  registry.validate(backend, bo, c10::Device(c10::kCPU));
  if (how.models.empty()) throw Error("check_backend: models: expected at least one model");
  nlohmann::json checks = nlohmann::json::array();
  const auto close = [&](const at::Tensor& a, const at::Tensor& b) {
    return a.sizes().equals(b.sizes()) &&
           at::allclose(a.to(at::kFloat), b.to(at::kFloat), how.rtol, how.atol);
  };
  for (const std::string& which : how.models) {
    const auto model = conformance_model(which, how.seed);
    const auto eager = [&] {
      return registry.create("eager", model, BackendOptions("eager", {{"cache", "growing"}}));
    };
    const auto under_test = [&] { return registry.create(backend, model, bo); };

    checks.push_back(run_check(which, "tokens", [&]() -> std::string {
      auto reference = eager();
      auto tested = under_test();
      const std::vector<std::vector<int64_t>> prompts = {{3, 4, 5, 6, 7, 8}, {9}, {10, 11, 12}};
      ResolvedSettings g;
      g.max_new_tokens = how.max_new_tokens;
      for (const auto& [what, config] : every_strategy(g)) {
        at::manual_seed(17);
        const auto a = Generator(config).generate(*reference, prompts);
        at::manual_seed(17);
        const auto b = Generator(config).generate(*tested, prompts);
        const std::string diff = compare_generations(a, b, how.score_tolerance);
        if (!diff.empty()) return what + ": " + diff;
      }
      return "";
    }));

    checks.push_back(run_check(which, "logits", [&]() -> std::string {
      auto reference = eager();
      auto tested = under_test();
      const auto ids = at::tensor({0, 0, 3, 4, 5, 6}, at::kLong).reshape({2, 3});
      const auto valid = ids.ne(0);
      const auto pos = valid.to(at::kLong).cumsum(1).sub(1).clamp_min(0);
      reference->prepare(2, 8);
      tested->prepare(2, 8);
      const auto la = reference->prefill(StepInputs{ids, pos, valid, {}});
      const auto lb = tested->prefill(StepInputs{ids, pos, valid, {}});
      if (!close(la, lb)) return "prefill: " + max_difference(la, lb);
      const auto next = la.argmax(-1).unsqueeze(1);
      const auto p2 = pos.select(1, 2).unsqueeze(1) + 1;
      const auto parents = at::tensor({1, 1}, at::kLong);
      const auto da = reference->decode(StepInputs{next, p2, at::ones({2, 1}, at::kBool), parents});
      const auto db = tested->decode(StepInputs{next, p2, at::ones({2, 1}, at::kBool), parents});
      if (!close(da, db)) return "decode after a beam reorder: " + max_difference(da, db);
      return "";
    }));

    checks.push_back(run_check(which, "speculative", [&]() -> std::string {
      auto reference = eager();
      auto tested = under_test();
      const auto ids = at::tensor({3, 4, 5, 6, 7}, at::kLong).unsqueeze(0);
      const auto one = [](int64_t t) { return at::tensor({t}, at::kLong).unsqueeze(0); };
      const auto yes = at::ones({1, 1}, at::kBool);
      const auto start = [&](ForwardBackend& be) {
        be.prepare(1, 26);
        be.prefill(StepInputs{ids, at::arange(5, at::kLong).unsqueeze(0), ids.ne(-1), {}});
      };
      start(*reference);
      start(*tested);
      const auto fed = at::tensor({8, 9, 10}, at::kLong).unsqueeze(0);
      const auto v = tested->verify(StepInputs{
          fed, at::arange(5, 8, at::kLong).unsqueeze(0), at::ones({1, 3}, at::kBool), {}});
      std::vector<at::Tensor> steps;
      for (int64_t i = 0; i < 3; ++i)
        steps.push_back(reference->decode(StepInputs{one(8 + i), one(5 + i), yes, {}}));
      const auto sequential = at::stack(steps, 1);
      if (!close(sequential, v)) return "verify: " + max_difference(sequential, v);
      try {
        tested->rewind(2);
      } catch (const Error& e) {
        return std::string("skip: rewind refused: ") + e.what();
      }
      const auto after = tested->decode(StepInputs{one(12), one(6), yes, {}});
      auto fresh = eager();
      start(*fresh);
      fresh->decode(StepInputs{one(8), one(5), yes, {}});
      const auto want = fresh->decode(StepInputs{one(12), one(6), yes, {}});
      if (!close(want, after)) return "decode after rewind: " + max_difference(want, after);
      ResolvedSettings g;
      g.max_new_tokens = 16;
      g.do_sample = false;
      ResolvedSettings lookup = g;
      lookup.prompt_lookup_num_tokens = 3;
      const std::vector<std::vector<int64_t>> prompt = {{3, 4, 5, 6, 3, 4, 5, 6, 3, 4}};
      const auto a = Generator(g).generate(*reference, prompt);
      const auto b = Generator(lookup).generate(*tested, prompt);
      const std::string diff = compare_generations(a, b, how.score_tolerance);
      return diff.empty() ? "" : "greedy with prompt lookup: " + diff;
    }));
  }
  bool passed = true;
  for (const auto& c : checks) passed = passed && c["passed"].get<bool>();
  return {{"backend", backend}, {"options", options}, {"passed", passed}, {"checks", checks}};
}

}  // namespace gengraph

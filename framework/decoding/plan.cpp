#include "framework/decoding/plan.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "framework/backend/forward_backend.h"
#include "framework/backend/options.h"
#include "framework/decoding/generation_defaults.h"
#include "framework/model/causal_lm.h"
#include "framework/util/error.h"

namespace gengraph {

const char* const kGenerationMemoryAdvice =
    "use fewer or shorter prompts, a smaller num_beams or num_return_sequences, or fewer new "
    "tokens (max_new_tokens)";

CacheLayout cache_layout(const std::string& backend,
                         const std::map<std::string, std::string>& options) {
  CacheLayout layout;
  const auto cache = options.find("cache"), share = options.find("share_prefill");
  const bool paged = backend == "eager" && cache != options.end() && cache->second == "paged";
  layout.static_cache =
      backend != "eager" || paged || (cache != options.end() && cache->second == "static");
  // eager's paged cache repeats a prompt per row (it refuses share_prefill: true).
  layout.shared_prefill = !paged && (share == options.end() || share->second != "false");
  // Rings where the backend's cache takes them and its options leave them on.
  const auto step = options.find("step");
  const bool eager_step = backend == "eager" ? !paged
                                             : backend == "cuda_graph" && (step == options.end() ||
                                                                           step->second == "eager");
  if (eager_step) {
    try {
      layout.ring_spare = read_ring_spare(BackendOptions(backend, options));
    } catch (const std::exception&) {
      // The backend refuses the value by name when it is made.
    }
  }
  return layout;
}

CacheLayout cache_layout(const ForwardBackend& backend) {
  CacheLayout layout = cache_layout(backend.name(), {});
  const BackendReport report = backend.report();
  const auto static_cache = report.find("static_cache");
  if (static_cache != report.end()) layout.static_cache = static_cache->second != 0.0;
  layout.shared_prefill = backend.shares_prefill();
  const auto spare = report.find("ring_spare");
  layout.ring_spare = spare != report.end() ? static_cast<int64_t>(spare->second) : -1;
  return layout;
}

PlanTarget plan_target(const ForwardBackend& backend, nlohmann::json generation_defaults) {
  const CausalLM& model = backend.model();
  PlanTarget t;
  t.config = &model.config();
  t.generation_defaults = std::move(generation_defaults);
  t.source = model.config().source;
  t.dtype = model.dtype();
  t.device = model.device();
  t.model = &model;
  t.cache = cache_layout(backend);
  return t;
}

namespace {

void check_prompt_ids(int64_t vocab_size, const std::vector<std::vector<int64_t>>& prompts) {
  if (prompts.empty()) throw Error("generate: no input prompts");
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) throw Error("input " + std::to_string(i) + ": empty prompt");
    for (size_t j = 0; j < prompts[i].size(); ++j) {
      const int64_t id = prompts[i][j];
      if (id < 0 || id >= vocab_size) {
        throw Error("input " + std::to_string(i) + " token " + std::to_string(j) + ": id " +
                    std::to_string(id) + " is outside the vocabulary [0, " +
                    std::to_string(vocab_size) + ")");
      }
    }
  }
}

int64_t longest(const std::vector<std::vector<int64_t>>& prompts) {
  size_t n = 0;
  for (const auto& p : prompts) n = std::max(n, p.size());
  return static_cast<int64_t>(n);
}

// The prompts against the model: ids inside the vocabulary (and the settings' token ids), the
// longest prompt plus the new tokens within the context. Returns the total length.
int64_t check_lengths(const ModelConfig& mc, const ResolvedSettings& g,
                      const std::vector<std::vector<int64_t>>& prompts) {
  g.validate_for_vocab(mc.vocab_size);
  check_prompt_ids(mc.vocab_size, prompts);
  const int64_t prompt_len = longest(prompts);
  const int64_t max_length = g.resolve_max_length(prompt_len, mc.max_positions);
  if (prompt_len >= mc.max_positions) {
    throw Error("the longest prompt has " + std::to_string(prompt_len) +
                " tokens but the model's context is " + std::to_string(mc.max_positions) +
                " positions (" + mc.source + ")");
  }
  if (max_length > mc.max_positions) {
    throw Error("the longest prompt (" + std::to_string(prompt_len) + " tokens) plus " +
                std::to_string(max_length - prompt_len) +
                " new tokens exceeds the model's context of " + std::to_string(mc.max_positions) +
                " positions (" + mc.source + ")");
  }
  return max_length;
}

// What the pipeline's parts can do against what the settings ask of them.
void check_parts(const ResolvedSettings& config, const Pipeline& pipe, int64_t inputs) {
  if (config.output_scores && !pipe.strategy->scores_tokens()) {
    throw Error("output_scores: the '" + pipe.strategy->name() +
                "' strategy does not score its tokens (SearchStrategy::scores_tokens); the "
                "built-in greedy search, sampling, beam search and beam sampling do");
  }
  if (config.top_logprobs > pipe.strategy->top_logprobs()) {
    throw Error("top_logprobs: expected a strategy that gives " +
                std::to_string(config.top_logprobs) + " alternatives per token, found the '" +
                pipe.strategy->name() + "' strategy, which gives " +
                std::to_string(pipe.strategy->top_logprobs()) +
                " (SearchStrategy::top_logprobs); the built-in greedy search and sampling do");
  }
  if (!pipe.candidates) return;
  const std::string what = "speculative decoding ('" + pipe.candidates->name() + "' candidates)";
  const int64_t per_input = pipe.strategy->rows_per_input();
  if (inputs * per_input != 1) {
    throw Error(what + " verifies one sequence at a time, as transformers' assisted generation " +
                "does: found " + std::to_string(inputs) + " prompt(s) x " +
                std::to_string(per_input) + " sequence(s); generate each prompt alone");
  }
  if (!pipe.strategy->streams()) {
    throw Error(what + ": the '" + pipe.strategy->name() +
                "' strategy does not choose each token for good as it goes "
                "(SearchStrategy::streams), so candidates cannot be checked position by "
                "position; use greedy search or sampling");
  }
}

}  // namespace

GenerationPlan plan_generation(const PlanTarget& target, const nlohmann::json& settings,
                               const std::string& where,
                               const std::vector<std::vector<int64_t>>& prompts, int64_t inputs) {
  std::vector<std::string> ignored;
  ResolvedSettings config = resolve_generation(*target.config, target.generation_defaults,
                                               target.source, settings, where, &ignored);
  GenerationPlan plan = plan_generation(target, std::move(config), prompts, inputs);
  plan.ignored_keys = std::move(ignored);
  return plan;
}

GenerationPlan plan_generation(const PlanTarget& target, ResolvedSettings config,
                               const std::vector<std::vector<int64_t>>& prompts, int64_t inputs) {
  const ModelConfig& mc = *target.config;
  GenerationPlan plan;
  plan.inputs = inputs > 0 ? inputs : static_cast<int64_t>(prompts.size());
  plan.max_length = check_lengths(mc, config, prompts);
  plan.prompt_length = longest(prompts);
  Pipeline pipe =
      build_pipeline(config, plan.max_length, plan.prompt_length, mc.vocab_size, target.model);
  plan.rows_per_input = pipe.strategy->rows_per_input();
  check_parts(config, pipe, plan.inputs);

  // What the generation will hold (KV cache, the prefill's masks and activations, a decode step,
  // the search's state; the weights when they are not loaded yet), before any of it is allocated.
  GenerationShape shape;
  shape.inputs = static_cast<double>(plan.inputs);
  shape.rows_per_input = static_cast<double>(plan.rows_per_input);
  shape.prompt_length = static_cast<double>(plan.prompt_length);
  shape.max_length = static_cast<double>(plan.max_length);
  shape.beam_search = config.num_beams > 1;
  shape.shared_prefill = target.cache.shared_prefill;
  shape.static_cache = target.cache.static_cache;
  shape.ring_spare = target.cache.ring_spare;
  plan.memory = estimate_generation_memory(mc, target.dtype, shape, target.architecture);
  plan.memory_what = "generating " + std::to_string(plan.inputs * plan.rows_per_input) + " rows (" +
                     std::to_string(plan.inputs) + " prompts x " +
                     std::to_string(plan.rows_per_input) + ") of " +
                     std::to_string(plan.max_length) + " positions";
  if (target.model != nullptr) {
    check_memory(plan.memory_what + " (" + plan.memory.breakdown() + ")", plan.memory.total(),
                 target.device, kGenerationMemoryAdvice);
  }
  plan.settings = config.to_json();
  plan.config = std::move(config);
  plan.pipeline = std::move(pipe);
  return plan;
}

void check_planned_prompts(const GenerationPlan& plan, int64_t vocab_size,
                           const std::vector<std::vector<int64_t>>& prompts) {
  check_prompt_ids(vocab_size, prompts);
  const int64_t count = static_cast<int64_t>(prompts.size()), len = longest(prompts);
  if (count != plan.inputs || len != plan.prompt_length) {
    throw Error("generate: the plan was made for " + std::to_string(plan.inputs) +
                " prompt(s) of up to " + std::to_string(plan.prompt_length) + " tokens; found " +
                std::to_string(count) + " of up to " + std::to_string(len) +
                " (make a plan for these prompts)");
  }
}

}  // namespace gengraph

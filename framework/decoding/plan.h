// A generation decided before any work: the settings resolved once (transformers' defaults, the
// model's generation_config.json, the caller's keys), the prompts checked against the vocabulary
// and the context, the pipeline built, the memory estimated and, for a loaded model, checked.
// Every boundary makes its plan here and nowhere else: the Engine (plan and generate, and through
// it the Python package), an experiment's validate/run/submit (before the weights are loaded,
// from the model's configuration), a draft model's own generations. The loop then executes the
// plan as it is: nothing below resolves settings, builds a pipeline or estimates memory again
// (docs/architecture.md#the-plan).
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "framework/decoding/pipeline.h"
#include "framework/decoding/resolved_settings.h"
#include "framework/model/memory.h"
#include "framework/model/model_config.h"

namespace gengraph {

class CausalLM;
class ForwardBackend;
struct Architecture;

// How a backend lays out the KV cache, as far as the memory estimate needs it.
struct CacheLayout {
  // Preallocated for max_length (every backend but eager, and eager with cache: static).
  bool static_cache = false;
  // The prompt runs once per input and its cache is copied to the input's rows.
  bool shared_prefill = true;
  // Sliding-window layers in rings of window + ring_spare slots (eager's growing and static
  // caches, cuda_graph's eager step: option window_rings); -1: at the whole length.
  int64_t ring_spare = -1;
};

// The layout of backend `backend` with `options` (as in YAML), before it exists: the one place
// that knows which backends preallocate.
CacheLayout cache_layout(const std::string& backend,
                         const std::map<std::string, std::string>& options);
// The layout of a backend that exists (its report and shares_prefill()).
CacheLayout cache_layout(const ForwardBackend& backend);

// What a plan is made against: a loaded model, or only its configuration (validation).
struct PlanTarget {
  const ModelConfig* config = nullptr;
  nlohmann::json generation_defaults;  // the folder's generation_config.json; null without one
  std::string source;                  // "preset:NAME" or the folder, for errors
  c10::ScalarType dtype = c10::kFloat;
  c10::Device device = c10::Device(c10::kCPU);
  // The loaded model (speculative parts draft with it; the memory is checked at plan time);
  // null when only the configuration is known.
  const CausalLM* model = nullptr;
  // Without a loaded model: the architecture whose weights the estimate counts (null: left out).
  const Architecture* architecture = nullptr;
  CacheLayout cache;
};

// The target a backend drives: its model (loaded), device, dtype and cache layout.
PlanTarget plan_target(const ForwardBackend& backend, nlohmann::json generation_defaults = nullptr);

struct GenerationPlan {
  ResolvedSettings config;                // the settings, resolved
  nlohmann::json settings;                // config.to_json(): what every Generation reports
  std::vector<std::string> ignored_keys;  // generation_config.json keys gengraph does not use
  int64_t inputs = 0;                     // prompts in the batch
  int64_t rows_per_input = 1;             // num_beams, or num_return_sequences when sampling
  int64_t prompt_length = 0;              // the longest prompt (the rest are left-padded to it)
  int64_t max_length = 0;                 // prompt plus new tokens, as transformers resolves it
  MemoryEstimate memory;                  // what the generation holds besides loaded weights
  std::string memory_what;                // "generating R rows (...) of L positions"
  // Built for this plan: the first generation takes it; a later one from the same plan builds
  // its own from `config` (parts keep per-generation state).
  std::optional<Pipeline> pipeline;
  // Speculative decoding: one input and one sequence, position by position.
  bool speculative() const { return config.speculative(); }
};

// The advice an estimate that does not fit gives.
extern const char* const kGenerationMemoryAdvice;

// `settings`: generation keys (a JSON object; `where` names them in errors, e.g. "generation" or
// "<file>: generation"). `prompts`: the token ids, checked; `inputs` > 0 when they stand for a
// batch of that many prompts of the longest one's length (validation of a synthetic batch).
// Throws gengraph::Error naming the key or input at the first problem.
GenerationPlan plan_generation(const PlanTarget& target, const nlohmann::json& settings,
                               const std::string& where,
                               const std::vector<std::vector<int64_t>>& prompts,
                               int64_t inputs = -1);
// The same for settings already resolved and validated (ResolvedSettings::validate), as a
// Generator holds them (its constructor validates): they are not validated again.
GenerationPlan plan_generation(const PlanTarget& target, ResolvedSettings config,
                               const std::vector<std::vector<int64_t>>& prompts,
                               int64_t inputs = -1);

// Checks that `prompts` are what `plan` was made for (their count and the longest's length) and
// every id lies inside the vocabulary: a plan is executed for the prompts it checked.
void check_planned_prompts(const GenerationPlan& plan, int64_t vocab_size,
                           const std::vector<std::vector<int64_t>>& prompts);

}  // namespace gengraph

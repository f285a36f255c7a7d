// The one place where a ResolvedSettings becomes objects: one ordered walk over the registries
// (framework/decoding/registry.h), where gengraph's own parts come first: the processors the
// settings enable (in transformers' order) or an explicit list, the stopping criteria the settings
// enable and those listed, and the strategy named or the first the settings enable; then the part
// objects the caller passed (ResolvedSettings::processor_objects, ...).
#pragma once

#include <memory>

#include "framework/decoding/candidates/candidate_generator.h"
#include "framework/decoding/processors/logits_processor.h"
#include "framework/decoding/registry.h"
#include "framework/decoding/resolved_settings.h"
#include "framework/decoding/search/search_strategy.h"
#include "framework/decoding/stopping/stopping_criteria.h"

namespace gengraph {

struct Pipeline {
  ProcessorChain processors;
  StoppingCriteria stopping;
  std::shared_ptr<SearchStrategy> strategy;  // built here, or the caller's strategy_object
  // Speculative decoding's proposer (candidates/candidate_generator.h); null without one.
  std::shared_ptr<CandidateGenerator> candidates;
};

// `max_length`: the resolved total length (padded prompt + new tokens); `prompt_length` padded.
// `target`: the model being decoded (PartContext::target), null when only checking.
Pipeline build_pipeline(const ResolvedSettings& config, int64_t max_length, int64_t prompt_length,
                        int64_t vocab_size, const CausalLM* target = nullptr);

// The processors the settings enable, in registration order (transformers' for the built-ins;
// warpers only when sampling).
void add_processors_from_config(ProcessorChain& chain, const ResolvedSettings& config,
                                const PartContext& ctx);
// An explicit list, in the given order; errors name the entry ("generation.processors[i] 'x'").
void add_processors_from_list(ProcessorChain& chain, const std::vector<PartSpec>& specs,
                              const PartContext& ctx);

// Rows per input prompt the configured strategy uses (num_beams, or num_return_sequences when
// sampling), known before the pipeline is built.
int64_t rows_per_input(const ResolvedSettings& config);

// The pad token used for left padding and for rows that finished: pad_token_id, else the first
// EOS id (transformers' fallback), else 0.
int64_t effective_pad_token(const ResolvedSettings& config);

}  // namespace gengraph

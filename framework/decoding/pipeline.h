// The one place where a GenerationConfig becomes objects: processors (in transformers' order),
// stopping criteria and the search strategy.
#pragma once

#include <memory>

#include "framework/decoding/generation_config.h"
#include "framework/decoding/processors/logits_processor.h"
#include "framework/decoding/search/search_strategy.h"
#include "framework/decoding/stopping/stopping_criteria.h"

namespace gengraph {

struct Pipeline {
  ProcessorChain processors;
  StoppingCriteria stopping;
  std::unique_ptr<SearchStrategy> strategy;
};

// `max_length` is the resolved total length (padded prompt + new tokens).
Pipeline build_pipeline(const GenerationConfig& config, int64_t max_length);

// The pad token used for left padding and for rows that finished: pad_token_id, else the first
// EOS id (transformers' fallback), else 0.
int64_t effective_pad_token(const GenerationConfig& config);

}  // namespace gengraph

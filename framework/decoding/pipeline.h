// The one place where a GenerationConfig becomes objects: processors (in transformers' order, or
// an explicit list), stopping criteria and the search strategy.
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

struct PipelineShape {
  int64_t max_length = 0;     // resolved total length (padded prompt + new tokens)
  int64_t prompt_length = 0;  // padded
  int64_t vocab_size = 0;
};

Pipeline build_pipeline(const GenerationConfig& config, const PipelineShape& shape);

// Rows per input prompt the configured strategy uses (num_beams, or num_return_sequences when
// sampling), known before the pipeline is built.
int64_t rows_per_input(const GenerationConfig& config);

// The pad token used for left padding and for rows that finished: pad_token_id, else the first
// EOS id (transformers' fallback), else 0.
int64_t effective_pad_token(const GenerationConfig& config);

}  // namespace gengraph

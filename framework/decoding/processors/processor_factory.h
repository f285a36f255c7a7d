// Processors by name, and the chain transformers would build from a GenerationConfig.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/decoding/generation_config.h"
#include "framework/decoding/processors/logits_processor.h"

namespace gengraph {

// What processors may depend on beyond their own parameters; known once the prompt is laid out.
struct ProcessorContext {
  int64_t vocab_size = 0;
  std::vector<int64_t> eos;        // the generation's EOS ids
  int64_t max_length = 0;          // resolved total length (forced_eos fires at max_length - 1)
  int64_t prompt_length = 0;       // padded prompt length
  int64_t min_tokens_to_keep = 1;  // 1; for beam sampling n_eos + 1 (at least 2), as transformers
};

// transformers 5.17's _get_logits_processor order: processors, then (when do_sample) warpers,
// then renormalisation. gengraph's extensions sit beside their closest relatives (logit_bias after
// sequence_bias, frequency/presence after repetition_penalty).
void add_processors_from_config(ProcessorChain& chain, const GenerationConfig& config,
                                const ProcessorContext& ctx);

// An explicit list, in the given order: built-in processors (parameters: their GenerationConfig
// keys) and registered ones (processor_registry(), parameters as JSON). Unknown names and
// parameters are errors naming them.
void add_processors_from_list(ProcessorChain& chain, const std::vector<ProcessorSpec>& specs,
                              const ProcessorContext& ctx);

// The built-in processors' names, in transformers' order.
std::vector<std::string> builtin_processor_names();
// Every processor a list may name: the built-ins, then the registered ones.
std::vector<std::string> processor_names();

}  // namespace gengraph

// The registries of decoding parts (PartContext, PartInfo, Registry and the four accessors) are
// public: <gengraph/ext/registry.h>. Here: the registration of gengraph's own parts and the check
// of the parts a configuration names.
#pragma once

#include <gengraph/ext/registry.h>

#include "framework/decoding/resolved_settings.h"
#include "framework/decoding/stopping/stopping_criteria.h"
#include "framework/util/error.h"

namespace gengraph {

// gengraph's own parts (builtin_parts.cpp), registered by the registry accessors on first use:
// processors in transformers' order, the criteria max_length, max_time, stop_sequences and eos,
// the strategies group_beam_search, beam_search, sample and greedy.
void register_builtin_processors(Registry<ProcessorInfo>& registry);
void register_builtin_stopping(Registry<StoppingCriterionInfo>& registry);
void register_builtin_strategies(Registry<SearchStrategyInfo>& registry);
void register_builtin_candidates(Registry<CandidateGeneratorInfo>& registry);

}  // namespace gengraph

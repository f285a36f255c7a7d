#include "framework/decoding/pipeline.h"

#include "framework/decoding/processors/processor_factory.h"
#include "framework/decoding/registry.h"
#include "framework/decoding/search/beam_search.h"
#include "framework/decoding/search/group_beam_search.h"
#include "framework/decoding/search/rowwise_search.h"
#include "framework/util/error.h"

namespace gengraph {

int64_t effective_pad_token(const GenerationConfig& c) {
  if (c.pad_token_id) return *c.pad_token_id;
  if (!c.eos_token_id.empty()) return c.eos_token_id.front();
  return 0;
}

int64_t rows_per_input(const GenerationConfig& c) {
  if (c.strategy) {
    const auto& info = strategy_registry().get(c.strategy->name);
    return info.rows_per_input ? info.rows_per_input(c, c.strategy->params) : 1;
  }
  if (c.num_beams > 1) return c.num_beams;
  return c.do_sample ? c.num_return_sequences : 1;
}

Pipeline build_pipeline(const GenerationConfig& c, const PipelineShape& shape) {
  Pipeline p;
  const int64_t n_eos = static_cast<int64_t>(c.eos_token_id.size());
  ProcessorContext ctx;
  ctx.vocab_size = shape.vocab_size;
  ctx.eos = c.eos_token_id;
  ctx.max_length = shape.max_length;
  ctx.prompt_length = shape.prompt_length;
  ctx.min_tokens_to_keep = (c.do_sample && c.num_beams > 1) ? std::max<int64_t>(2, n_eos + 1) : 1;
  if (c.processors.empty()) {
    add_processors_from_config(p.processors, c, ctx);
  } else {
    add_processors_from_list(p.processors, c.processors, ctx);
  }

  p.stopping.add(std::make_unique<MaxLengthCriterion>(shape.max_length));
  if (c.max_time) p.stopping.add(std::make_unique<MaxTimeCriterion>(*c.max_time));
  if (!c.stop_sequences.empty())
    p.stopping.add(std::make_unique<StopSequencesCriterion>(c.stop_sequences));
  if (!c.eos_token_id.empty()) p.stopping.add(std::make_unique<EosCriterion>(c.eos_token_id));

  DecodingContext dc;
  dc.vocab_size = shape.vocab_size;
  dc.max_length = shape.max_length;
  dc.prompt_length = shape.prompt_length;
  dc.eos = c.eos_token_id;
  dc.pad_token = effective_pad_token(c);
  // Finished rows receive padding only when something (EOS, stop sequences) can finish them early.
  if (!c.eos_token_id.empty() || !c.stop_sequences.empty() || !c.stopping_criteria.empty()) {
    dc.finished_pad = dc.pad_token;
  }
  for (size_t i = 0; i < c.stopping_criteria.size(); ++i) {
    const auto& spec = c.stopping_criteria[i];
    const auto& info = stopping_registry().get(spec.name);
    try {
      if (info.check_params) info.check_params(spec.params);
      p.stopping.add(info.create(spec.params, dc));
    } catch (const Error& e) {
      throw Error("generation.stopping_criteria[" + std::to_string(i) + "] '" + spec.name +
                  "': " + e.what());
    }
  }
  if (c.strategy) {
    const auto& info = strategy_registry().get(c.strategy->name);
    try {
      if (info.check_params) info.check_params(c.strategy->params);
      p.strategy = info.create(c, c.strategy->params, dc);
    } catch (const Error& e) {
      throw Error("generation.strategy '" + c.strategy->name + "': " + e.what());
    }
    if (!p.strategy)
      throw Error("generation.strategy '" + c.strategy->name + "': create gave none");
    return p;
  }

  BeamSearchOptions beams;
  beams.num_beams = c.num_beams;
  beams.length_penalty = c.length_penalty;
  beams.early_stopping = c.early_stopping;
  beams.num_return_sequences = c.num_return_sequences;
  beams.do_sample = c.do_sample;
  beams.n_eos = n_eos;
  beams.max_length = shape.max_length;
  beams.fill_token = n_eos ? effective_pad_token(c) : -1;
  if (c.num_beam_groups > 1) {
    GroupBeamSearchOptions o;
    static_cast<BeamSearchOptions&>(o) = beams;
    o.num_beam_groups = c.num_beam_groups;
    o.eos = c.eos_token_id;
    o.pad_token = effective_pad_token(c);
    auto state = std::make_shared<DiverseBeamState>();
    if (c.diversity_penalty > 0) {
      // transformers 4.55 placed the Hamming-diversity processor right after sequence_bias.
      size_t at = 0;
      while (at < p.processors.size() && (p.processors.at(at).name() == "sequence_bias" ||
                                          p.processors.at(at).name() == "logit_bias")) {
        ++at;
      }
      p.processors.insert(at, std::make_unique<HammingDiversity>(state, c.diversity_penalty));
    }
    p.strategy = std::make_unique<GroupBeamSearch>(o, state);
    return p;
  }
  if (c.num_beams > 1) {
    p.strategy = std::make_unique<BeamSearch>(beams);
    return p;
  }
  if (c.do_sample) {
    p.strategy = std::make_unique<SampleSearch>(dc.finished_pad, c.num_return_sequences);
  } else {
    p.strategy = std::make_unique<GreedySearch>(dc.finished_pad);
  }
  return p;
}

}  // namespace gengraph

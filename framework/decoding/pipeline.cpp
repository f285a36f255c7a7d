#include "framework/decoding/pipeline.h"

#include "framework/util/error.h"

namespace gengraph {

int64_t effective_pad_token(const ResolvedSettings& c) {
  if (c.pad_token_id) return *c.pad_token_id;
  if (!c.eos_token_id.empty()) return c.eos_token_id.front();
  return 0;
}

namespace {

// A part a list or key names: looked up, its parameters checked, built; errors name `where` and
// the part ("generation.stopping_criteria[0] 'x': ...").
template <typename Info>
auto create_named(const Registry<Info>& registry, const PartSpec& spec, const PartContext& ctx,
                  const std::string& where) {
  try {
    const Info& info = registry.get(spec.name);
    if (info.check_params) info.check_params(spec.params);
    return info.create(spec.params, ctx);
  } catch (const Error& e) {
    throw Error(where + " '" + spec.name + "': " + e.what());
  }
}

// The strategy the settings name, or the first registered one they enable.
const SearchStrategyInfo& strategy_info(const ResolvedSettings& c) {
  if (c.strategy) return strategy_registry().get(c.strategy->name);
  for (const auto& info : strategy_registry().all()) {
    if (info.enabled && info.enabled(c)) return info;
  }
  throw Error("generation: no search strategy is enabled by these settings");
}

}  // namespace

int64_t rows_per_input(const ResolvedSettings& c) {
  if (c.strategy_object) return c.strategy_object->rows_per_input();
  const auto& info = strategy_info(c);
  const nlohmann::json params = c.strategy ? c.strategy->params : nlohmann::json::object();
  return info.rows_per_input ? info.rows_per_input(c, params) : 1;
}

void add_processors_from_config(ProcessorChain& chain, const ResolvedSettings& c,
                                const PartContext& x) {
  for (const auto& info : processor_registry().all()) {
    if (!info.enabled || !info.from_settings || (info.warper && !c.do_sample)) continue;
    if (info.enabled(c)) chain.add(info.from_settings(c, x));
  }
}

void add_processors_from_list(ProcessorChain& chain, const std::vector<PartSpec>& specs,
                              const PartContext& ctx) {
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto& spec = specs[i];
    try {
      const ProcessorInfo& info = processor_registry().get(spec.name);
      if (info.check_params) info.check_params(spec.params);
      chain.add(info.create(spec.params, ctx));
    } catch (const Error& e) {
      throw Error("generation.processors[" + std::to_string(i) + "] '" + spec.name +
                  "': " + e.what());
    }
  }
}

Pipeline build_pipeline(const ResolvedSettings& c, int64_t max_length, int64_t prompt_length,
                        int64_t vocab_size, const CausalLM* target) {
  Pipeline p;
  const int64_t n_eos = static_cast<int64_t>(c.eos_token_id.size());
  PartContext ctx;
  ctx.vocab_size = vocab_size;
  ctx.max_length = max_length;
  ctx.prompt_length = prompt_length;
  ctx.eos = c.eos_token_id;
  ctx.pad_token = effective_pad_token(c);
  // Finished rows receive padding only when something (EOS, stop sequences) can finish them early.
  if (!c.eos_token_id.empty() || !c.stop_sequences.empty() || !c.stopping_criteria.empty() ||
      !c.stopping_objects.empty()) {
    ctx.finished_pad = ctx.pad_token;
  }
  ctx.min_tokens_to_keep = (c.do_sample && c.num_beams > 1) ? std::max<int64_t>(2, n_eos + 1) : 1;
  ctx.config = &c;
  ctx.target = target;
  ctx.processors = &p.processors;
  if (c.processors.empty()) {
    add_processors_from_config(p.processors, c, ctx);
  } else {
    add_processors_from_list(p.processors, c.processors, ctx);
  }
  for (const auto& object : c.processor_objects) p.processors.add(object);

  for (const auto& info : stopping_registry().all()) {
    if (info.enabled && info.from_settings && info.enabled(c))
      p.stopping.add(info.from_settings(c, ctx));
  }
  for (size_t i = 0; i < c.stopping_criteria.size(); ++i) {
    p.stopping.add(create_named(stopping_registry(), c.stopping_criteria[i], ctx,
                                "generation.stopping_criteria[" + std::to_string(i) + "]"));
  }

  for (const auto& object : c.stopping_objects) p.stopping.add(object);

  // Speculative decoding: the candidate generator named, else the first the settings enable.
  if (c.candidate_generator) {
    p.candidates = create_named(candidate_registry(), *c.candidate_generator, ctx,
                                "generation.candidate_generator");
  } else {
    for (const auto& info : candidate_registry().all()) {
      if (info.enabled && info.from_settings && info.enabled(c)) {
        p.candidates = info.from_settings(c, ctx);
        break;
      }
    }
  }

  if (c.strategy_object) {
    p.strategy = c.strategy_object;
    return p;
  }
  const SearchStrategyInfo& info = strategy_info(c);
  const nlohmann::json params = c.strategy ? c.strategy->params : nlohmann::json::object();
  try {
    if (info.check_params) info.check_params(params);
    p.strategy = info.create(params, ctx);
  } catch (const Error& e) {
    throw Error("generation.strategy '" + info.name + "': " + e.what());
  }
  if (!p.strategy) throw Error("generation.strategy '" + info.name + "': create gave none");
  return p;
}

}  // namespace gengraph

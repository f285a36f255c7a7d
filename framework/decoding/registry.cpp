#include "framework/decoding/registry.h"

#include <algorithm>

#include "framework/util/strings.h"

namespace gengraph {

void throw_unknown_part(const std::string& kind, const std::string& name,
                        const std::vector<std::string>& known) {
  throw Error("unknown " + kind + " '" + name + "'" + did_you_mean(name, known) + "; known: " +
              (known.empty() ? std::string("none") : join(known, ", ")) + plugin_hint());
}

nlohmann::json generation_settings_json(const ResolvedSettings& config) { return config.to_json(); }

// Each registry holds gengraph's own parts from its first use on (builtin_parts.cpp): one path for
// built-in and registered parts alike.
Registry<ProcessorInfo>& processor_registry() {
  static Registry<ProcessorInfo>& registry = *[] {
    auto* r = new Registry<ProcessorInfo>("logits processor");
    register_builtin_processors(*r);
    return r;
  }();
  return registry;
}

Registry<StoppingCriterionInfo>& stopping_registry() {
  static Registry<StoppingCriterionInfo>& registry = *[] {
    auto* r = new Registry<StoppingCriterionInfo>("stopping criterion");
    register_builtin_stopping(*r);
    return r;
  }();
  return registry;
}

Registry<SearchStrategyInfo>& strategy_registry() {
  static Registry<SearchStrategyInfo>& registry = *[] {
    auto* r = new Registry<SearchStrategyInfo>("search strategy");
    register_builtin_strategies(*r);
    return r;
  }();
  return registry;
}

Registry<CandidateGeneratorInfo>& candidate_registry() {
  static Registry<CandidateGeneratorInfo>& registry = *[] {
    auto* r = new Registry<CandidateGeneratorInfo>("candidate generator");
    register_builtin_candidates(*r);
    return r;
  }();
  return registry;
}

namespace {

template <typename Info>
void check_entry(const Registry<Info>& registry, const PartSpec& spec, const std::string& where) {
  try {
    const Info& info = registry.get(spec.name);
    if (info.check_params) info.check_params(spec.params);
  } catch (const Error& e) {
    throw Error("generation: " + where + ": " + e.what());
  }
}

}  // namespace

void check_registered_parts(const ResolvedSettings& c) {
  for (size_t i = 0; i < c.processors.size(); ++i) {
    const auto& p = c.processors[i];
    check_entry(processor_registry(), p, "processors[" + std::to_string(i) + "] '" + p.name + "'");
  }
  for (size_t i = 0; i < c.stopping_criteria.size(); ++i) {
    const auto& s = c.stopping_criteria[i];
    check_entry(stopping_registry(), s,
                "stopping_criteria[" + std::to_string(i) + "] '" + s.name + "'");
  }
  if (c.candidate_generator) {
    check_entry(candidate_registry(), *c.candidate_generator,
                "candidate_generator '" + c.candidate_generator->name + "'");
  }
  if (c.strategy) {
    const std::string where = "strategy '" + c.strategy->name + "'";
    check_entry(strategy_registry(), *c.strategy, where);
    // Beams the named strategy would not run are refused, not ignored.
    const auto& info = strategy_registry().get(c.strategy->name);
    const int64_t rows = info.rows_per_input ? info.rows_per_input(c, c.strategy->params) : 1;
    if (c.num_beams > 1 && rows != c.num_beams) {
      throw Error("generation: " + where + ": uses " + std::to_string(rows) +
                  " row(s) per input, but num_beams is " + std::to_string(c.num_beams) +
                  ": it would not run the beams; drop num_beams or name a beam strategy");
    }
  }
}

}  // namespace gengraph

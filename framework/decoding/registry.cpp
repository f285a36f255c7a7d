#include "framework/decoding/registry.h"

#include <algorithm>

namespace gengraph {

Registry<ProcessorInfo>& processor_registry() {
  static Registry<ProcessorInfo> registry("logits processor", builtin_processor_names());
  return registry;
}

Registry<StoppingCriterionInfo>& stopping_registry() {
  static Registry<StoppingCriterionInfo> registry("stopping criterion", {});
  return registry;
}

Registry<SearchStrategyInfo>& strategy_registry() {
  static Registry<SearchStrategyInfo> registry("search strategy", {});
  return registry;
}

namespace {

template <typename Info>
void check_entry(const Registry<Info>& registry, const ProcessorSpec& spec,
                 const std::string& where) {
  try {
    const Info& info = registry.get(spec.name);
    if (info.check_params) info.check_params(spec.params);
  } catch (const Error& e) {
    throw Error("generation: " + where + ": " + e.what());
  }
}

}  // namespace

void check_registered_parts(const GenerationConfig& c) {
  const auto builtin = builtin_processor_names();
  for (size_t i = 0; i < c.processors.size(); ++i) {
    const auto& p = c.processors[i];
    if (std::find(builtin.begin(), builtin.end(), p.name) != builtin.end()) continue;
    const std::string where = "processors[" + std::to_string(i) + "] '" + p.name + "'";
    if (!processor_registry().contains(p.name)) {
      throw Error("generation: " + where + ": unknown processor" +
                  did_you_mean(p.name, processor_names()) +
                  "; known: " + join(processor_names(), ", "));
    }
    check_entry(processor_registry(), p, where);
  }
  for (size_t i = 0; i < c.stopping_criteria.size(); ++i) {
    const auto& s = c.stopping_criteria[i];
    check_entry(stopping_registry(), s,
                "stopping_criteria[" + std::to_string(i) + "] '" + s.name + "'");
  }
  if (c.strategy)
    check_entry(strategy_registry(), *c.strategy, "strategy '" + c.strategy->name + "'");
}

}  // namespace gengraph

// Extension points of the decoding pipeline, open like backends: logits processors, stopping
// criteria and search strategies registered by name (from gengraph or from another project) and
// selected from YAML:
//   generation:
//     processors: [{name: my_processor, param: 1}]         # an explicit chain, any order
//     stopping_criteria: [{name: my_criterion, param: 2}]  # beside max_length, EOS, ...
//     strategy: {name: my_search, param: 3}                # instead of greedy/sampling/beams
// The mapping's other keys are the part's parameters, handed to it as JSON. Register once at
// start-up, before any experiment is read; see docs/extending.md.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "framework/decoding/generation_config.h"
#include "framework/decoding/processors/logits_processor.h"
#include "framework/decoding/processors/processor_factory.h"
#include "framework/decoding/search/search_strategy.h"
#include "framework/decoding/stopping/stopping_criteria.h"
#include "framework/util/error.h"

namespace gengraph {

// What a stopping criterion or a strategy may depend on beyond its parameters; known once the
// prompt is laid out.
struct DecodingContext {
  int64_t vocab_size = 0;
  int64_t max_length = 0;     // resolved total length (padded prompt + new tokens)
  int64_t prompt_length = 0;  // padded
  std::vector<int64_t> eos;   // the generation's EOS ids
  int64_t pad_token = 0;      // pad_token_id, else the first EOS id, else 0
  // The token a finished row receives (rowwise strategies), when something can finish a row early
  // (EOS or stop sequences); unset when rows only stop at max_length.
  std::optional<int64_t> finished_pad;
};

// What every registered part has: a name, a description, and an optional check of its
// parameters (throws Error when they are wrong, so a config is refused before any model load).
struct PartInfo {
  std::string name;
  std::string description;
  std::function<void(const nlohmann::json& params)> check_params;
};

struct ProcessorInfo : PartInfo {
  std::function<std::unique_ptr<LogitsProcessor>(const nlohmann::json& params,
                                                 const ProcessorContext& context)>
      create;
};

struct StoppingCriterionInfo : PartInfo {
  std::function<std::unique_ptr<StoppingCriterion>(const nlohmann::json& params,
                                                   const DecodingContext& context)>
      create;
};

struct SearchStrategyInfo : PartInfo {
  // Rows per input prompt, known before the strategy is built (default: 1).
  std::function<int64_t(const GenerationConfig& config, const nlohmann::json& params)>
      rows_per_input;
  // The strategy reads whatever settings it honours from `config` (temperature, num_beams, ...).
  std::function<std::unique_ptr<SearchStrategy>(
      const GenerationConfig& config, const nlohmann::json& params, const DecodingContext& context)>
      create;
};

// Parts by name. `kind` names them in errors ("logits processor", ...); `reserved` are built-in
// names, which add() refuses like a duplicate.
template <typename Info>
class Registry {
 public:
  Registry(std::string kind, std::vector<std::string> reserved)
      : kind_(std::move(kind)), reserved_(std::move(reserved)) {}
  void add(Info info) {
    if (info.name.empty() || !info.create)
      throw Error("a registered " + kind_ + " needs a name and a create function");
    if (items_.count(info.name) ||
        std::find(reserved_.begin(), reserved_.end(), info.name) != reserved_.end()) {
      throw Error(kind_ + " '" + info.name + "' is already registered");
    }
    items_.emplace(info.name, std::move(info));
  }
  const Info* find(const std::string& name) const {
    auto it = items_.find(name);
    return it == items_.end() ? nullptr : &it->second;
  }
  // Throws naming the closest registered name and listing all of them.
  const Info& get(const std::string& name) const {
    if (const Info* info = find(name)) return *info;
    std::vector<std::string> known = reserved_;
    for (const auto& n : names()) known.push_back(n);
    throw Error("unknown " + kind_ + " '" + name + "'" + did_you_mean(name, known) +
                "; known: " + (known.empty() ? std::string("none") : join(known, ", ")));
  }
  bool contains(const std::string& name) const { return items_.count(name) != 0; }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [name, info] : items_) out.push_back(name);
    return out;
  }

 private:
  std::string kind_;
  std::vector<std::string> reserved_;
  std::map<std::string, Info> items_;
};

// The process-wide registries (one each, in libgengraph_core).
Registry<ProcessorInfo>& processor_registry();  // reserved: the built-in processors
Registry<StoppingCriterionInfo>& stopping_registry();
Registry<SearchStrategyInfo>& strategy_registry();

// Checks every registered part a configuration names (processors, stopping_criteria, strategy):
// that it is known (built-in or registered) and, where the part can, its parameters. Errors name
// the key and the entry. GenerationConfig::validate calls it.
void check_registered_parts(const GenerationConfig& config);

}  // namespace gengraph

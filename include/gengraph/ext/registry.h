// The registries of decoding parts, a public header (<gengraph/extension.h> includes it): logits
// processors, stopping criteria, search strategies and candidate generators registered by name
// (gengraph's own and those from another project alike) and selected from YAML:
//   generation:
//     processors: [{name: my_processor, param: 1}]         # an explicit chain, any order
//     stopping_criteria: [{name: my_criterion, param: 2}]  # beside max_length, EOS, ...
//     strategy: {name: my_search, param: 3}                # instead of greedy/sampling/beams
//     candidate_generator: {name: my_proposer}             # speculative decoding
// The mapping's other keys are the part's parameters, handed to it as JSON. Register once at
// start-up, before any experiment is read; see docs/extending.md.
#pragma once

#include <gengraph/error.h>
#include <gengraph/ext/decoding.h>
#include <gengraph/ext/model.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gengraph {

struct ResolvedSettings;  // the resolved settings; read them with generation_settings_json()

// Throws the registries' "unknown <kind> '<name>'" Error: the closest registered name, all of them,
// and how a part from a plug-in library is loaded.
[[noreturn]] void throw_unknown_part(const std::string& kind, const std::string& name,
                                     const std::vector<std::string>& known);

// What a part may depend on beyond its own parameters; known once the prompt is laid out. One
// context for every kind of part.
struct PartContext {
  int64_t vocab_size = 0;
  int64_t max_length = 0;     // resolved total length (padded prompt + new tokens)
  int64_t prompt_length = 0;  // padded
  std::vector<int64_t> eos;   // the generation's EOS ids
  int64_t pad_token = 0;      // pad_token_id, else the first EOS id, else 0
  // The token a finished row receives (rowwise strategies), when something can finish a row early
  // (EOS or stop sequences); unset when rows only stop at max_length.
  std::optional<int64_t> finished_pad;
  int64_t min_tokens_to_keep = 1;  // warpers: 1; for beam sampling n_eos + 1 (at least 2)
  // The resolved settings, which a strategy reads as it honours them (temperature, num_beams);
  // a part built outside gengraph reads them through generation_settings_json(*config).
  const ResolvedSettings* config = nullptr;
  // The pipeline's processor chain, for a strategy that works with a processor of its own (diverse
  // beam search inserts its Hamming-diversity processor); null when checking parameters only.
  ProcessorChain* processors = nullptr;
  // The model being decoded, for a part that needs its device, dtype or vocabulary (a draft
  // model; model_shape(), model_device(), <gengraph/ext/model.h>); null when the pipeline is only
  // checked, without weights.
  const CausalLM* target = nullptr;
};
// Earlier names of PartContext (one served processors, the other criteria and strategies).
using ProcessorContext [[deprecated("use gengraph::PartContext")]] = PartContext;
using DecodingContext [[deprecated("use gengraph::PartContext")]] = PartContext;

// A registered part of kind `Part` (LogitsProcessor, StoppingCriterion, SearchStrategy): a name,
// a description, an optional check of its parameters (throws Error when they are wrong, so a
// config is refused before any model load), and how it is built. Built-in and registered parts
// are the same kind of entry: a part may also say which ResolvedSettings keys it reads (`keys`:
// then a list entry's parameters are those keys) and when the settings alone enable it
// (`enabled`: the built-ins, which the pipeline walks in registration order).
template <typename Part>
struct PartInfo {
  std::string name;
  std::string description;
  std::function<void(const nlohmann::json& params)> check_params;
  std::vector<std::string> keys;
  std::function<bool(const ResolvedSettings& config)> enabled;
  // From a list entry's parameters (a strategy: its parameters, with the settings in
  // context.config).
  std::function<std::unique_ptr<Part>(const nlohmann::json& params, const PartContext& context)>
      create;
  // From the settings alone (with `enabled`): the chain built when no processor list is given,
  // the criteria max_length, max_time, stop_sequences and eos.
  std::function<std::unique_ptr<Part>(const ResolvedSettings& config, const PartContext& context)>
      from_settings;
  // Processors: in the settings' chain only when sampling (do_sample).
  bool warper = false;
  // Strategies: rows per input prompt, known before the strategy is built (default: 1).
  std::function<int64_t(const ResolvedSettings& config, const nlohmann::json& params)>
      rows_per_input;
};
using ProcessorInfo = PartInfo<LogitsProcessor>;
using StoppingCriterionInfo = PartInfo<StoppingCriterion>;
using SearchStrategyInfo = PartInfo<SearchStrategy>;
using CandidateGeneratorInfo = PartInfo<CandidateGenerator>;

// Parts by name, in registration order. `kind` names them in errors ("logits processor", ...).
// Each registry registers gengraph's built-in parts when it is first used; parts from elsewhere
// are added after them.
template <typename Info>
class Registry {
 public:
  explicit Registry(std::string kind) : kind_(std::move(kind)) {}
  void add(Info info) {
    if (info.name.empty() || !info.create)
      throw Error("a registered " + kind_ + " needs a name and a create function");
    if (index_.count(info.name)) throw Error(kind_ + " '" + info.name + "' is already registered");
    index_.emplace(info.name, items_.size());
    items_.push_back(std::move(info));
  }
  const Info* find(const std::string& name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &items_[it->second];
  }
  // Throws naming the closest registered name and listing all of them.
  const Info& get(const std::string& name) const {
    if (const Info* info = find(name)) return *info;
    const std::vector<std::string> known = names();
    throw_unknown_part(kind_, name, known);
  }
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  // Registration order: the built-ins first.
  const std::deque<Info>& all() const { return items_; }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& info : items_) out.push_back(info.name);
    return out;
  }

 private:
  std::string kind_;
  std::deque<Info> items_;  // references stay valid as parts are added
  std::map<std::string, size_t> index_;
};

// The process-wide registries (one each, in libgengraph_core).
Registry<ProcessorInfo>& processor_registry();
Registry<StoppingCriterionInfo>& stopping_registry();
Registry<SearchStrategyInfo>& strategy_registry();
Registry<CandidateGeneratorInfo>& candidate_registry();

// The resolved settings as JSON, transformers' key names (ResolvedSettings::to_json): how a part
// built outside gengraph reads the settings it honours from PartContext::config, e.g.
// generation_settings_json(*context.config).value("temperature", 1.0).
nlohmann::json generation_settings_json(const ResolvedSettings& config);

}  // namespace gengraph

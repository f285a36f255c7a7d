// gengraph's own decoding parts, registered as any other part is (framework/decoding/registry.h):
// the registries call these on first use, so the built-ins come first in registration order and
// the pipeline (pipeline.cpp) builds a generation's parts in one walk over them.
#include <functional>

#include "framework/decoding/candidates/draft_model.h"
#include "framework/decoding/candidates/prompt_lookup.h"
#include "framework/decoding/processors/constraints.h"
#include "framework/decoding/processors/penalties.h"
#include "framework/decoding/processors/warpers.h"
#include "framework/decoding/registry.h"
#include "framework/decoding/search/beam_search.h"
#include "framework/decoding/search/group_beam_search.h"
#include "framework/decoding/search/rowwise_search.h"
#include "framework/util/error.h"
#include "framework/util/strings.h"

namespace gengraph {
namespace {

using Json = nlohmann::json;
using FromSettings =
    std::function<std::unique_ptr<LogitsProcessor>(const ResolvedSettings&, const PartContext&)>;

// A built-in processor: its ResolvedSettings keys, when the settings enable it, how it is built
// from them. Its list parameters are those keys (and min_tokens_to_keep).
struct Entry {
  std::string name;
  std::vector<std::string> keys;
  std::function<bool(const ResolvedSettings&)> enabled;
  FromSettings build;
  bool warper = false;
};

template <typename T, typename... A>
std::unique_ptr<LogitsProcessor> make(A&&... a) {
  return std::make_unique<T>(std::forward<A>(a)...);
}

// A list entry's parameters as settings: each a key the processor reads, read (and checked) by
// the settings' own reader. `min_keep`, when given, receives min_tokens_to_keep.
ResolvedSettings settings_of(const std::vector<std::string>& keys, const Json& params,
                             const std::vector<int64_t>& eos, int64_t* min_keep) {
  ResolvedSettings c;
  c.eos_token_id = eos;
  std::vector<std::string> allowed = keys;
  allowed.push_back("min_tokens_to_keep");
  if (!params.is_object()) throw Error("expected parameters as a mapping, found " + params.dump());
  for (auto p = params.begin(); p != params.end(); ++p) {
    if (std::find(allowed.begin(), allowed.end(), p.key()) == allowed.end()) {
      throw Error("unknown parameter '" + p.key() + "'" + did_you_mean(p.key(), allowed) +
                  "; parameters: " + join(allowed, ", "));
    }
    if (p.key() == "min_tokens_to_keep") {
      if (!p.value().is_number_integer() || p.value().get<int64_t>() < 1) {
        throw Error("'min_tokens_to_keep': expected an integer >= 1, found " + p.value().dump());
      }
      if (min_keep) *min_keep = p.value().get<int64_t>();
      continue;
    }
    apply_generation_key(c, p.key(), p.value(), "parameter");
  }
  return c;
}

ProcessorInfo processor_info(Entry e) {
  ProcessorInfo info;
  info.name = e.name;
  info.description = "built in (transformers' " + e.name + "); parameters: " +
                     (e.keys.empty() ? std::string("none") : join(e.keys, ", "));
  info.keys = e.keys;
  info.enabled = e.enabled;
  info.warper = e.warper;
  info.from_settings = e.build;
  info.check_params = [keys = e.keys](const Json& params) {
    settings_of(keys, params, {}, nullptr);
  };
  info.create = [keys = e.keys, build = e.build](const Json& params, const PartContext& ctx) {
    PartContext x = ctx;
    return build(settings_of(keys, params, ctx.eos, &x.min_tokens_to_keep), x);
  };
  return info;
}

}  // namespace

// In transformers 5.17's _get_logits_processor order: processors, then (when do_sample) warpers,
// then renormalisation. gengraph's extensions sit beside their closest relatives (logit_bias after
// sequence_bias, frequency/presence after repetition_penalty).
void register_builtin_processors(Registry<ProcessorInfo>& registry) {
  const std::vector<Entry> entries = {
      {"sequence_bias",
       {"sequence_bias"},
       [](auto& c) { return !c.sequence_bias.empty(); },
       [](auto& c, auto& x) { return make<SequenceBias>(c.sequence_bias, x.vocab_size); }},
      {"logit_bias",
       {"logit_bias"},
       [](auto& c) { return !c.logit_bias.empty(); },
       [](auto& c, auto& x) { return make<LogitBias>(c.logit_bias, x.vocab_size); }},
      {"repetition_penalty",
       {"repetition_penalty"},
       [](auto& c) { return c.repetition_penalty != 1.0; },
       [](auto& c, auto&) { return make<RepetitionPenalty>(c.repetition_penalty); }},
      {"frequency_presence_penalty",
       {"frequency_penalty", "presence_penalty"},
       [](auto& c) { return c.frequency_penalty != 0.0 || c.presence_penalty != 0.0; },
       [](auto& c, auto&) {
         return make<FrequencyPresencePenalty>(c.frequency_penalty, c.presence_penalty);
       }},
      {"no_repeat_ngram",
       {"no_repeat_ngram_size"},
       [](auto& c) { return c.no_repeat_ngram_size > 0; },
       [](auto& c, auto&) { return make<NoRepeatNGram>(c.no_repeat_ngram_size); }},
      {"bad_words",
       {"bad_words_ids"},
       [](auto& c) { return !c.bad_words_ids.empty(); },
       [](auto& c, auto& x) { return make<BadWords>(c.bad_words_ids, x.eos, x.vocab_size); }},
      {"min_length",
       {"min_length"},
       [](auto& c) { return c.min_length > 0 && !c.eos_token_id.empty(); },
       [](auto& c, auto& x) { return make<MinLength>(c.min_length, x.eos, false); }},
      {"min_new_tokens",
       {"min_new_tokens"},
       [](auto& c) { return c.min_new_tokens.value_or(0) > 0 && !c.eos_token_id.empty(); },
       [](auto& c, auto& x) { return make<MinLength>(c.min_new_tokens.value_or(0), x.eos, true); }},
      {"forced_bos",
       {"forced_bos_token_id"},
       [](auto& c) { return c.forced_bos_token_id.has_value(); },
       [](auto& c, auto&) {
         if (!c.forced_bos_token_id) throw Error("forced_bos: needs forced_bos_token_id");
         return make<ForceTokens>("forced_bos", std::vector<int64_t>{*c.forced_bos_token_id}, 1);
       }},
      {"forced_eos",
       {"forced_eos_token_id"},
       [](auto& c) { return !c.forced_eos_token_id.empty(); },
       [](auto& c, auto& x) {
         const auto& ids = c.forced_eos_token_id.empty() ? x.eos : c.forced_eos_token_id;
         if (ids.empty()) throw Error("forced_eos: needs forced_eos_token_id or an eos_token_id");
         return make<ForceTokens>("forced_eos", ids, x.max_length - 1);
       }},
      {"remove_invalid_values",
       {},
       [](auto& c) { return c.remove_invalid_values; },
       [](auto&, auto&) { return make<RemoveInvalidValues>(); }},
      {"exponential_decay_length_penalty",
       {"exponential_decay_length_penalty"},
       [](auto& c) { return c.exponential_decay_length_penalty.has_value(); },
       [](auto& c, auto& x) {
         if (!c.exponential_decay_length_penalty)
           throw Error("exponential_decay_length_penalty: needs [start, factor]");
         return make<ExponentialDecayLengthPenalty>(c.exponential_decay_length_penalty->first,
                                                    c.exponential_decay_length_penalty->second,
                                                    x.eos);
       }},
      {"suppress_tokens",
       {"suppress_tokens"},
       [](auto& c) { return !c.suppress_tokens.empty(); },
       [](auto& c, auto&) { return make<SuppressTokens>(c.suppress_tokens); }},
      {"begin_suppress_tokens",
       {"begin_suppress_tokens", "forced_bos_token_id"},
       [](auto& c) { return !c.begin_suppress_tokens.empty(); },
       [](auto& c, auto& x) {
         // transformers: begin_index = prompt length, + 1 when the prompt is one token and BOS is
         // forced.
         const int64_t shift = (x.prompt_length > 1 || !c.forced_bos_token_id) ? 0 : 1;
         return make<SuppressTokens>(c.begin_suppress_tokens, shift, /*relative_to_prompt=*/true);
       }},
      {"temperature",
       {"temperature"},
       [](auto& c) { return c.temperature != 1.0; },
       [](auto& c, auto&) { return make<Temperature>(c.temperature); },
       true},
      {"top_k",
       {"top_k"},
       [](auto& c) { return c.top_k != 0; },
       [](auto& c, auto& x) { return make<TopK>(c.top_k, x.min_tokens_to_keep); },
       true},
      {"top_p",
       {"top_p"},
       [](auto& c) { return c.top_p < 1.0; },
       [](auto& c, auto& x) { return make<TopP>(c.top_p, x.min_tokens_to_keep); },
       true},
      {"min_p",
       {"min_p"},
       [](auto& c) { return c.min_p.has_value(); },
       [](auto& c, auto& x) {
         if (!c.min_p) throw Error("min_p: needs min_p");
         return make<MinP>(*c.min_p, x.min_tokens_to_keep);
       },
       true},
      {"typical_p",
       {"typical_p"},
       [](auto& c) { return c.typical_p < 1.0; },
       [](auto& c, auto& x) { return make<Typical>(c.typical_p, x.min_tokens_to_keep); },
       true},
      {"epsilon_cutoff",
       {"epsilon_cutoff"},
       [](auto& c) { return c.epsilon_cutoff > 0 && c.epsilon_cutoff < 1; },
       [](auto& c, auto& x) {
         return make<EpsilonCutoff>(c.epsilon_cutoff, x.min_tokens_to_keep, false);
       },
       true},
      {"eta_cutoff",
       {"eta_cutoff"},
       [](auto& c) { return c.eta_cutoff > 0 && c.eta_cutoff < 1; },
       [](auto& c, auto& x) {
         return make<EpsilonCutoff>(c.eta_cutoff, x.min_tokens_to_keep, true);
       },
       true},
      {"renormalize",
       {},
       [](auto& c) { return c.renormalize_logits; },
       [](auto&, auto&) { return make<Renormalize>(); }},
  };
  for (const auto& e : entries) registry.add(processor_info(e));
}

void register_builtin_stopping(Registry<StoppingCriterionInfo>& registry) {
  const auto add = [&](std::string name, std::string description,
                       std::function<bool(const ResolvedSettings&)> enabled,
                       std::function<std::unique_ptr<StoppingCriterion>(const ResolvedSettings&,
                                                                        const PartContext&)>
                           build,
                       std::vector<std::string> keys) {
    StoppingCriterionInfo info;
    info.name = std::move(name);
    info.description = std::move(description);
    info.keys = keys;
    info.enabled = std::move(enabled);
    info.from_settings = build;
    info.check_params = [keys](const Json& params) { settings_of(keys, params, {}, nullptr); };
    info.create = [keys, build](const Json& params, const PartContext& ctx) {
      ResolvedSettings c = settings_of(keys, params, ctx.eos, nullptr);
      return build(c, ctx);
    };
    registry.add(std::move(info));
  };
  add(
      "max_length", "every row stops at the resolved total length (always on)",
      [](const ResolvedSettings&) { return true; },
      [](const ResolvedSettings&, const PartContext& x) {
        return std::make_unique<MaxLengthCriterion>(x.max_length);
      },
      {});
  add(
      "max_time", "every row stops once max_time seconds have passed",
      [](const ResolvedSettings& c) { return c.max_time.has_value(); },
      [](const ResolvedSettings& c, const PartContext&) {
        if (!c.max_time) throw Error("max_time: needs max_time");
        return std::make_unique<MaxTimeCriterion>(*c.max_time);
      },
      {"max_time"});
  add(
      "stop_sequences", "a row stops when its tokens end with one of the stop sequences",
      [](const ResolvedSettings& c) { return !c.stop_sequences.empty(); },
      [](const ResolvedSettings& c, const PartContext&) {
        if (c.stop_sequences.empty()) throw Error("stop_sequences: needs stop_sequences");
        return std::make_unique<StopSequencesCriterion>(c.stop_sequences);
      },
      {"stop_sequences"});
  add(
      "eos", "a row stops at an EOS id",
      [](const ResolvedSettings& c) { return !c.eos_token_id.empty(); },
      [](const ResolvedSettings& c, const PartContext&) {
        if (c.eos_token_id.empty()) throw Error("eos: needs eos_token_id");
        return std::make_unique<EosCriterion>(c.eos_token_id);
      },
      {"eos_token_id"});
}

namespace {

BeamSearchOptions beam_options(const ResolvedSettings& c, const PartContext& x) {
  BeamSearchOptions beams;
  beams.num_beams = c.num_beams;
  beams.length_penalty = c.length_penalty;
  beams.early_stopping = c.early_stopping;
  beams.num_return_sequences = c.num_return_sequences;
  beams.do_sample = c.do_sample;
  beams.n_eos = static_cast<int64_t>(c.eos_token_id.size());
  beams.max_length = x.max_length;
  beams.fill_token = beams.n_eos ? x.pad_token : -1;
  beams.output_scores = c.output_scores;
  return beams;
}

void no_params(const Json& params) {
  if (params.is_object() && !params.empty()) {
    throw Error("takes no parameters (it reads the generation settings), found " + params.dump());
  }
}

}  // namespace

void register_builtin_strategies(Registry<SearchStrategyInfo>& registry) {
  // Each reads the settings it honours (`keys`) and takes no parameters of its own.
  const auto add = [&](std::string name, std::string description, std::vector<std::string> keys,
                       std::function<bool(const ResolvedSettings&)> enabled,
                       std::function<int64_t(const ResolvedSettings&)> rows,
                       std::function<std::unique_ptr<SearchStrategy>(const ResolvedSettings&,
                                                                     const PartContext&)>
                           build) {
    SearchStrategyInfo info;
    info.name = std::move(name);
    info.description = std::move(description);
    info.keys = std::move(keys);
    info.enabled = std::move(enabled);
    info.rows_per_input = [rows](const ResolvedSettings& c, const Json&) { return rows(c); };
    info.check_params = no_params;
    info.create = [build](const Json&, const PartContext& x) {
      if (x.config == nullptr) throw Error("internal: a strategy built without its settings");
      return build(*x.config, x);
    };
    registry.add(std::move(info));
  };
  const auto beams = [](const ResolvedSettings& c) { return c.num_beams; };
  add(
      "group_beam_search", "diverse beam search (num_beam_groups > 1, transformers 4.55)",
      {"num_beams", "num_beam_groups", "diversity_penalty", "length_penalty", "early_stopping",
       "num_return_sequences", "output_scores"},
      [](const ResolvedSettings& c) { return c.num_beam_groups > 1; }, beams,
      [](const ResolvedSettings& c, const PartContext& x) -> std::unique_ptr<SearchStrategy> {
        GroupBeamSearchOptions o;
        static_cast<BeamSearchOptions&>(o) = beam_options(c, x);
        o.num_beam_groups = c.num_beam_groups;
        o.eos = c.eos_token_id;
        o.pad_token = x.pad_token;
        auto state = std::make_shared<DiverseBeamState>();
        if (c.diversity_penalty > 0) {
          if (!x.processors) throw Error("group_beam_search: needs the pipeline's processor chain");
          // transformers 4.55 placed the Hamming-diversity processor right after sequence_bias.
          ProcessorChain& chain = *x.processors;
          size_t at = 0;
          while (at < chain.size() &&
                 (chain.at(at).name() == "sequence_bias" || chain.at(at).name() == "logit_bias")) {
            ++at;
          }
          chain.insert(at, std::make_unique<HammingDiversity>(state, c.diversity_penalty));
        }
        return std::make_unique<GroupBeamSearch>(o, state);
      });
  add(
      "beam_search", "beam search, or beam sampling with do_sample (num_beams > 1)",
      {"num_beams", "length_penalty", "early_stopping", "num_return_sequences", "do_sample",
       "output_scores"},
      [](const ResolvedSettings& c) { return c.num_beams > 1; }, beams,
      [](const ResolvedSettings& c, const PartContext& x) -> std::unique_ptr<SearchStrategy> {
        return std::make_unique<BeamSearch>(beam_options(c, x));
      });
  add(
      "sample", "multinomial sampling (do_sample), num_return_sequences per input",
      {"do_sample", "num_return_sequences", "output_scores", "top_logprobs"},
      [](const ResolvedSettings& c) { return c.do_sample; },
      [](const ResolvedSettings& c) { return c.num_return_sequences; },
      [](const ResolvedSettings& c, const PartContext& x) -> std::unique_ptr<SearchStrategy> {
        return std::make_unique<SampleSearch>(x.finished_pad, c.num_return_sequences,
                                              c.output_scores, c.top_logprobs);
      });
  add(
      "greedy", "greedy search (the default)", {"output_scores", "top_logprobs"},
      [](const ResolvedSettings&) { return true; },
      [](const ResolvedSettings&) { return int64_t{1}; },
      [](const ResolvedSettings& c, const PartContext& x) -> std::unique_ptr<SearchStrategy> {
        return std::make_unique<GreedySearch>(x.finished_pad, c.output_scores, c.top_logprobs);
      });
}

void register_builtin_candidates(Registry<CandidateGeneratorInfo>& registry) {
  CandidateGeneratorInfo info;
  info.name = "prompt_lookup";
  info.description =
      "prompt lookup: what followed an earlier occurrence of the last n tokens (transformers' "
      "prompt_lookup_num_tokens, max_matching_ngram_size)";
  info.keys = {"prompt_lookup_num_tokens", "max_matching_ngram_size"};
  info.enabled = [](const ResolvedSettings& c) { return c.prompt_lookup_num_tokens.has_value(); };
  const auto build = [](const ResolvedSettings& c) {
    return std::make_unique<PromptLookup>(c.prompt_lookup_num_tokens.value_or(10),
                                          c.max_matching_ngram_size.value_or(2), c.eos_token_id);
  };
  info.from_settings = [build](const ResolvedSettings& c, const PartContext&) { return build(c); };
  info.check_params = no_params;
  info.create = [build](const nlohmann::json&, const PartContext& x) {
    if (x.config == nullptr) throw Error("internal: a candidate generator built without settings");
    return build(*x.config);
  };
  registry.add(std::move(info));

  CandidateGeneratorInfo draft;
  draft.name = "draft_model";
  draft.description =
      "a draft model's greedy continuation, or when sampling its draws (transformers' "
      "assistant_model): model, weights, backend, options, num_tokens, schedule, sampling";
  draft.check_params = [](const nlohmann::json& p) { read_draft_model_options(p); };
  draft.create = [](const nlohmann::json& p, const PartContext& x) {
    return std::make_unique<DraftModel>(read_draft_model_options(p), x.target, x.max_length,
                                        x.prompt_length);
  };
  registry.add(std::move(draft));

  CandidateGeneratorInfo early;
  early.name = "early_exit";
  early.description =
      "the model's own first layers with its final norm and head (transformers' "
      "assistant_early_exit): layers, backend, options, num_tokens, schedule, sampling";
  early.keys = {"assistant_early_exit"};
  early.enabled = [](const ResolvedSettings& c) { return c.assistant_early_exit.has_value(); };
  early.from_settings = [](const ResolvedSettings& c, const PartContext& x) {
    DraftModelOptions o;  // transformers' num_assistant_tokens 20, schedule constant
    o.layers = *c.assistant_early_exit;
    return std::make_unique<DraftModel>(o, x.target, x.max_length, x.prompt_length);
  };
  early.check_params = [](const nlohmann::json& p) { read_early_exit_options(p); };
  early.create = [](const nlohmann::json& p, const PartContext& x) {
    return std::make_unique<DraftModel>(read_early_exit_options(p), x.target, x.max_length,
                                        x.prompt_length);
  };
  registry.add(std::move(early));
}

}  // namespace gengraph

#include "framework/decoding/processors/processor_factory.h"

#include <functional>
#include <map>

#include "framework/decoding/processors/constraints.h"
#include "framework/decoding/processors/penalties.h"
#include "framework/decoding/processors/warpers.h"
#include "framework/decoding/registry.h"
#include "framework/util/error.h"

namespace gengraph {
namespace {

using Build = std::function<std::unique_ptr<LogitsProcessor>(const GenerationConfig&,
                                                             const ProcessorContext&)>;

struct Entry {
  std::string name;
  std::vector<std::string> keys;  // GenerationConfig keys it reads (its parameters in a list)
  std::function<bool(const GenerationConfig&)> in_default_chain;
  Build build;
  bool warper = false;  // only with do_sample in the default chain
};

template <typename T, typename... A>
std::unique_ptr<LogitsProcessor> make(A&&... a) {
  return std::make_unique<T>(std::forward<A>(a)...);
}

// The table is in transformers' order.
const std::vector<Entry>& entries() {
  static const std::vector<Entry> kEntries = {
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
  return kEntries;
}

}  // namespace

void add_processors_from_config(ProcessorChain& chain, const GenerationConfig& c,
                                const ProcessorContext& x) {
  for (const auto& e : entries()) {
    if (e.warper && !c.do_sample) continue;
    if (e.in_default_chain(c)) chain.add(e.build(c, x));
  }
}

void add_processors_from_list(ProcessorChain& chain, const std::vector<ProcessorSpec>& specs,
                              const ProcessorContext& ctx) {
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto& spec = specs[i];
    const std::string where =
        "generation.processors[" + std::to_string(i) + "] '" + spec.name + "'";
    auto it = std::find_if(entries().begin(), entries().end(),
                           [&](const Entry& e) { return e.name == spec.name; });
    if (it == entries().end()) {
      if (const ProcessorInfo* info = processor_registry().find(spec.name)) {
        try {
          if (info->check_params) info->check_params(spec.params);
          chain.add(info->create(spec.params, ctx));
        } catch (const Error& e) {
          throw Error(where + ": " + e.what());
        }
        continue;
      }
      throw Error(where + ": unknown processor" + did_you_mean(spec.name, processor_names()) +
                  "; known: " + join(processor_names(), ", "));
    }
    // Parameters are GenerationConfig keys, read (and validated) by the same code.
    GenerationConfig params;
    params.eos_token_id = ctx.eos;
    ProcessorContext x = ctx;
    std::vector<std::string> allowed = it->keys;
    allowed.push_back("min_tokens_to_keep");
    for (auto p = spec.params.begin(); p != spec.params.end(); ++p) {
      if (std::find(allowed.begin(), allowed.end(), p.key()) == allowed.end()) {
        throw Error(where + ": unknown parameter '" + p.key() + "'" +
                    did_you_mean(p.key(), allowed) + "; parameters: " + join(allowed, ", "));
      }
      if (p.key() == "min_tokens_to_keep") {
        if (!p.value().is_number_integer() || p.value().get<int64_t>() < 1) {
          throw Error(where + ": 'min_tokens_to_keep': expected an integer >= 1, found " +
                      p.value().dump());
        }
        x.min_tokens_to_keep = p.value().get<int64_t>();
        continue;
      }
      apply_generation_key(params, p.key(), p.value(), where);
    }
    try {
      chain.add(it->build(params, x));
    } catch (const Error& e) {
      throw Error(where + ": " + e.what());
    }
  }
}

std::vector<std::string> builtin_processor_names() {
  std::vector<std::string> out;
  for (const auto& e : entries()) out.push_back(e.name);
  return out;
}

std::vector<std::string> processor_names() {
  std::vector<std::string> out = builtin_processor_names();
  for (const auto& n : processor_registry().names()) out.push_back(n);
  return out;
}

}  // namespace gengraph

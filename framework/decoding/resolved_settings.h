// ResolvedSettings: the generation settings a generation runs with, after the layers are applied
// (transformers' defaults, the model's generation_config.json, then the caller's keys or
// GenerationSettings; resolve_generation, generation_defaults.h). What the caller asks for is
// GenerationSettings (public), what is decided from it a Plan (plan.h), what the Generator returns
// a Generation. Named and defaulted as in transformers' GenerationConfig (5.17), so that a
// model's generation_config.json and a YAML `generation:` block mean the same thing here. A few
// gengraph extensions (marked below) have no transformers counterpart.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gengraph {

class LogitsProcessor;
class StoppingCriterion;
class SearchStrategy;

enum class EarlyStopping { kFalse, kTrue, kNever };

// A decoding part named in the settings: an entry of an explicit processor list, a stopping
// criterion or the strategy, by its registered name (framework/decoding/registry.h: gengraph's
// own parts and those registered from elsewhere alike) and its parameters. (Formerly
// ProcessorSpec.)
struct PartSpec {
  std::string name;
  nlohmann::json params = nlohmann::json::object();
};

struct ResolvedSettings {
  // Length. max_new_tokens wins over max_length (which counts the padded prompt); with neither,
  // transformers 5 generates 20 new tokens, capped at the model's context.
  std::optional<int64_t> max_new_tokens;
  std::optional<int64_t> max_length;
  int64_t min_length = 0;
  std::optional<int64_t> min_new_tokens;
  std::optional<double> max_time;  // seconds

  // Search.
  bool do_sample = false;
  int64_t num_beams = 1;
  int64_t num_beam_groups = 1;  // diverse beam search (out of transformers' core since 5.x)
  double diversity_penalty = 0.0;
  double length_penalty = 1.0;
  EarlyStopping early_stopping = EarlyStopping::kFalse;
  int64_t num_return_sequences = 1;

  // Logits processors and warpers (warpers act only when do_sample).
  double temperature = 1.0;
  int64_t top_k = 50;
  double top_p = 1.0;
  std::optional<double> min_p;
  double typical_p = 1.0;
  double epsilon_cutoff = 0.0;
  double eta_cutoff = 0.0;
  double repetition_penalty = 1.0;
  double frequency_penalty = 0.0;  // gengraph extension (OpenAI/vLLM semantics)
  double presence_penalty = 0.0;   // gengraph extension (OpenAI/vLLM semantics)
  int64_t no_repeat_ngram_size = 0;
  std::vector<std::vector<int64_t>> bad_words_ids;
  std::vector<std::pair<std::vector<int64_t>, double>> sequence_bias;
  std::vector<std::pair<int64_t, double>> logit_bias;  // gengraph extension: token -> added bias
  std::vector<int64_t> suppress_tokens;
  std::vector<int64_t> begin_suppress_tokens;
  std::optional<int64_t> forced_bos_token_id;
  std::vector<int64_t> forced_eos_token_id;
  std::optional<std::pair<int64_t, double>> exponential_decay_length_penalty;  // (start, factor)
  bool remove_invalid_values = false;
  bool renormalize_logits = false;

  // gengraph extension: an explicit processor chain in any order, replacing the one transformers
  // would build from the parameters above (which must then stay at their defaults).
  std::vector<PartSpec> processors;

  // Each generated token's score and a score per sequence (transformers' output_scores, read as
  // its compute_transition_scores gives them): for greedy search and sampling the token's
  // log-probability under the processed distribution it was chosen from (normalize_logits=True),
  // the sequence's score their sum; for beam strategies the processed log-probability of the
  // step (normalize_logits=False), the sequence's score as before.
  bool output_scores = false;
  // gengraph extension (OpenAI's top_logprobs): with k > 0, each generated token's k most likely
  // alternatives under that same distribution (greedy search and sampling only), and each token's
  // log-probability as output_scores gives it. 0..20.
  int64_t top_logprobs = 0;

  // Stopping (gengraph extension: token-id sequences; transformers' stop_strings need text).
  std::vector<std::vector<int64_t>> stop_sequences;

  // gengraph extensions: registered stopping criteria, added to the built-in ones, and a
  // registered search strategy, replacing the one the settings above would select.
  std::vector<PartSpec> stopping_criteria;
  std::optional<PartSpec> strategy;

  // Speculative decoding (docs/decoding.md#speculative-decoding), transformers' names: prompt
  // lookup proposes up to prompt_lookup_num_tokens candidates after a match of the last
  // max_matching_ngram_size (default 2) tokens; a registered candidate generator is named in
  // candidate_generator. assistant_early_exit drafts with the model's own first N layers (its
  // final norm and head after them). One sequence, greedy search or sampling.
  std::optional<int64_t> prompt_lookup_num_tokens;
  std::optional<int64_t> max_matching_ngram_size;
  std::optional<int64_t> assistant_early_exit;
  std::optional<PartSpec> candidate_generator;
  bool speculative() const {
    return prompt_lookup_num_tokens || assistant_early_exit || candidate_generator;
  }

  // Parts the caller built, used as they are (as llama.cpp's sampler chain and CTranslate2's
  // logits_processors take objects): processors after the chain the settings or `processors`
  // build, criteria beside the others, a strategy instead of the one the settings select. They
  // are kept from generation to generation (a strategy's begin() starts each afresh) and are not
  // thread-safe. Only C++ callers can set them; to_json() records their names.
  std::vector<std::shared_ptr<LogitsProcessor>> processor_objects;
  std::vector<std::shared_ptr<StoppingCriterion>> stopping_objects;
  std::shared_ptr<SearchStrategy> strategy_object;

  // Special tokens.
  std::vector<int64_t> eos_token_id;
  std::optional<int64_t> pad_token_id;
  std::optional<int64_t> bos_token_id;

  // Throws gengraph::Error naming the key, the value and the allowed range, for values and for
  // combinations (num_return_sequences > num_beams, num_beams % num_beam_groups, ...).
  void validate() const;
  // The total length (padded prompt + new tokens) as transformers resolves it.
  int64_t resolve_max_length(int64_t prompt_length, int64_t max_positions) const;
  // Checks every token id against the vocabulary.
  // `source_of(key)`, when given, names where a key's value came from (a file) in the error.
  void validate_for_vocab(
      int64_t vocab_size,
      const std::function<std::string(const std::string& key)>& source_of = {}) const;
  // True when any logits-processor parameter differs from its default.
  bool sets_processor_parameters() const;
  nlohmann::json to_json() const;
};

// The keys apply_generation_key understands.
const std::vector<std::string>& generation_keys();

// Keys of generation_config.json that describe the file rather than the decoding; never an error.
bool is_generation_metadata_key(const std::string& key);

// Sets one key from a JSON value; throws naming `source` and the key when the value is wrong or
// the key unknown (suggesting the closest valid key).
void apply_generation_key(ResolvedSettings& config, const std::string& key,
                          const nlohmann::json& value, const std::string& source);

// Applies a generation_config.json document. Keys that gengraph does not implement are returned
// (the caller reports them) rather than silently dropped.
std::vector<std::string> apply_generation_defaults(ResolvedSettings& config,
                                                   const nlohmann::json& doc,
                                                   const std::string& source);

// Checks every part a configuration names (processors, stopping_criteria, strategy): that it is
// registered and, where the part can, its parameters. Errors name the key and the entry.
// ResolvedSettings::validate calls it; it is defined with the registries (registry.cpp), so that
// these settings need not include them.
void check_registered_parts(const ResolvedSettings& config);

}  // namespace gengraph

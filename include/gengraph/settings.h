// Generation settings, typed, a public header: transformers' GenerationConfig names and meanings
// (docs/decoding.md). A field left unset keeps the model's default (its generation_config.json,
// then transformers'), exactly as a key left out of the JSON form does; the two forms are
// interchangeable (Engine::generate takes either) and are checked by the same code, so an invalid
// value gets the same error naming the key. `more` carries the keys that have no field here, in
// their JSON form: the decoding parts (processors, stopping_criteria, strategy) and the token
// maps (logit_bias, sequence_bias).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>
#include <vector>

namespace gengraph {

class GenerationSettings {
 public:
  // User-declared, so that a braced JSON object ({{"max_new_tokens", 8}}) always means the JSON
  // form.
  GenerationSettings() = default;

  // Length.
  std::optional<int64_t> max_new_tokens, min_new_tokens;
  std::optional<int64_t> max_length, min_length;  // prompt included
  std::optional<double> max_time;                 // seconds

  // The strategy: greedy search, sampling, beam search, beam sampling, diverse beam search.
  std::optional<bool> do_sample;
  std::optional<int64_t> num_beams, num_beam_groups, num_return_sequences;
  std::optional<double> length_penalty, diversity_penalty;
  enum class EarlyStopping { kFalse, kTrue, kNever };  // transformers' false, true, "never"
  std::optional<EarlyStopping> early_stopping;

  // Sampling.
  std::optional<double> temperature, top_p, min_p, typical_p, epsilon_cutoff, eta_cutoff;
  std::optional<int64_t> top_k;

  // Penalties and constraints.
  std::optional<double> repetition_penalty, presence_penalty, frequency_penalty;
  std::optional<int64_t> no_repeat_ngram_size;
  std::optional<std::vector<std::vector<int64_t>>> bad_words_ids, stop_sequences;
  std::optional<std::vector<int64_t>> suppress_tokens, begin_suppress_tokens;
  std::optional<int64_t> forced_bos_token_id;
  std::optional<std::vector<int64_t>> forced_eos_token_id;
  std::optional<std::pair<int64_t, double>> exponential_decay_length_penalty;  // (start, factor)
  std::optional<bool> remove_invalid_values, renormalize_logits;

  // Special tokens.
  std::optional<std::vector<int64_t>> eos_token_id;
  std::optional<int64_t> pad_token_id, bos_token_id;

  // Output: each token's log-probability and the sequence's score (Sequence::token_scores).
  std::optional<bool> output_scores;
  // gengraph extension (OpenAI's top_logprobs), 0..20: each token's k most likely alternatives
  // (Sequence::top_logprobs, StreamedToken::top), greedy search and sampling only.
  std::optional<int64_t> top_logprobs;

  // Speculative decoding by prompt lookup (one prompt; greedy search or sampling): up to
  // prompt_lookup_num_tokens candidates after a match of the last max_matching_ngram_size tokens.
  std::optional<int64_t> prompt_lookup_num_tokens, max_matching_ngram_size;
  // ... or by early exit: the model's own first assistant_early_exit layers draft.
  std::optional<int64_t> assistant_early_exit;

  // Any other key of a YAML `generation:` block, as JSON (processors, strategy, logit_bias, ...).
  nlohmann::json more = nlohmann::json::object();

  // The JSON form: the fields set, then `more`'s keys. A key given both as a field and in `more`
  // is a gengraph::Error naming it; so is a `more` that is not a JSON object.
  nlohmann::json to_json() const;
};

}  // namespace gengraph

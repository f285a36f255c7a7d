// GenerationSettings' JSON form (include/gengraph/settings.h).
#include <gengraph/error.h>
#include <gengraph/settings.h>

#include <string>

namespace gengraph {
namespace {

template <class T>
void put(nlohmann::json& out, const char* key, const std::optional<T>& value) {
  if (value) out[key] = *value;
}

}  // namespace

nlohmann::json GenerationSettings::to_json() const {
  nlohmann::json out = nlohmann::json::object();
  put(out, "max_new_tokens", max_new_tokens);
  put(out, "min_new_tokens", min_new_tokens);
  put(out, "max_length", max_length);
  put(out, "min_length", min_length);
  put(out, "max_time", max_time);
  put(out, "do_sample", do_sample);
  put(out, "num_beams", num_beams);
  put(out, "num_beam_groups", num_beam_groups);
  put(out, "num_return_sequences", num_return_sequences);
  put(out, "length_penalty", length_penalty);
  put(out, "diversity_penalty", diversity_penalty);
  if (early_stopping) {
    out["early_stopping"] = *early_stopping == EarlyStopping::kNever
                                ? nlohmann::json("never")
                                : nlohmann::json(*early_stopping == EarlyStopping::kTrue);
  }
  put(out, "temperature", temperature);
  put(out, "top_p", top_p);
  put(out, "min_p", min_p);
  put(out, "typical_p", typical_p);
  put(out, "epsilon_cutoff", epsilon_cutoff);
  put(out, "eta_cutoff", eta_cutoff);
  put(out, "top_k", top_k);
  put(out, "repetition_penalty", repetition_penalty);
  put(out, "presence_penalty", presence_penalty);
  put(out, "frequency_penalty", frequency_penalty);
  put(out, "no_repeat_ngram_size", no_repeat_ngram_size);
  put(out, "bad_words_ids", bad_words_ids);
  put(out, "stop_sequences", stop_sequences);
  put(out, "suppress_tokens", suppress_tokens);
  put(out, "begin_suppress_tokens", begin_suppress_tokens);
  put(out, "forced_bos_token_id", forced_bos_token_id);
  put(out, "forced_eos_token_id", forced_eos_token_id);
  if (exponential_decay_length_penalty) {
    out["exponential_decay_length_penalty"] = {exponential_decay_length_penalty->first,
                                               exponential_decay_length_penalty->second};
  }
  put(out, "remove_invalid_values", remove_invalid_values);
  put(out, "renormalize_logits", renormalize_logits);
  put(out, "eos_token_id", eos_token_id);
  put(out, "pad_token_id", pad_token_id);
  put(out, "bos_token_id", bos_token_id);
  put(out, "output_scores", output_scores);
  put(out, "top_logprobs", top_logprobs);
  put(out, "prompt_lookup_num_tokens", prompt_lookup_num_tokens);
  put(out, "max_matching_ngram_size", max_matching_ngram_size);
  put(out, "assistant_early_exit", assistant_early_exit);
  if (!more.is_object()) {
    throw Error("GenerationSettings::more: expected a JSON object of generation keys, found " +
                std::string(more.type_name()));
  }
  for (auto it = more.begin(); it != more.end(); ++it) {
    if (out.contains(it.key())) {
      throw Error("GenerationSettings: '" + it.key() +
                  "' is given both as a field and in `more`; give it once");
    }
    out[it.key()] = it.value();
  }
  return out;
}

}  // namespace gengraph

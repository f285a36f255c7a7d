#include "framework/decoding/resolved_settings.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "framework/decoding/processors/logits_processor.h"
#include "framework/decoding/search/search_strategy.h"
#include "framework/decoding/stopping/stopping_criteria.h"
#include "framework/util/error.h"
#include "framework/util/strings.h"

namespace gengraph {
namespace {

using Json = nlohmann::json;

// A value as the user wrote it: JSON prints NaN and infinities as null, which would misreport
// `.nan` or `.inf` from YAML.
std::string text_of(const Json& v) {
  if (v.is_number_float() && !std::isfinite(v.get<double>())) {
    const double d = v.get<double>();
    return std::isnan(d) ? "NaN" : (d > 0 ? "Infinity" : "-Infinity");
  }
  return v.dump();
}

[[noreturn]] void bad(const std::string& source, const std::string& key,
                      const std::string& expected, const Json& found) {
  throw Error(source + ": '" + key + "': expected " + expected + ", found " + text_of(found));
}

struct Reader {
  const std::string& source;
  const std::string& key;
  const Json& v;

  int64_t integer(int64_t min) const {
    if (!v.is_number_integer() || v.get<int64_t>() < min) {
      bad(source, key, "an integer >= " + std::to_string(min), v);
    }
    return v.get<int64_t>();
  }
  std::optional<int64_t> opt_integer(int64_t min) const {
    if (v.is_null()) return std::nullopt;
    return integer(min);
  }
  double number(const std::string& expected, const std::function<bool(double)>& ok) const {
    if (!v.is_number() || !std::isfinite(v.get<double>()) || !ok(v.get<double>()))
      bad(source, key, expected, v);
    return v.get<double>();
  }
  bool boolean() const {
    if (!v.is_boolean()) bad(source, key, "true or false", v);
    return v.get<bool>();
  }
  static int64_t token_of(const Json& x, const std::string& source, const std::string& key) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0)
      bad(source, key, "non-negative token ids", x);
    return x.get<int64_t>();
  }
  std::optional<int64_t> token() const {
    if (v.is_null()) return std::nullopt;
    if (v.is_array() && v.size() == 1) return token_of(v[0], source, key);
    return token_of(v, source, key);
  }
  // A part by name: "name" or {name: ..., <parameters>}.
  PartSpec component(const Json& item) const {
    if (item.is_string()) return {item.get<std::string>(), Json::object()};
    if (!item.is_object() || !item.contains("name") || !item["name"].is_string()) {
      bad(source, key, "a name or {name: ..., <parameters>}", item);
    }
    Json params = item;
    params.erase("name");
    return {item["name"].get<std::string>(), params};
  }
  std::vector<PartSpec> components() const {
    if (v.is_null()) return {};
    if (!v.is_array()) bad(source, key, "a list of {name: ..., <parameters>}", v);
    std::vector<PartSpec> out;
    for (const auto& item : v) out.push_back(component(item));
    return out;
  }
  std::vector<int64_t> tokens() const {
    if (v.is_null()) return {};
    if (v.is_number()) return {token_of(v, source, key)};
    if (!v.is_array()) bad(source, key, "a token id or a list of token ids", v);
    std::vector<int64_t> out;
    for (const auto& x : v) out.push_back(token_of(x, source, key));
    return out;
  }
  std::vector<std::vector<int64_t>> token_lists() const {
    if (v.is_null()) return {};
    if (!v.is_array() || v.empty()) bad(source, key, "a non-empty list of token-id lists", v);
    std::vector<std::vector<int64_t>> out;
    for (const auto& seq : v) {
      if (!seq.is_array() || seq.empty()) bad(source, key, "non-empty lists of token ids", seq);
      out.emplace_back();
      for (const auto& x : seq) out.back().push_back(token_of(x, source, key));
    }
    return out;
  }
};

using Setter = std::function<void(ResolvedSettings&, const Reader&)>;

bool positive(double x) { return x > 0; }
bool unit_open_closed(double x) { return x > 0 && x <= 1; }
bool unit_closed(double x) { return x >= 0 && x <= 1; }
bool unit_half_open(double x) { return x >= 0 && x < 1; }
bool any_number(double) { return true; }

const std::map<std::string, Setter>& setters() {
  static const std::map<std::string, Setter> kSetters = {
      {"max_new_tokens", [](auto& c, const Reader& r) { c.max_new_tokens = r.opt_integer(1); }},
      {"max_length", [](auto& c, const Reader& r) { c.max_length = r.opt_integer(1); }},
      {"min_length",
       [](auto& c, const Reader& r) { c.min_length = r.v.is_null() ? 0 : r.integer(0); }},
      {"min_new_tokens", [](auto& c, const Reader& r) { c.min_new_tokens = r.opt_integer(0); }},
      {"max_time",
       [](auto& c, const Reader& r) {
         c.max_time =
             r.v.is_null()
                 ? std::nullopt
                 : std::optional<double>(r.number("a positive number of seconds", positive));
       }},
      {"do_sample", [](auto& c, const Reader& r) { c.do_sample = r.boolean(); }},
      {"num_beams", [](auto& c, const Reader& r) { c.num_beams = r.integer(1); }},
      {"num_beam_groups", [](auto& c, const Reader& r) { c.num_beam_groups = r.integer(1); }},
      {"diversity_penalty",
       [](auto& c, const Reader& r) {
         c.diversity_penalty = r.number("a number >= 0", [](double x) { return x >= 0; });
       }},
      {"length_penalty",
       [](auto& c, const Reader& r) { c.length_penalty = r.number("a number", any_number); }},
      {"early_stopping",
       [](auto& c, const Reader& r) {
         if (r.v.is_boolean()) {
           c.early_stopping = r.v.get<bool>() ? EarlyStopping::kTrue : EarlyStopping::kFalse;
         } else if (r.v.is_string() && r.v.get<std::string>() == "never") {
           c.early_stopping = EarlyStopping::kNever;
         } else {
           bad(r.source, r.key, "true, false or \"never\"", r.v);
         }
       }},
      {"num_return_sequences",
       [](auto& c, const Reader& r) { c.num_return_sequences = r.integer(1); }},
      {"temperature",
       [](auto& c, const Reader& r) { c.temperature = r.number("a number > 0", positive); }},
      {"top_k", [](auto& c, const Reader& r) { c.top_k = r.v.is_null() ? 0 : r.integer(0); }},
      {"top_p",
       [](auto& c, const Reader& r) {
         c.top_p = r.number("a number in (0, 1]", unit_open_closed);
       }},
      {"min_p",
       [](auto& c, const Reader& r) {
         c.min_p = r.v.is_null()
                       ? std::nullopt
                       : std::optional<double>(r.number("a number in [0, 1]", unit_closed));
       }},
      {"typical_p",
       [](auto& c, const Reader& r) {
         c.typical_p = r.number("a number in (0, 1]", unit_open_closed);
       }},
      {"epsilon_cutoff",
       [](auto& c, const Reader& r) {
         c.epsilon_cutoff = r.number("a number in [0, 1)", unit_half_open);
       }},
      {"eta_cutoff",
       [](auto& c, const Reader& r) {
         c.eta_cutoff = r.number("a number in [0, 1)", unit_half_open);
       }},
      {"repetition_penalty",
       [](auto& c, const Reader& r) { c.repetition_penalty = r.number("a number > 0", positive); }},
      {"frequency_penalty",
       [](auto& c, const Reader& r) { c.frequency_penalty = r.number("a number", any_number); }},
      {"presence_penalty",
       [](auto& c, const Reader& r) { c.presence_penalty = r.number("a number", any_number); }},
      {"no_repeat_ngram_size",
       [](auto& c, const Reader& r) { c.no_repeat_ngram_size = r.v.is_null() ? 0 : r.integer(0); }},
      {"bad_words_ids", [](auto& c, const Reader& r) { c.bad_words_ids = r.token_lists(); }},
      {"sequence_bias",
       [](auto& c, const Reader& r) {
         c.sequence_bias.clear();
         if (r.v.is_null()) return;
         if (!r.v.is_array() || r.v.empty())
           bad(r.source, r.key, "a list of [[token ids], bias] pairs", r.v);
         for (const auto& pair : r.v) {
           if (!pair.is_array() || pair.size() != 2 || !pair[0].is_array() || pair[0].empty() ||
               !pair[1].is_number()) {
             bad(r.source, r.key, "[[token ids], bias] pairs", pair);
           }
           std::vector<int64_t> ids;
           for (const auto& x : pair[0]) ids.push_back(Reader::token_of(x, r.source, r.key));
           c.sequence_bias.emplace_back(ids, pair[1].get<double>());
         }
       }},
      {"logit_bias",
       [](auto& c, const Reader& r) {
         c.logit_bias.clear();
         if (r.v.is_null()) return;
         if (!r.v.is_object()) bad(r.source, r.key, "a mapping {token id: bias}", r.v);
         for (auto it = r.v.begin(); it != r.v.end(); ++it) {
           size_t used = 0;
           int64_t id = -1;
           try {
             id = std::stoll(it.key(), &used);
           } catch (const std::exception&) {
             used = 0;
           }
           if (used != it.key().size() || id < 0 || !it.value().is_number()) {
             bad(r.source, r.key, "token id keys with numeric biases",
                 Json{{it.key(), it.value()}});
           }
           c.logit_bias.emplace_back(id, it.value().get<double>());
         }
       }},
      {"suppress_tokens", [](auto& c, const Reader& r) { c.suppress_tokens = r.tokens(); }},
      {"begin_suppress_tokens",
       [](auto& c, const Reader& r) { c.begin_suppress_tokens = r.tokens(); }},
      {"forced_bos_token_id", [](auto& c, const Reader& r) { c.forced_bos_token_id = r.token(); }},
      {"forced_eos_token_id", [](auto& c, const Reader& r) { c.forced_eos_token_id = r.tokens(); }},
      {"exponential_decay_length_penalty",
       [](auto& c, const Reader& r) {
         if (r.v.is_null()) {
           c.exponential_decay_length_penalty.reset();
           return;
         }
         if (!r.v.is_array() || r.v.size() != 2 || !r.v[0].is_number_integer() ||
             r.v[0].get<int64_t>() < 0 || !r.v[1].is_number() || !(r.v[1].get<double>() > 0)) {
           bad(r.source, r.key, "[start index >= 0, decay factor > 0]", r.v);
         }
         c.exponential_decay_length_penalty =
             std::make_pair(r.v[0].get<int64_t>(), r.v[1].get<double>());
       }},
      {"remove_invalid_values",
       [](auto& c, const Reader& r) { c.remove_invalid_values = r.boolean(); }},
      {"renormalize_logits", [](auto& c, const Reader& r) { c.renormalize_logits = r.boolean(); }},
      {"output_scores", [](auto& c, const Reader& r) { c.output_scores = r.boolean(); }},
      {"top_logprobs",
       [](auto& c, const Reader& r) {
         if (r.v.is_null()) {
           c.top_logprobs = 0;
         } else if (!r.v.is_number_integer() || r.v.get<int64_t>() < 0 || r.v.get<int64_t>() > 20) {
           bad(r.source, r.key, "an integer in [0, 20]", r.v);
         } else {
           c.top_logprobs = r.v.get<int64_t>();
         }
       }},
      {"processors", [](auto& c, const Reader& r) { c.processors = r.components(); }},
      {"stopping_criteria", [](auto& c, const Reader& r) { c.stopping_criteria = r.components(); }},
      {"strategy",
       [](auto& c, const Reader& r) {
         c.strategy.reset();
         if (r.v.is_null()) return;
         c.strategy = r.component(r.v);
       }},
      {"stop_sequences", [](auto& c, const Reader& r) { c.stop_sequences = r.token_lists(); }},
      {"prompt_lookup_num_tokens",
       [](auto& c, const Reader& r) { c.prompt_lookup_num_tokens = r.opt_integer(1); }},
      {"max_matching_ngram_size",
       [](auto& c, const Reader& r) { c.max_matching_ngram_size = r.opt_integer(1); }},
      {"assistant_early_exit",
       [](auto& c, const Reader& r) { c.assistant_early_exit = r.opt_integer(1); }},
      {"candidate_generator",
       [](auto& c, const Reader& r) {
         c.candidate_generator.reset();
         if (r.v.is_null()) return;
         c.candidate_generator = r.component(r.v);
       }},
      {"eos_token_id", [](auto& c, const Reader& r) { c.eos_token_id = r.tokens(); }},
      {"pad_token_id", [](auto& c, const Reader& r) { c.pad_token_id = r.token(); }},
      {"bos_token_id", [](auto& c, const Reader& r) { c.bos_token_id = r.token(); }},
  };
  return kSetters;
}

[[noreturn]] void invalid(const std::string& what) { throw Error("generation: " + what); }

}  // namespace

const std::vector<std::string>& generation_keys() {
  static const std::vector<std::string> kKeys = [] {
    std::vector<std::string> k;
    for (const auto& [name, s] : setters()) k.push_back(name);
    return k;
  }();
  return kKeys;
}

bool is_generation_metadata_key(const std::string& key) {
  return key == "transformers_version" || key == "_from_model_config" || key == "use_cache" ||
         key == "return_dict_in_generate" || key == "output_logits" || key == "output_attentions" ||
         key == "output_hidden_states" || key == "decoder_start_token_id";
}

void apply_generation_key(ResolvedSettings& c, const std::string& key, const Json& v,
                          const std::string& source) {
  auto it = setters().find(key);
  if (it == setters().end()) {
    throw Error(source + ": unknown generation parameter '" + key + "'" +
                did_you_mean(key, generation_keys()) + "; known: " + join(generation_keys(), ", "));
  }
  it->second(c, Reader{source, key, v});
}

std::vector<std::string> apply_generation_defaults(ResolvedSettings& c, const Json& doc,
                                                   const std::string& source) {
  if (!doc.is_object()) throw Error(source + ": expected a JSON object");
  std::vector<std::string> ignored;
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    if (is_generation_metadata_key(it.key())) continue;
    if (!setters().count(it.key())) {
      ignored.push_back(it.key());
      continue;
    }
    apply_generation_key(c, it.key(), it.value(), source);
  }
  return ignored;
}

void ResolvedSettings::validate() const {
  const std::string beams = std::to_string(num_beams);
  if (num_beams == 1 && num_beam_groups > 1) {
    invalid("'num_beam_groups' (" + std::to_string(num_beam_groups) + ") needs num_beams > 1");
  }
  if (num_beams % num_beam_groups != 0) {
    invalid("'num_beams' (" + beams + ") must be divisible by 'num_beam_groups' (" +
            std::to_string(num_beam_groups) + ")");
  }
  if (num_beam_groups > 1 && do_sample) {
    invalid("diverse beam search ('num_beam_groups' > 1) cannot sample; set do_sample: false");
  }
  if (diversity_penalty > 0 && num_beam_groups == 1) {
    invalid("'diversity_penalty' has no effect without 'num_beam_groups' > 1");
  }
  if (num_beams > 1 && num_return_sequences > num_beams) {
    invalid("'num_return_sequences' (" + std::to_string(num_return_sequences) +
            ") must not exceed num_beams (" + beams + ")");
  }
  if (num_beams == 1 && !do_sample && num_return_sequences > 1) {
    invalid(
        "greedy search returns one sequence; 'num_return_sequences' > 1 needs do_sample: true or "
        "num_beams > 1");
  }
  if (top_logprobs > 0 && num_beams > 1) {
    invalid("'top_logprobs' (" + std::to_string(top_logprobs) +
            ") needs greedy search or sampling (num_beams 1), found num_beams " + beams +
            (num_beam_groups > 1 ? " in " + std::to_string(num_beam_groups) + " groups" : "") +
            ": a beam strategy fixes its tokens only at the end");
  }
  if (!processors.empty() && sets_processor_parameters()) {
    invalid(
        "'processors' replaces the chain built from processor parameters (temperature, top_k, "
        "...); set those inside the list, not beside it");
  }
  check_registered_parts(*this);
  if (int(prompt_lookup_num_tokens.has_value()) + int(assistant_early_exit.has_value()) +
          int(candidate_generator.has_value()) >
      1) {
    invalid(
        "'prompt_lookup_num_tokens', 'assistant_early_exit' and 'candidate_generator' each choose "
        "speculative decoding's candidates; give one of them");
  }
  if (speculative()) {
    const std::string what =
        "speculative decoding (" +
        std::string(candidate_generator    ? "candidate_generator"
                    : assistant_early_exit ? "assistant_early_exit"
                                           : "prompt_lookup_num_tokens") +
        ") verifies the candidates of one sequence, as transformers' assisted generation does: ";
    if (num_beams > 1) invalid(what + "it cannot run beam search (num_beams " + beams + ")");
    if (num_return_sequences > 1) {
      invalid(what + "'num_return_sequences' must be 1, found " +
              std::to_string(num_return_sequences));
    }
  }
  for (size_t i = 0; i < processor_objects.size(); ++i) {
    if (!processor_objects[i]) invalid("'processor_objects[" + std::to_string(i) + "]' is null");
  }
  for (size_t i = 0; i < stopping_objects.size(); ++i) {
    if (!stopping_objects[i]) invalid("'stopping_objects[" + std::to_string(i) + "]' is null");
  }
  if (strategy_object) {
    if (strategy) {
      invalid(
          "'strategy' names a registered strategy and a strategy object was passed too; "
          "give one");
    }
    const int64_t rows = strategy_object->rows_per_input();
    if ((num_beams > 1 || num_return_sequences > 1) &&
        rows != std::max(num_beams, num_return_sequences)) {
      invalid("the strategy object '" + strategy_object->name() + "' uses " + std::to_string(rows) +
              " row(s) per input, but num_beams is " + beams + " and num_return_sequences " +
              std::to_string(num_return_sequences) +
              "; those settings apply to the built-in strategies only");
    }
  }
  // Without an EOS id there is nothing for these to suppress; transformers drops them silently.
  if (eos_token_id.empty() && min_length > 0) invalid("'min_length' needs an 'eos_token_id'");
  if (eos_token_id.empty() && min_new_tokens.value_or(0) > 0) {
    invalid("'min_new_tokens' needs an 'eos_token_id'");
  }
  if (eos_token_id.empty() && exponential_decay_length_penalty) {
    invalid("'exponential_decay_length_penalty' needs an 'eos_token_id'");
  }
}

int64_t ResolvedSettings::resolve_max_length(int64_t prompt_length, int64_t max_positions) const {
  if (max_new_tokens) return prompt_length + *max_new_tokens;
  if (max_length) {
    if (*max_length <= prompt_length) {
      throw Error("generation: 'max_length' " + std::to_string(*max_length) +
                  " leaves no room after the longest prompt (" + std::to_string(prompt_length) +
                  " tokens, padding included); raise it or set max_new_tokens");
    }
    return *max_length;
  }
  return std::min(prompt_length + 20, max_positions);
}

void ResolvedSettings::validate_for_vocab(
    int64_t vocab, const std::function<std::string(const std::string&)>& source_of) const {
  auto check = [&](const char* key, int64_t id) {
    if (id < 0 || id >= vocab) {
      throw Error((source_of ? source_of(key) : std::string("generation")) + ": '" + key +
                  "': token id " + std::to_string(id) + " is outside the model's vocabulary [0, " +
                  std::to_string(vocab) + ")");
    }
  };
  for (auto id : eos_token_id) check("eos_token_id", id);
  if (pad_token_id) check("pad_token_id", *pad_token_id);
  if (bos_token_id) check("bos_token_id", *bos_token_id);
  if (forced_bos_token_id) check("forced_bos_token_id", *forced_bos_token_id);
  for (auto id : forced_eos_token_id) check("forced_eos_token_id", id);
  for (auto id : suppress_tokens) check("suppress_tokens", id);
  for (auto id : begin_suppress_tokens) check("begin_suppress_tokens", id);
  for (const auto& s : bad_words_ids)
    for (auto id : s) check("bad_words_ids", id);
  for (const auto& [s, b] : sequence_bias)
    for (auto id : s) check("sequence_bias", id);
  for (const auto& [id, b] : logit_bias) check("logit_bias", id);
  for (const auto& s : stop_sequences)
    for (auto id : s) check("stop_sequences", id);
  if (top_logprobs > vocab) {
    throw Error((source_of ? source_of("top_logprobs") : std::string("generation")) +
                ": 'top_logprobs': expected at most the model's vocabulary of " +
                std::to_string(vocab) + " tokens, found " + std::to_string(top_logprobs));
  }
}

bool ResolvedSettings::sets_processor_parameters() const {
  return temperature != 1.0 || top_k != 50 || top_p != 1.0 || min_p || typical_p != 1.0 ||
         epsilon_cutoff != 0.0 || eta_cutoff != 0.0 || repetition_penalty != 1.0 ||
         frequency_penalty != 0.0 || presence_penalty != 0.0 || no_repeat_ngram_size != 0 ||
         !bad_words_ids.empty() || !sequence_bias.empty() || !logit_bias.empty() ||
         !suppress_tokens.empty() || !begin_suppress_tokens.empty() || forced_bos_token_id ||
         !forced_eos_token_id.empty() || exponential_decay_length_penalty ||
         remove_invalid_values || renormalize_logits || min_length != 0 || min_new_tokens;
}

Json ResolvedSettings::to_json() const {
  auto opt = [](const auto& o) { return o ? Json(*o) : Json(); };
  Json j;
  j["max_new_tokens"] = opt(max_new_tokens);
  j["max_length"] = opt(max_length);
  j["min_length"] = min_length;
  j["min_new_tokens"] = opt(min_new_tokens);
  j["max_time"] = opt(max_time);
  j["do_sample"] = do_sample;
  j["num_beams"] = num_beams;
  j["num_beam_groups"] = num_beam_groups;
  j["diversity_penalty"] = diversity_penalty;
  j["length_penalty"] = length_penalty;
  j["early_stopping"] = early_stopping == EarlyStopping::kNever
                            ? Json("never")
                            : Json(early_stopping == EarlyStopping::kTrue);
  j["num_return_sequences"] = num_return_sequences;
  j["temperature"] = temperature;
  j["top_k"] = top_k;
  j["top_p"] = top_p;
  j["min_p"] = opt(min_p);
  j["typical_p"] = typical_p;
  j["epsilon_cutoff"] = epsilon_cutoff;
  j["eta_cutoff"] = eta_cutoff;
  j["repetition_penalty"] = repetition_penalty;
  j["frequency_penalty"] = frequency_penalty;
  j["presence_penalty"] = presence_penalty;
  j["no_repeat_ngram_size"] = no_repeat_ngram_size;
  j["bad_words_ids"] = bad_words_ids;
  j["sequence_bias"] = Json::array();
  for (const auto& [ids, b] : sequence_bias) j["sequence_bias"].push_back({ids, b});
  j["logit_bias"] = Json::object();
  for (const auto& [id, b] : logit_bias) j["logit_bias"][std::to_string(id)] = b;
  j["suppress_tokens"] = suppress_tokens;
  j["begin_suppress_tokens"] = begin_suppress_tokens;
  j["forced_bos_token_id"] = opt(forced_bos_token_id);
  j["forced_eos_token_id"] = forced_eos_token_id;
  j["exponential_decay_length_penalty"] =
      exponential_decay_length_penalty
          ? Json{exponential_decay_length_penalty->first, exponential_decay_length_penalty->second}
          : Json();
  j["remove_invalid_values"] = remove_invalid_values;
  j["renormalize_logits"] = renormalize_logits;
  if (output_scores) j["output_scores"] = true;  // written only when set: earlier results' form
  if (top_logprobs > 0) j["top_logprobs"] = top_logprobs;  // the same
  j["processors"] = Json::array();
  for (const auto& p : processors) {
    Json e = p.params;
    e["name"] = p.name;
    j["processors"].push_back(e);
  }
  j["stop_sequences"] = stop_sequences;
  // Written only when set, so results of runs without them keep their exact form.
  auto component = [](const PartSpec& p) {
    Json e = p.params;
    e["name"] = p.name;
    return e;
  };
  if (!stopping_criteria.empty()) {
    j["stopping_criteria"] = Json::array();
    for (const auto& p : stopping_criteria) j["stopping_criteria"].push_back(component(p));
  }
  if (strategy) j["strategy"] = component(*strategy);
  if (prompt_lookup_num_tokens) j["prompt_lookup_num_tokens"] = *prompt_lookup_num_tokens;
  if (max_matching_ngram_size) j["max_matching_ngram_size"] = *max_matching_ngram_size;
  if (assistant_early_exit) j["assistant_early_exit"] = *assistant_early_exit;
  if (candidate_generator) j["candidate_generator"] = component(*candidate_generator);
  // Objects the caller built: their names (what they hold is the caller's).
  if (!processor_objects.empty()) {
    j["processor_objects"] = Json::array();
    for (const auto& p : processor_objects) j["processor_objects"].push_back(p->name());
  }
  if (!stopping_objects.empty()) {
    j["stopping_objects"] = Json::array();
    for (const auto& p : stopping_objects) j["stopping_objects"].push_back(p->name());
  }
  if (strategy_object) j["strategy_object"] = strategy_object->name();
  j["eos_token_id"] = eos_token_id;
  j["pad_token_id"] = opt(pad_token_id);
  j["bos_token_id"] = opt(bos_token_id);
  return j;
}

}  // namespace gengraph

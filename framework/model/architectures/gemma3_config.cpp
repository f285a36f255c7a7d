// config.json of Gemma 3's text model, read as transformers 5.17's Gemma3TextConfig reads it.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <tuple>

#include "framework/model/architectures/gemma3.h"
#include "framework/model/architectures/layer_functions.h"
#include "framework/model/json_fields.h"

namespace gengraph {
namespace {

const char* const kFull = "full_attention";
const char* const kSliding = "sliding_attention";

// One layer type's rope dict, after Gemma3TextConfig's standardisation: "rope_type" (else the
// older "type", else "default"), "rope_theta" from the dict, else `theta_key` at the top level
// (rope_theta for global layers, rope_local_base_freq for local ones), else `default_theta`.
RopeConfig parse_layer_rope(const nlohmann::json& dict, const nlohmann::json& doc,
                            const std::string& source, const std::string& layer_type,
                            const char* theta_key, double default_theta) {
  const JsonFields top(doc, source);
  const JsonFields p(dict, source, "rope_parameters." + layer_type + ".");
  RopeConfig r;
  const std::string type_key = p.has("rope_type") || !p.has("type") ? "rope_type" : "type";
  r.type = p.string(type_key, "default");
  if (r.type != "default" && r.type != "linear") {
    p.fail(type_key, "default or linear (the rope types implemented for gemma3_text)");
  }
  r.theta = p.has("rope_theta") ? p.positive_number("rope_theta", 1.0)
                                : top.positive_number(theta_key, default_theta);
  // transformers copies a top-level partial_rotary_factor into each dict that has none.
  const JsonFields& partial = p.has("partial_rotary_factor") ? p : top;
  if (partial.number("partial_rotary_factor", 1.0) != 1.0) {
    partial.fail("partial_rotary_factor", "1 (partial rotary is not supported for gemma3_text)");
  }
  if (r.type == "linear") {
    if (!p.has("factor")) p.fail("factor", "a positive number (required by rope_type 'linear')");
    r.factor = p.positive_number("factor", 1.0);
  }
  return r;
}

// The per-layer-type rope dicts as Gemma3TextConfig builds them: rope_parameters (default: a
// "default" dict for each type), rope_scaling merged into the full_attention dict, a missing or
// null dict replaced by a "default" one.
std::pair<RopeConfig, RopeConfig> parse_ropes(const nlohmann::json& doc,
                                              const std::string& source) {
  const JsonFields top(doc, source);
  nlohmann::json dicts = nlohmann::json::object();
  if (top.has("rope_parameters")) {
    const auto& given = doc["rope_parameters"];
    const std::string expected =
        "an object of rope dicts per layer type (full_attention, sliding_attention)";
    if (!given.is_object()) top.fail("rope_parameters", expected);
    for (auto it = given.begin(); it != given.end(); ++it) {
      if (it.key() != kFull && it.key() != kSliding) {
        const JsonFields p(given, source, "rope_parameters.");
        p.fail(it.key(),
               "only full_attention and sliding_attention (gemma3_text's rope is per "
               "layer type; transformers fails on a single dict)");
      }
      if (!it.value().is_null() && !it.value().is_object()) {
        const JsonFields p(given, source, "rope_parameters.");
        p.fail(it.key(), "an object");
      }
    }
    dicts = given;
  } else {
    dicts = {{kSliding, {{"rope_type", "default"}}}, {kFull, {{"rope_type", "default"}}}};
  }
  if (top.has("rope_scaling")) {
    if (!doc["rope_scaling"].is_object()) top.fail("rope_scaling", "an object");
    if (!dicts.contains(kFull) || !dicts[kFull].is_object()) {
      top.fail("rope_scaling",
               "no rope_scaling beside a rope_parameters without a full_attention "
               "dict (transformers fails on it)");
    }
    dicts[kFull].update(doc["rope_scaling"]);  // rope_scaling applies to the global layers only
  }
  for (const char* t : {kFull, kSliding}) {
    if (!dicts.contains(t) || dicts[t].is_null()) dicts[t] = {{"rope_type", "default"}};
  }
  return {parse_layer_rope(dicts[kFull], doc, source, kFull, "rope_theta", 1e6),
          parse_layer_rope(dicts[kSliding], doc, source, kSliding, "rope_local_base_freq", 1e4)};
}

// Which layers are local: layer_types, else every layer but each sliding_window_pattern-th.
std::vector<bool> sliding_layers(const JsonFields& f, const nlohmann::json& doc, int64_t layers) {
  std::vector<bool> out;
  if (!f.has("layer_types")) {
    const int64_t pattern = f.positive_int("sliding_window_pattern", 6);
    for (int64_t i = 0; i < layers; ++i) out.push_back((i + 1) % pattern != 0);
    return out;
  }
  const auto& types = doc["layer_types"];
  const std::string expected = "a list of " + std::to_string(layers) +
                               " entries (num_hidden_layers), each \"full_attention\" or "
                               "\"sliding_attention\"";
  if (!types.is_array() || static_cast<int64_t>(types.size()) != layers) {
    f.fail("layer_types", expected);
  }
  for (const auto& t : types) {
    if (t != kFull && t != kSliding) f.fail("layer_types", expected);
    out.push_back(t == kSliding);
  }
  return out;
}

std::optional<int64_t> token_or(const JsonFields& f, const nlohmann::json& doc,
                                const std::string& key, std::optional<int64_t> fallback) {
  return doc.contains(key) ? f.optional_token(key) : fallback;  // an explicit null means none
}

}  // namespace

Gemma3Settings gemma3_settings(const nlohmann::json& doc, const std::string& source) {
  const JsonFields f(doc, source);
  Gemma3Settings s;
  std::tie(s.global_rope, s.local_rope) = parse_ropes(doc, source);
  s.query_pre_attn_scalar = f.positive_number("query_pre_attn_scalar", 256.0);
  if (f.has("final_logit_softcapping")) {
    s.final_logit_softcapping = f.positive_number("final_logit_softcapping", 1.0);
  }
  if (f.has("attn_logit_softcapping")) {
    f.fail("attn_logit_softcapping", "null (attention logit softcapping is not supported)");
  }
  if (f.boolean("use_bidirectional_attention", false)) {
    f.fail("use_bidirectional_attention", "false (bidirectional attention is not supported)");
  }
  return s;
}

// Shape keys are required, as for the LLaMA family: a config.json saved by transformers always
// has them. The other keys take Gemma3TextConfig's defaults (head_dim 256, 4 key/value heads,
// tied embeddings, bos 2, eos 1, pad 0, ...).
ModelConfig parse_gemma3_config(const nlohmann::json& doc, const std::string& source) {
  const JsonFields f(doc, source);
  ModelConfig c;
  c.vocab_size = f.positive_int("vocab_size");
  c.hidden_size = f.positive_int("hidden_size");
  c.intermediate_size = f.positive_int("intermediate_size");
  c.num_layers = f.positive_int("num_hidden_layers");
  c.num_heads = f.positive_int("num_attention_heads");
  if (c.hidden_size % c.num_heads != 0) {  // Gemma3TextConfig checks it, head_dim notwithstanding
    f.fail("num_attention_heads",
           "a divisor of hidden_size (" + std::to_string(c.hidden_size) + ")");
  }
  c.num_kv_heads = f.positive_int("num_key_value_heads", 4);
  if (c.num_heads % c.num_kv_heads != 0) {
    f.fail("num_key_value_heads",
           "a divisor of num_attention_heads (" + std::to_string(c.num_heads) + ")");
  }
  c.head_dim = f.positive_int("head_dim", 256);
  if (c.head_dim % 2 != 0) {
    f.fail("head_dim", "an even head size (rotary embeddings rotate pairs of dimensions)");
  }
  c.max_positions = f.positive_int("max_position_embeddings", 131072);
  c.norm_eps = f.positive_number("rms_norm_eps", 1e-6);
  c.activation = f.string("hidden_activation", "gelu_pytorch_tanh");
  parse_activation(c.activation, source);
  c.initializer_range = f.positive_number("initializer_range", 0.02);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", true);
  c.qkv_bias = c.out_proj_bias = f.boolean("attention_bias", false);
  c.rotary_dim = c.head_dim;
  const Gemma3Settings s = gemma3_settings(doc, source);
  c.rope = s.global_rope;  // ModelConfig holds one; the model reads both from the document
  const std::vector<bool> sliding = sliding_layers(f, doc, c.num_layers);
  if (std::find(sliding.begin(), sliding.end(), true) != sliding.end()) {
    // An absent key means Gemma3TextConfig's 4096; an explicit null leaves local layers without
    // a window, which transformers cannot run.
    if (doc.contains("sliding_window") && !f.has("sliding_window")) {
      f.fail("sliding_window",
             "a positive integer (layers slide: layer_types or "
             "sliding_window_pattern mark sliding_attention layers)");
    }
    c.sliding_window = f.positive_int("sliding_window", 4096);
    c.sliding_layers = sliding;
  } else if (f.has("sliding_window")) {
    f.positive_int("sliding_window", 0);  // checked, unused: no layer slides
  }
  c.bos_token_id = token_or(f, doc, "bos_token_id", 2);
  c.pad_token_id = token_or(f, doc, "pad_token_id", 0);
  if (doc.contains("eos_token_id")) {
    c.eos_token_ids = f.token_list("eos_token_id");
  } else {
    c.eos_token_ids = {1};
  }
  return c;
}

}  // namespace gengraph

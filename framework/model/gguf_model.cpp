#include "framework/model/gguf_model.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "framework/util/error.h"

namespace gengraph {
namespace {

const char* const kSupported = "llama, qwen2, gpt2, gemma3";

std::string arch_of(const GgufFile& f) {
  if (!f.has("general.architecture")) {
    throw Error("GGUF file '" + f.name() +
                "': no general.architecture key (expected the model's architecture: " + kSupported +
                ")");
  }
  const std::string a = f.string("general.architecture");
  if (a != "llama" && a != "qwen2" && a != "gpt2" && a != "gemma3") {
    throw Error("GGUF file '" + f.name() + "': general.architecture '" + a +
                "' is not supported (supported: " + std::string(kSupported) + ")");
  }
  return a;
}

// The vocabulary size: the architecture's key, else the token list, else the embedding's rows.
int64_t vocab_size(const GgufFile& f, const std::string& a) {
  if (f.has(a + ".vocab_size")) return f.integer(a + ".vocab_size");
  if (f.has("tokenizer.ggml.tokens")) {
    return static_cast<int64_t>(f.strings("tokenizer.ggml.tokens").size());
  }
  if (const GgufTensorInfo* t = f.find_tensor("token_embd.weight")) return t->shape().at(0);
  throw Error("GGUF file '" + f.name() + "': no " + a +
              ".vocab_size, tokenizer.ggml.tokens or token_embd.weight to size the vocabulary");
}

void special_ids(const GgufFile& f, bool gemma3, nlohmann::json& doc) {
  for (const auto& [key, hf] : {std::pair<std::string, std::string>{"bos", "bos_token_id"},
                                {"eos", "eos_token_id"},
                                {"padding", "pad_token_id"}}) {
    const std::string k = "tokenizer.ggml." + key + "_token_id";
    if (f.has(k)) doc[hf] = f.integer(k);
  }
  // llama.cpp ends a generation at any end-of-generation token: EOS and, where the file names
  // one, the end-of-turn token.
  std::optional<int64_t> eot;
  if (f.has("tokenizer.ggml.eot_token_id")) eot = f.integer("tokenizer.ggml.eot_token_id");
  if (!eot && gemma3 && f.has("tokenizer.ggml.tokens")) {
    // Gemma 3's files name no end-of-turn token; llama.cpp finds it by its text, and the model's
    // own generation config ends at it too (eos_token_id [1, 106]).
    const auto& tokens = f.strings("tokenizer.ggml.tokens");
    const auto it = std::find(tokens.begin(), tokens.end(), "<end_of_turn>");
    if (it != tokens.end()) eot = it - tokens.begin();
  }
  if (eot && doc.contains("eos_token_id")) {
    if (*eot != doc["eos_token_id"].get<int64_t>()) {
      doc["eos_token_id"] = nlohmann::json::array({doc["eos_token_id"], *eot});
    }
  }
}

// {arch}.rope.*: the base, and a scaling transformers' config can say (linear, yarn is refused).
void rope(const GgufFile& f, const std::string& a, int64_t head_dim, nlohmann::json& doc) {
  doc["rope_theta"] = f.has(a + ".rope.freq_base") ? f.number(a + ".rope.freq_base") : 10000.0;
  if (f.has(a + ".rope.dimension_count") && f.integer(a + ".rope.dimension_count") != head_dim) {
    throw Error("GGUF file '" + f.name() + "': " + a + ".rope.dimension_count is " +
                std::to_string(f.integer(a + ".rope.dimension_count")) +
                ", expected the head size " + std::to_string(head_dim) + " (gengraph's " + a +
                " rotates every dimension of a head)");
  }
  const std::string type_key = a + ".rope.scaling.type";
  const std::string type = f.has(type_key) ? f.string(type_key) : "none";
  if (type == "none") return;
  if (type != "linear") {
    throw Error("GGUF file '" + f.name() + "': " + type_key + " '" + type +
                "' is not supported (supported: none, linear)");
  }
  doc["rope_scaling"] = {{"rope_type", "linear"}, {"factor", f.number(a + ".rope.scaling.factor")}};
}

// Gemma 3's keys beyond the LLaMA family's, as llama.cpp reads a gemma3 file: the global layers'
// rope from {arch}.rope.* (done by rope()), the local layers' base 10000 unscaled, a window on five
// layers of six (or the file's own pattern), the attention scale from the head size (27B's from
// width / heads), GELU-tanh, and logit soft-capping when the file gives it.
void gemma3_config(const GgufFile& f, int64_t head_dim, nlohmann::json& doc) {
  doc["model_type"] = "gemma3_text";
  nlohmann::json full = {{"rope_type", "default"}, {"rope_theta", doc["rope_theta"]}};
  if (doc.contains("rope_scaling")) {
    full["rope_type"] = "linear";
    full["factor"] = doc["rope_scaling"]["factor"];
  }
  doc.erase("rope_scaling");
  doc.erase("rope_theta");
  doc["rope_parameters"] = {
      {"full_attention", full},
      {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}};
  doc["hidden_activation"] = "gelu_pytorch_tanh";
  const int64_t layers = doc["num_hidden_layers"].get<int64_t>();
  const std::string window = "gemma3.attention.sliding_window";
  const std::string pattern = "gemma3.attention.sliding_window_pattern";
  if (!f.has(window)) {
    doc["sliding_window"] = nullptr;
    doc["layer_types"] = std::vector<std::string>(static_cast<size_t>(layers), "full_attention");
  } else {
    doc["sliding_window"] = f.integer(window);
    int64_t every = 6;
    if (f.has(pattern)) {
      every = f.integer(pattern);
      if (every < 1) {
        throw Error("GGUF file '" + f.name() + "': " + pattern + " is " + std::to_string(every) +
                    ", expected a positive layer count");
      }
    }
    std::vector<std::string> types;
    for (int64_t i = 0; i < layers; ++i) {
      types.push_back((i + 1) % every != 0 ? "sliding_attention" : "full_attention");
    }
    doc["layer_types"] = types;
  }
  const int64_t heads = doc["num_attention_heads"].get<int64_t>();
  doc["query_pre_attn_scalar"] =
      layers == 62 ? doc["hidden_size"].get<int64_t>() / heads : head_dim;  // 27B: 62 layers
  if (f.has("gemma3.final_logit_softcapping")) {
    doc["final_logit_softcapping"] = f.number("gemma3.final_logit_softcapping");
  }
}

}  // namespace

nlohmann::json gguf_config_document(const GgufFile& f) {
  const std::string a = arch_of(f);
  const auto key = [&](const std::string& k) { return a + "." + k; };
  nlohmann::json doc;
  doc["vocab_size"] = vocab_size(f, a);
  const bool tied = f.find_tensor("output.weight") == nullptr;
  doc["tie_word_embeddings"] = tied;
  if (a == "gpt2") {
    doc["model_type"] = "gpt2";
    doc["n_embd"] = f.integer(key("embedding_length"));
    doc["n_layer"] = f.integer(key("block_count"));
    doc["n_head"] = f.integer(key("attention.head_count"));
    doc["n_positions"] = f.integer(key("context_length"));
    if (f.has(key("feed_forward_length"))) doc["n_inner"] = f.integer(key("feed_forward_length"));
    doc["layer_norm_epsilon"] = f.number(key("attention.layer_norm_epsilon"));
    doc["activation_function"] = "gelu_new";  // GPT-2's; llama.cpp's gpt2 graph uses it too
  } else {
    doc["model_type"] = a;
    const int64_t hidden = f.integer(key("embedding_length"));
    const int64_t heads = f.integer(key("attention.head_count"));
    doc["hidden_size"] = hidden;
    doc["intermediate_size"] = f.integer(key("feed_forward_length"));
    doc["num_hidden_layers"] = f.integer(key("block_count"));
    doc["num_attention_heads"] = heads;
    doc["num_key_value_heads"] =
        f.has(key("attention.head_count_kv")) ? f.integer(key("attention.head_count_kv")) : heads;
    doc["max_position_embeddings"] = f.integer(key("context_length"));
    doc["rms_norm_eps"] = f.number(key("attention.layer_norm_rms_epsilon"));
    int64_t head_dim = heads > 0 ? hidden / heads : 0;
    if (f.has(key("attention.key_length"))) {
      head_dim = f.integer(key("attention.key_length"));
      if (f.has(key("attention.value_length")) &&
          f.integer(key("attention.value_length")) != head_dim) {
        throw Error("GGUF file '" + f.name() + "': " + key("attention.value_length") + " " +
                    std::to_string(f.integer(key("attention.value_length"))) + " differs from " +
                    key("attention.key_length") + " " + std::to_string(head_dim) + " (gengraph's " +
                    a + " has one head size for keys and values)");
      }
      doc["head_dim"] = head_dim;
    }
    rope(f, a, head_dim, doc);
    if (a == "gemma3") gemma3_config(f, head_dim, doc);
    if (f.find_tensor("rope_freqs.weight")) {
      throw Error("GGUF file '" + f.name() +
                  "': tensor rope_freqs.weight (LLaMA 3.1's per-frequency rotary factors) is not "
                  "supported");
    }
  }
  special_ids(f, a == "gemma3", doc);
  doc["gguf"] = {{"file", f.name()}, {"architecture", a}, {"version", f.version()}};
  return doc;
}

namespace {

// How a canonical (transformers) name is found in the file, and what is done to it there.
struct Source {
  std::string name;
  enum class Fix { kNone, kTranspose, kUnpermute, kMinusOne } fix = Fix::kNone;
  int64_t heads = 0;  // kUnpermute: the heads its rows hold
};

// "model.layers.3.self_attn.q_proj.weight" -> (3, "self_attn.q_proj.weight"); -1 elsewhere.
std::pair<int64_t, std::string> split_layer(const std::string& name, const std::string& prefix) {
  if (name.rfind(prefix, 0) != 0) return {-1, name};
  const size_t dot = name.find('.', prefix.size());
  return {std::stoll(name.substr(prefix.size(), dot - prefix.size())), name.substr(dot + 1)};
}

// A per-layer tensor's GGUF name through `in_layer` (its part's transformers name -> GGUF's):
// "model.layers.3.self_attn.q_proj.weight" -> blk.3.attn_q.weight, part self_attn.q_proj, GGUF
// part attn_q, suffix .weight; nullopt for a name outside the layers or a part not in the map.
struct LayerTensor {
  std::string gguf, part, gguf_part, suffix;
};
std::optional<LayerTensor> layer_tensor(const std::string& name, const std::string& prefix,
                                        const std::map<std::string, std::string>& in_layer) {
  const auto [i, rest] = split_layer(name, prefix);
  if (i < 0) return std::nullopt;
  const size_t dot = rest.rfind('.');
  const auto it = in_layer.find(rest.substr(0, dot));
  if (it == in_layer.end()) return std::nullopt;
  return LayerTensor{"blk." + std::to_string(i) + "." + it->second + rest.substr(dot), it->first,
                     it->second, rest.substr(dot)};
}

std::optional<Source> llama_source(const std::string& name, const ModelConfig& c, bool permuted) {
  static const std::map<std::string, std::string> top = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"}};
  if (auto it = top.find(name); it != top.end()) return Source{it->second};
  static const std::map<std::string, std::string> in_layer = {
      {"input_layernorm", "attn_norm"}, {"post_attention_layernorm", "ffn_norm"},
      {"self_attn.q_proj", "attn_q"},   {"self_attn.k_proj", "attn_k"},
      {"self_attn.v_proj", "attn_v"},   {"self_attn.o_proj", "attn_output"},
      {"mlp.gate_proj", "ffn_gate"},    {"mlp.up_proj", "ffn_up"},
      {"mlp.down_proj", "ffn_down"}};
  const auto t = layer_tensor(name, "model.layers.", in_layer);
  if (!t) return std::nullopt;
  Source s{t->gguf};
  // llama.cpp's converter permutes the rows of q and k weights for its rotary form (not biases).
  if (permuted && t->suffix == ".weight") {
    if (t->gguf_part == "attn_q") s = {s.name, Source::Fix::kUnpermute, c.num_heads};
    if (t->gguf_part == "attn_k") s = {s.name, Source::Fix::kUnpermute, c.num_kv_heads};
  }
  return s;
}

// Gemma 3: the LLaMA names plus q/k norms and four norms per layer; llama.cpp's converter stored
// every norm weight plus one (Gemma's RMSNorm scales by 1 + weight), taken back here.
std::optional<Source> gemma3_source(const std::string& name) {
  static const std::map<std::string, std::string> top = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"}};
  if (auto it = top.find(name); it != top.end()) {
    return Source{it->second,
                  it->second == "output_norm.weight" ? Source::Fix::kMinusOne : Source::Fix::kNone};
  }
  static const std::map<std::string, std::string> in_layer = {
      {"input_layernorm", "attn_norm"},
      {"post_attention_layernorm", "post_attention_norm"},
      {"pre_feedforward_layernorm", "ffn_norm"},
      {"post_feedforward_layernorm", "post_ffw_norm"},
      {"self_attn.q_norm", "attn_q_norm"},
      {"self_attn.k_norm", "attn_k_norm"},
      {"self_attn.q_proj", "attn_q"},
      {"self_attn.k_proj", "attn_k"},
      {"self_attn.v_proj", "attn_v"},
      {"self_attn.o_proj", "attn_output"},
      {"mlp.gate_proj", "ffn_gate"},
      {"mlp.up_proj", "ffn_up"},
      {"mlp.down_proj", "ffn_down"}};
  const auto t = layer_tensor(name, "model.layers.", in_layer);
  if (!t) return std::nullopt;
  const bool norm = t->part.find("norm") != std::string::npos;
  return Source{t->gguf, norm ? Source::Fix::kMinusOne : Source::Fix::kNone};
}

std::optional<Source> gpt2_source(const std::string& name) {
  static const std::map<std::string, std::string> top = {
      {"transformer.wte.weight", "token_embd.weight"},
      {"transformer.wpe.weight", "position_embd.weight"},
      {"transformer.ln_f.weight", "output_norm.weight"},
      {"transformer.ln_f.bias", "output_norm.bias"},
      {"lm_head.weight", "output.weight"}};
  if (auto it = top.find(name); it != top.end()) return Source{it->second};
  static const std::map<std::string, std::string> in_layer = {
      {"ln_1", "attn_norm"},          {"ln_2", "ffn_norm"},   {"attn.c_attn", "attn_qkv"},
      {"attn.c_proj", "attn_output"}, {"mlp.c_fc", "ffn_up"}, {"mlp.c_proj", "ffn_down"}};
  const auto t = layer_tensor(name, "transformer.h.", in_layer);
  if (!t) return std::nullopt;
  Source s{t->gguf};
  // transformers' Conv1D holds [in, out]; the converter wrote [out, in].
  if (t->part.substr(0, 2) != "ln" && t->suffix == ".weight") s.fix = Source::Fix::kTranspose;
  return s;
}

// A Q4_0 or Q4_1 tensor's blocks as gengraph's int4 groups of 32: levels [rows, in] (byte i of a
// block holds element i in its low nibble, element 16 + i in its high one), the float16 scale d
// and zero (Q4_1's m; Q4_0's -8 d, exact in float16, so q d - 8 d is (q - 8) d).
Int4Weight int4_levels(const GgufFile& f, const GgufTensorInfo& t) {
  const std::vector<int64_t> shape = t.shape();
  const int64_t rows = t.elements() / shape.back(), in = shape.back();
  const int64_t block = gguf_block_bytes(t.type), blocks = in / 32;
  const at::Tensor raw = f.raw(t).view({rows, blocks, block});
  const auto half = [&](int64_t at) {
    return raw.narrow(2, at, 2).contiguous().view(at::kHalf).view({rows, blocks});
  };
  const bool q41 = t.type == GgufType::kQ4_1;
  const at::Tensor qs = raw.narrow(2, q41 ? 4 : 2, 16).to(at::kInt);
  Int4Weight w;
  w.group = 32;
  w.q = at::cat({qs.bitwise_and(15), qs.bitwise_right_shift(4)}, 2).view({rows, in}).contiguous();
  w.scales = half(0).contiguous();
  w.zeros = q41 ? half(2).contiguous() : (w.scales.to(at::kFloat) * -8.0).to(at::kHalf);
  return w;
}

// A Q8_0 tensor's blocks as gengraph's int8 in blocks of 32: a float16 scale d, then 32 int8
// levels (value = q x d).
Int8Blocks int8_levels(const GgufFile& f, const GgufTensorInfo& t) {
  const std::vector<int64_t> shape = t.shape();
  const int64_t rows = t.elements() / shape.back(), in = shape.back();
  const at::Tensor raw = f.raw(t).view({rows, in / 32, 34});
  Int8Blocks w;
  w.block = 32;
  w.scales = raw.narrow(2, 0, 2).contiguous().view(at::kHalf).view({rows, in / 32}).contiguous();
  w.q = raw.narrow(2, 2, 32).contiguous().view(at::kChar).view({rows, in}).contiguous();
  return w;
}

// The inverse of the converter's permute: rows (head, pair, half) back to (head, half, pair).
at::Tensor unpermute(const at::Tensor& w, int64_t heads) {
  const int64_t rows = w.size(0);
  return w.reshape({heads, rows / heads / 2, 2, w.size(1)}).transpose(1, 2).reshape(w.sizes());
}

}  // namespace

WeightMap gguf_weights(const GgufFile& f, const ModelConfig& c,
                       const std::vector<TensorSpec>& specs, const LoadOptions& options,
                       StoredWeights* stored) {
  const bool int4_32 = stored && options.weights.kind == WeightFormat::Kind::kInt4 &&
                       options.weights.int4_group() == 32;
  const bool int8_32 = stored && options.weights.int8_blocks() && options.weights.group_size == 32;
  const std::string a = arch_of(f);
  WeightMap out;
  std::set<std::string> used;
  for (const TensorSpec& spec : specs) {
    const std::optional<Source> src = a == "gpt2"     ? gpt2_source(spec.name)
                                      : a == "gemma3" ? gemma3_source(spec.name)
                                                      : llama_source(spec.name, c, a == "llama");
    if (!src) {
      throw Error("GGUF file '" + f.name() + "': gengraph's " + c.model_type + " needs " +
                  spec.name + ", which has no GGUF name here");
    }
    const GgufTensorInfo* t = f.find_tensor(src->name);
    if (!t) {
      throw Error("GGUF file '" + f.name() + "': no tensor " + src->name + " (" + spec.name +
                  ", expected shape " + shape_str(spec.shape) + ")");
    }
    used.insert(src->name);
    at::Tensor w = f.to_float(*t);
    if (src->fix == Source::Fix::kTranspose && w.dim() == 2) w = w.t();
    if (src->fix == Source::Fix::kMinusOne) w = w - 1.0;
    if (src->fix == Source::Fix::kUnpermute && w.dim() == 2 && src->heads > 0 &&
        w.size(0) % (2 * src->heads) == 0) {
      w = unpermute(w, src->heads);
    }
    if (w.sizes().vec() != spec.shape) {
      throw Error("GGUF file '" + f.name() + "': tensor " + src->name + " (" + spec.name +
                  ") has shape " + shape_str(w.sizes().vec()) + ", expected " +
                  shape_str(spec.shape) + " from the file's metadata");
    }
    if (options.check_weights && !at::isfinite(w).all().item<bool>()) {
      throw Error("GGUF file '" + f.name() + "': tensor " + src->name + " (" +
                  gguf_type_name(t->type) + ") holds NaN or infinite values");
    }
    out[spec.name] = w.contiguous().to(options.device, options.dtype);
    const bool q4 = t->type == GgufType::kQ4_0 || t->type == GgufType::kQ4_1;
    if (t->dims.size() == 2 && ((int4_32 && q4) || (int8_32 && t->type == GgufType::kQ8_0))) {
      // The levels' rows in the weight's order (q and k un-permuted with their scales).
      const auto rows = [&](const at::Tensor& x) {
        return src->fix == Source::Fix::kUnpermute ? unpermute(x, src->heads).contiguous() : x;
      };
      if (q4) {
        Int4Weight l = int4_levels(f, *t);
        l.q = rows(l.q);
        l.scales = rows(l.scales);
        l.zeros = rows(l.zeros);
        stored->int4[spec.name] = std::move(l);
      } else {
        Int8Blocks l = int8_levels(f, *t);
        l.q = rows(l.q);
        l.scales = rows(l.scales);
        stored->int8[spec.name] = std::move(l);
      }
    }
  }
  for (const GgufTensorInfo& t : f.tensors()) {
    if (!used.count(t.name)) {
      throw Error("GGUF file '" + f.name() + "': tensor " + t.name + " (" + gguf_type_name(t.type) +
                  ", shape " + shape_str(t.shape()) + ") is not one gengraph's " + c.model_type +
                  " takes");
    }
  }
  return out;
}

std::string gguf_summary(const GgufFile& f) {
  std::map<std::string, int64_t> types;
  for (const GgufTensorInfo& t : f.tensors()) ++types[gguf_type_name(t.type)];
  std::string s = (f.has("general.architecture") ? f.string("general.architecture") : "?") + ": " +
                  std::to_string(f.tensors().size()) + " tensors (";
  bool first = true;
  for (const auto& [name, n] : types) {
    s += (first ? "" : ", ") + name + " " + std::to_string(n);
    first = false;
  }
  return s + ")";
}

}  // namespace gengraph

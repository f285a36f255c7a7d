// The LLaMA family (transformers' LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM): RMSNorm
// pre-norm blocks, rotary embeddings in the rotate_half form, grouped-query attention, SwiGLU MLP.
// One implementation; the three model types differ only in their config.json parsing: which
// biases exist, which defaults apply, and which layers use sliding-window attention.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>

#include "framework/kernels/layer_ops.h"
#include "framework/kernels/rms_norm.h"
#include "framework/model/architectures/layer_functions.h"
#include "framework/model/architectures/rope.h"
#include "framework/model/causal_lm.h"
#include "framework/model/json_fields.h"
#include "framework/model/model_registry.h"
#include "framework/util/error.h"

namespace gengraph {
namespace {

std::string layer(int64_t i, const std::string& rest) {
  return "model.layers." + std::to_string(i) + "." + rest;
}

// Defaults that differ between transformers' LlamaConfig, MistralConfig and Qwen2Config.
struct FamilyDefaults {
  int64_t max_positions;
  std::optional<int64_t> kv_heads;  // nullopt: num_attention_heads
  std::optional<int64_t> bos, eos;
};

std::optional<int64_t> token_or(const JsonFields& f, const nlohmann::json& doc,
                                const std::string& key, std::optional<int64_t> fallback) {
  return doc.contains(key) ? f.optional_token(key) : fallback;  // an explicit null means none
}

// The keys every family shares. Shape keys are required: a config.json saved by transformers always
// has them, and a silent 7B-sized default would only surface later as a weight shape error.
ModelConfig parse_common(const nlohmann::json& doc, const std::string& source,
                         const FamilyDefaults& def) {
  const JsonFields f(doc, source);
  ModelConfig c;
  c.vocab_size = f.positive_int("vocab_size");
  c.hidden_size = f.positive_int("hidden_size");
  c.intermediate_size = f.positive_int("intermediate_size");
  c.num_layers = f.positive_int("num_hidden_layers");
  c.num_heads = f.positive_int("num_attention_heads");
  c.num_kv_heads = f.positive_int("num_key_value_heads", def.kv_heads.value_or(c.num_heads));
  if (c.num_heads % c.num_kv_heads != 0) {
    f.fail("num_key_value_heads",
           "a divisor of num_attention_heads (" + std::to_string(c.num_heads) + ")");
  }
  if (f.has("head_dim")) {
    c.head_dim = f.positive_int("head_dim");
  } else if (c.hidden_size % c.num_heads != 0) {
    f.fail("num_attention_heads", "a divisor of hidden_size (" + std::to_string(c.hidden_size) +
                                      ") when head_dim is not given");
  } else {
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.head_dim % 2 != 0) {
    f.fail(f.has("head_dim") ? "head_dim" : "hidden_size",
           "an even head size (rotary embeddings rotate pairs of dimensions)");
  }
  c.max_positions = f.positive_int("max_position_embeddings", def.max_positions);
  c.norm_eps = f.positive_number("rms_norm_eps", 1e-6);
  c.activation = f.string("hidden_act", "silu");
  parse_activation(c.activation, source);
  c.initializer_range = f.positive_number("initializer_range", 0.02);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  c.rotary_dim = c.head_dim;
  c.rope = parse_rope(doc, source, c.max_positions);
  c.bos_token_id = token_or(f, doc, "bos_token_id", def.bos);
  c.pad_token_id = f.optional_token("pad_token_id");
  if (doc.contains("eos_token_id")) {
    c.eos_token_ids = f.token_list("eos_token_id");
  } else if (def.eos) {
    c.eos_token_ids = {*def.eos};
  }
  return c;
}

ModelConfig parse_llama(const nlohmann::json& doc, const std::string& source) {
  ModelConfig c = parse_common(doc, source, {2048, std::nullopt, 1, 2});
  const JsonFields f(doc, source);
  if (c.hidden_size % c.num_heads != 0) {  // LlamaConfig checks this even with head_dim given
    f.fail("num_attention_heads",
           "a divisor of hidden_size (" + std::to_string(c.hidden_size) + ")");
  }
  c.qkv_bias = c.out_proj_bias = f.boolean("attention_bias", false);
  c.mlp_bias = f.boolean("mlp_bias", false);
  return c;  // LlamaConfig has no sliding window; transformers ignores one if present.
}

// A window length, or 0 for none: an absent key means `fallback`, an explicit null means none.
int64_t window_or(const JsonFields& f, const nlohmann::json& doc, int64_t fallback) {
  return doc.contains("sliding_window") ? f.positive_int("sliding_window", 0) : fallback;
}

ModelConfig parse_mistral(const nlohmann::json& doc, const std::string& source) {
  ModelConfig c = parse_common(doc, source, {4096 * 32, 8, 1, 2});
  const JsonFields f(doc, source);
  // MistralConfig defaults to a 4096-token window, applied to every layer (layer_types is ignored).
  c.sliding_window = window_or(f, doc, 4096);
  if (c.sliding_window > 0) c.sliding_layers.assign(c.num_layers, true);
  return c;
}

// Qwen2's layer_types, given or derived: layers from max_window_layers on slide.
std::vector<bool> qwen2_sliding_layers(const JsonFields& f, const nlohmann::json& doc,
                                       int64_t layers) {
  std::vector<bool> out;
  if (!f.has("layer_types")) {
    const int64_t first = f.positive_int("max_window_layers", 28);
    for (int64_t i = 0; i < layers; ++i) out.push_back(i >= first);
    return out;
  }
  const auto& types = doc["layer_types"];
  const std::string expected = "a list of " + std::to_string(layers) +
                               " entries, each \"full_attention\" or \"sliding_attention\"";
  if (!types.is_array() || static_cast<int64_t>(types.size()) != layers) {
    f.fail("layer_types", expected);
  }
  for (const auto& t : types) {
    if (t != "full_attention" && t != "sliding_attention") f.fail("layer_types", expected);
    out.push_back(t == "sliding_attention");
  }
  return out;
}

ModelConfig parse_qwen2(const nlohmann::json& doc, const std::string& source) {
  ModelConfig c = parse_common(doc, source, {32768, std::nullopt, std::nullopt, std::nullopt});
  const JsonFields f(doc, source);
  c.qkv_bias = true;  // Qwen2 always has q/k/v biases and never an o_proj or MLP bias.
  // The window applies only with use_sliding_window, and only to the layers layer_types marks.
  const bool use = f.boolean("use_sliding_window", false);
  c.sliding_window = use ? window_or(f, doc, 4096) : 0;
  const std::vector<bool> sliding = qwen2_sliding_layers(f, doc, c.num_layers);
  if (c.sliding_window > 0 && std::find(sliding.begin(), sliding.end(), true) != sliding.end()) {
    c.sliding_layers = sliding;
  } else {
    c.sliding_window = 0;
  }
  return c;
}

std::vector<TensorSpec> llama_specs(const ModelConfig& c) {
  const int64_t d = c.hidden_size, inner = c.intermediate_size;
  const int64_t q_out = c.num_heads * c.head_dim, kv_out = c.num_kv_heads * c.head_dim;
  std::vector<TensorSpec> s = {
      {"model.embed_tokens.weight", {c.vocab_size, d}},
      {"model.norm.weight", {d}, Init::kOnes},
  };
  auto linear = [&](const std::string& name, int64_t out, int64_t in, bool bias) {
    s.push_back({name + ".weight", {out, in}});
    if (bias) s.push_back({name + ".bias", {out}, Init::kZeros});
  };
  for (int64_t i = 0; i < c.num_layers; ++i) {
    s.push_back({layer(i, "input_layernorm.weight"), {d}, Init::kOnes});
    linear(layer(i, "self_attn.q_proj"), q_out, d, c.qkv_bias);
    linear(layer(i, "self_attn.k_proj"), kv_out, d, c.qkv_bias);
    linear(layer(i, "self_attn.v_proj"), kv_out, d, c.qkv_bias);
    linear(layer(i, "self_attn.o_proj"), d, q_out, c.out_proj_bias);
    s.push_back({layer(i, "post_attention_layernorm.weight"), {d}, Init::kOnes});
    linear(layer(i, "mlp.gate_proj"), inner, d, c.mlp_bias);
    linear(layer(i, "mlp.up_proj"), inner, d, c.mlp_bias);
    linear(layer(i, "mlp.down_proj"), d, inner, c.mlp_bias);
  }
  if (!c.tie_word_embeddings) s.push_back({"lm_head.weight", {c.vocab_size, d}});
  return s;
}

// transformers' LlamaRMSNorm: normalise in float32, cast back, then scale.  x: [..., d]
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor normed = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * normed.to(x.scalar_type());
}

class Llama final : public CausalLM {
 public:
  Llama(ModelConfig config, WeightMap weights) : CausalLM(std::move(config), std::move(weights)) {
    const auto& c = this->config();
    act_ = parse_activation(c.activation, c.source);
    embed_ = w("model.embed_tokens.weight");
    norm_ = w("model.norm.weight");
    lm_head_ = c.tie_word_embeddings ? embed_ : w("lm_head.weight");
    inv_freq_ = rope_inv_freq(c.rope, c.head_dim).to(embed_.device());  // [head_dim / 2] float32
    scale_ = std::pow(static_cast<double>(c.head_dim), -0.5);
    if (c.fused) {
      make_fused();
      return;
    }
    for (int64_t i = 0; i < c.num_layers; ++i) blocks_.push_back(make_block(i));
  }

  at::Tensor forward(const ForwardBatch& b, KVCache& cache) const override {
    if (config().fused) return forward_fused(b, cache);
    const auto& c = config();
    at::Tensor h = at::embedding(embed_, b.input_ids);  // [rows, T, d]
    const auto [cos, sin] = rope_cos_sin_halves(b.positions, inv_freq_, h.scalar_type());
    const at::Tensor window_mask = window_layer_mask(b, c.sliding_window);
    for (int64_t i = 0; i < static_cast<int64_t>(blocks_.size()); ++i) {
      const Block& blk = blocks_[i];
      const at::Tensor& mask = blk.sliding ? window_mask : b.attn_mask;
      const at::Tensor x = rms_norm(h, blk.input_norm, c.norm_eps);
      h = h +
          attention(blk, x, cos, sin, mask, b.slots, cache, i, blk.sliding ? c.sliding_window : 0);
      h = h + mlp(blk, rms_norm(h, blk.post_norm, c.norm_eps));
    }
    const at::Tensor last = rms_norm(output_positions(h, b), norm_, c.norm_eps);  // [rows, (K,) d]
    return at::linear(last, lm_head_);  // [rows, (T,) vocab]
  }

 private:
  struct Proj {
    at::Tensor w, b;  // b undefined without a bias
  };
  struct Block {
    at::Tensor input_norm, post_norm;
    Proj q, k, v, o, gate, up, down;
    bool sliding = false;
  };

  Proj proj(const std::string& name) const {
    const auto& all = weights();
    auto bias = all.find(name + ".bias");
    return {w(name + ".weight"), bias == all.end() ? at::Tensor() : bias->second};
  }

  Block make_block(int64_t i) const {
    const auto& c = config();
    Block blk;
    blk.input_norm = w(layer(i, "input_layernorm.weight"));
    blk.post_norm = w(layer(i, "post_attention_layernorm.weight"));
    blk.q = proj(layer(i, "self_attn.q_proj"));
    blk.k = proj(layer(i, "self_attn.k_proj"));
    blk.v = proj(layer(i, "self_attn.v_proj"));
    blk.o = proj(layer(i, "self_attn.o_proj"));
    blk.gate = proj(layer(i, "mlp.gate_proj"));
    blk.up = proj(layer(i, "mlp.up_proj"));
    blk.down = proj(layer(i, "mlp.down_proj"));
    blk.sliding = !c.sliding_layers.empty() && c.sliding_layers[i];
    return blk;
  }

  // Self-attention of layer i over the cache.
  //   x: [rows, T, d]; cos, sin: [rows, 1, T, head_dim]; mask: [rows, 1, T, L] -> [rows, T, d]
  at::Tensor attention(const Block& blk, const at::Tensor& x, const at::Tensor& cos,
                       const at::Tensor& sin, const at::Tensor& mask, const at::Tensor& slots,
                       KVCache& cache, int64_t i, int64_t window) const {
    const int64_t rows = x.size(0), t = x.size(1), hd = config().head_dim;
    auto heads_first = [&](const at::Tensor& y) {
      return y.view({rows, t, -1, hd}).transpose(1, 2);  // [rows, heads or kv_heads, T, hd]
    };
    const at::Tensor q =
        rotate_halves(heads_first(linear_maybe_bias(x, blk.q.w, blk.q.b)), cos, sin);
    const at::Tensor k =
        rotate_halves(heads_first(linear_maybe_bias(x, blk.k.w, blk.k.b)), cos, sin);
    const at::Tensor v = heads_first(linear_maybe_bias(x, blk.v.w, blk.v.b));
    auto [keys, values] = cache.update(i, k, v, slots);  // [rows, kv_heads, L, hd]
    const at::Tensor o = attend_cached(cache, i, q, keys, values, mask, scale_, window);
    return linear_maybe_bias(o, blk.o.w, blk.o.b);
  }

  // SwiGLU: down(act(gate(x)) * up(x)).  x: [rows, T, d] -> [rows, T, d]
  at::Tensor mlp(const Block& blk, const at::Tensor& x) const {
    const at::Tensor g = activate(linear_maybe_bias(x, blk.gate.w, blk.gate.b), act_);
    return linear_maybe_bias(g * linear_maybe_bias(x, blk.up.w, blk.up.b), blk.down.w, blk.down.b);
  }

  // The fused form: q/k/v as one GEMM, gate/up as one, o_proj and down_proj accumulating into the
  // residual (one GEMM each when they have no bias), RMSNorm as one kernel on CUDA.
  struct FusedBlock {
    at::Tensor input_norm, post_norm;
    Projection qkv, o, gate_up, down;
    bool sliding = false;
  };

  // The named projections' weights (and biases, when they have them) as one.
  Projection fused_proj(const std::vector<std::string>& names) {
    std::vector<std::string> weight_names, bias_names;
    for (const auto& n : names) {
      weight_names.push_back(n + ".weight");
      if (weights().count(n + ".bias")) bias_names.push_back(n + ".bias");
    }
    if (!bias_names.empty() && bias_names.size() != names.size()) {
      throw Error(config().source + ": " + names[0] +
                  ": the projections fused with it must all have a bias or none");
    }
    return project(fuse(weight_names, 0), bias_names.empty() ? at::Tensor() : fuse(bias_names, 0),
                   config().weights);
  }

  void make_fused() {
    const auto& c = config();
    for (int64_t i = 0; i < c.num_layers; ++i) {
      FusedBlock blk;
      blk.input_norm = w(layer(i, "input_layernorm.weight"));
      blk.post_norm = w(layer(i, "post_attention_layernorm.weight"));
      blk.qkv = fused_proj({layer(i, "self_attn.q_proj"), layer(i, "self_attn.k_proj"),
                            layer(i, "self_attn.v_proj")});
      blk.o = fused_proj({layer(i, "self_attn.o_proj")});
      blk.gate_up = fused_proj({layer(i, "mlp.gate_proj"), layer(i, "mlp.up_proj")});
      blk.down = fused_proj({layer(i, "mlp.down_proj")});
      blk.sliding = !c.sliding_layers.empty() && c.sliding_layers[i];
      fused_.push_back(std::move(blk));
    }
    head_ = project(lm_head_, at::Tensor(), head_format(c.weights));
    // rotate_half's signs: -sin on the first half, +sin on the second.
    rot_sign_ = at::ones({c.head_dim}, embed_.options());
    rot_sign_.slice(0, 0, c.head_dim / 2).fill_(-1.0);
  }

  // RMSNorm as one kernel: on CUDA LibTorch's (at::rms_norm runs _fused_rms_norm), on CPU in
  // float32 gengraph's (framework/kernels/rms_norm.h; LibTorch's CPU rms_norm is a composite of
  // more operators than transformers' own formula); elsewhere that formula op by op.
  at::Tensor norm(const at::Tensor& x, const at::Tensor& weight) const {
    if (x.is_cuda()) return at::rms_norm(x, {config().hidden_size}, weight, config().norm_eps);
    if (kernels::rms_norm_applies(x, weight)) {
      return kernels::rms_norm(x, weight, config().norm_eps);
    }
    return rms_norm(x, weight, config().norm_eps);
  }

  // SwiGLU's gate on the fused gate/up output: act(gate) * up, as one kernel for SiLU on CPU in
  // float32 (kernels::silu_mul), op by op otherwise.  gu: [rows, T, 2 inner] -> [rows, T, inner]
  at::Tensor gate(const at::Tensor& gu) const {
    if (act_ == Activation::kSilu && kernels::silu_mul_applies(gu)) return kernels::silu_mul(gu);
    const int64_t inner = config().intermediate_size;
    return activate(gu.narrow(-1, 0, inner), act_) * gu.narrow(-1, inner, inner);
  }

  at::Tensor forward_fused(const ForwardBatch& b, KVCache& cache) const {
    const auto& c = config();
    const int64_t heads = c.num_heads, kv = c.num_kv_heads;
    at::Tensor h = at::embedding(embed_, b.input_ids);  // [rows, T, d]
    const auto dtype = h.scalar_type();
    auto [cos, sin] = rope_cos_sin_halves(b.positions, inv_freq_, dtype);  // [rows, 1, T, hd]
    cos = cos.transpose(1, 2);                                             // [rows, T, 1, hd]
    sin = (sin * rot_sign_.to(dtype)).transpose(1, 2);
    const at::Tensor mask = additive_mask(b.attn_mask, dtype);
    const at::Tensor local = window_layer_mask(b, c.sliding_window);
    const at::Tensor window_mask = local.is_same(b.attn_mask) ? mask : additive_mask(local, dtype);
    for (int64_t i = 0; i < static_cast<int64_t>(fused_.size()); ++i) {
      const FusedBlock& blk = fused_[i];
      const at::Tensor y = blk.qkv(norm(h, blk.input_norm));  // q, k, v
      const auto [q, keys, values] =
          rotate_and_store(y, cos, sin, heads, kv, RotaryPairs::kHalves, cache, i, b.slots);
      const at::Tensor o =
          attend_cached(cache, i, q, keys, values, blk.sliding ? window_mask : mask, scale_,
                        blk.sliding ? c.sliding_window : 0);
      h = blk.o.add_to(h, o);
      const at::Tensor gu = blk.gate_up(norm(h, blk.post_norm));
      h = blk.down.add_to(h, gate(gu));
    }
    const at::Tensor last = norm(output_positions(h, b), norm_);
    return head_(last);  // [rows, (T,) vocab]
  }

  Activation act_;
  at::Tensor embed_, norm_, lm_head_, inv_freq_, rot_sign_;
  double scale_ = 1.0;
  std::vector<Block> blocks_;
  std::vector<FusedBlock> fused_;
  Projection head_;
};

Architecture family_member(
    const std::string& model_type, const std::string& description,
    std::function<ModelConfig(const nlohmann::json&, const std::string&)> parse) {
  Architecture a;
  a.model_type = model_type;
  a.input_embedding = "model.embed_tokens.weight";
  a.description = description;
  a.parse_config = std::move(parse);
  a.weight_specs = llama_specs;
  a.names.canonical = [](const std::string& key) { return key; };
  a.names.ignorable = [](const std::string& key) {
    const std::string inv_freq = ".rotary_emb.inv_freq";
    const bool buffer = key.size() >= inv_freq.size() &&
                        key.compare(key.size() - inv_freq.size(), inv_freq.size(), inv_freq) == 0;
    // Rotary buffers of older checkpoints, and a tied head saved anyway.
    return buffer || key == "lm_head.weight";
  };
  a.build = [](ModelConfig c, WeightMap w) -> std::unique_ptr<CausalLM> {
    return std::make_unique<Llama>(std::move(c), std::move(w));
  };
  return a;
}

}  // namespace

Architecture llama_architecture() {
  return family_member("llama",
                       "LLaMA (LlamaForCausalLM): RMSNorm, rotary (default/linear/llama3), "
                       "grouped-query attention, SwiGLU",
                       parse_llama);
}

Architecture mistral_architecture() {
  return family_member("mistral",
                       "Mistral (MistralForCausalLM): LLaMA blocks with sliding-window attention",
                       parse_mistral);
}

Architecture qwen2_architecture() {
  return family_member("qwen2",
                       "Qwen2 (Qwen2ForCausalLM): LLaMA blocks with q/k/v biases and optional "
                       "sliding-window layers",
                       parse_qwen2);
}

}  // namespace gengraph

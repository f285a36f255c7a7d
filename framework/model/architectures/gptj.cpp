// GPT-J (transformers' GPTJForCausalLM): rotary embeddings on the first rotary_dim dims of each
// head in interleaved pairs, attention and MLP in parallel from one LayerNorm, bias-free q/k/v/out
// projections, an LM head with a bias, untied embeddings by default.
#include <ATen/ATen.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "framework/model/architectures/layer_functions.h"
#include "framework/model/architectures/rope.h"
#include "framework/model/causal_lm.h"
#include "framework/model/json_fields.h"
#include "framework/model/model_registry.h"

namespace gengraph {
namespace {

std::string layer(int64_t i, const std::string& rest) {
  return "transformer.h." + std::to_string(i) + "." + rest;
}

// Shape keys are required (a config.json saved by transformers always has them); the rest take
// GPTJConfig's defaults.
ModelConfig parse_gptj(const nlohmann::json& doc, const std::string& source) {
  const JsonFields f(doc, source);
  ModelConfig c;
  c.vocab_size = f.positive_int("vocab_size");
  c.max_positions = f.positive_int("n_positions");
  c.hidden_size = f.positive_int("n_embd");
  c.num_layers = f.positive_int("n_layer");
  c.num_heads = f.positive_int("n_head");
  if (c.hidden_size % c.num_heads != 0) {
    f.fail("n_head", "a divisor of n_embd (" + std::to_string(c.hidden_size) + ")");
  }
  c.num_kv_heads = c.num_heads;
  c.head_dim = c.hidden_size / c.num_heads;
  if (doc.contains("rotary_dim") && doc["rotary_dim"].is_null()) {
    // transformers would then size the rotation by n_embd, which only works with one head.
    f.fail("rotary_dim", "an integer (null, rotary over all of n_embd, is not supported)");
  }
  c.rotary_dim = f.positive_int("rotary_dim", 64);
  if (c.rotary_dim > c.head_dim || c.rotary_dim % 2 != 0) {
    f.fail("rotary_dim",
           "an even number at most the head size n_embd / n_head = " + std::to_string(c.head_dim));
  }
  c.intermediate_size = f.positive_int("n_inner", 4 * c.hidden_size);
  c.activation = f.string("activation_function", "gelu_new");
  parse_activation(c.activation, source);
  c.norm_eps = f.positive_number("layer_norm_epsilon", 1e-5);
  c.initializer_range = f.positive_number("initializer_range", 0.02);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  c.bos_token_id = doc.contains("bos_token_id") ? f.optional_token("bos_token_id") : 50256;
  c.pad_token_id = f.optional_token("pad_token_id");
  c.eos_token_ids =
      doc.contains("eos_token_id") ? f.token_list("eos_token_id") : std::vector<int64_t>{50256};
  return c;  // rope: GPT-J's fixed base 10000, no scaling (RopeConfig's defaults)
}

std::vector<TensorSpec> gptj_specs(const ModelConfig& c) {
  const int64_t d = c.hidden_size, inner = c.intermediate_size;
  std::vector<TensorSpec> s = {
      {"transformer.wte.weight", {c.vocab_size, d}},
      {"transformer.ln_f.weight", {d}, Init::kOnes},
      {"transformer.ln_f.bias", {d}, Init::kZeros},
  };
  for (int64_t i = 0; i < c.num_layers; ++i) {
    s.push_back({layer(i, "ln_1.weight"), {d}, Init::kOnes});
    s.push_back({layer(i, "ln_1.bias"), {d}, Init::kZeros});
    for (const char* p : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
      s.push_back({layer(i, std::string("attn.") + p + ".weight"), {d, d}});
    }
    s.push_back({layer(i, "mlp.fc_in.weight"), {inner, d}});
    s.push_back({layer(i, "mlp.fc_in.bias"), {inner}, Init::kZeros});
    s.push_back({layer(i, "mlp.fc_out.weight"), {d, inner}});
    s.push_back({layer(i, "mlp.fc_out.bias"), {d}, Init::kZeros});
  }
  if (!c.tie_word_embeddings) s.push_back({"lm_head.weight", {c.vocab_size, d}});
  s.push_back({"lm_head.bias", {c.vocab_size}, Init::kZeros});
  return s;
}

class GptJ final : public CausalLM {
 public:
  GptJ(ModelConfig config, WeightMap weights) : CausalLM(std::move(config), std::move(weights)) {
    const auto& c = this->config();
    act_ = parse_activation(c.activation, c.source);
    wte_ = w("transformer.wte.weight");
    ln_f_ = {w("transformer.ln_f.weight"), w("transformer.ln_f.bias")};
    lm_head_w_ = c.tie_word_embeddings ? wte_ : w("lm_head.weight");
    lm_head_b_ = w("lm_head.bias");
    inv_freq_ = rope_inv_freq(c.rope, c.rotary_dim).to(wte_.device());  // [rotary_dim / 2]
    if (c.fused) {
      make_fused();
      return;
    }
    for (int64_t i = 0; i < c.num_layers; ++i) {
      blocks_.push_back(Block{{w(layer(i, "ln_1.weight")), w(layer(i, "ln_1.bias"))},
                              w(layer(i, "attn.q_proj.weight")),
                              w(layer(i, "attn.k_proj.weight")),
                              w(layer(i, "attn.v_proj.weight")),
                              w(layer(i, "attn.out_proj.weight")),
                              w(layer(i, "mlp.fc_in.weight")),
                              w(layer(i, "mlp.fc_in.bias")),
                              w(layer(i, "mlp.fc_out.weight")),
                              w(layer(i, "mlp.fc_out.bias"))});
    }
  }

  at::Tensor forward(const ForwardBatch& b, KVCache& cache) const override {
    if (config().fused) return forward_fused(b, cache);
    const auto& c = config();
    const int64_t d = c.hidden_size;
    at::Tensor h = at::embedding(wte_, b.input_ids);  // [rows, T, d]
    const auto [cos, sin] = rope_cos_sin_pairs(b.positions, inv_freq_, h.scalar_type());
    for (int64_t i = 0; i < static_cast<int64_t>(blocks_.size()); ++i) {
      const Block& blk = blocks_[i];
      const at::Tensor x = at::layer_norm(h, {d}, blk.ln_1.w, blk.ln_1.b, c.norm_eps);
      const at::Tensor a = attention(blk, x, cos, sin, b, cache, i);
      const at::Tensor m = at::linear(activate(at::linear(x, blk.fc_in_w, blk.fc_in_b), act_),
                                      blk.fc_out_w, blk.fc_out_b);
      h = a + m + h;  // transformers' order: attn + mlp + residual
    }
    at::Tensor last = output_positions(h, b);  // [rows, (T or K,) d]
    last = at::layer_norm(last, {d}, ln_f_.w, ln_f_.b, c.norm_eps);
    return at::linear(last, lm_head_w_, lm_head_b_);  // [rows, (T,) vocab]
  }

 private:
  struct Norm {
    at::Tensor w, b;
  };
  struct Block {
    Norm ln_1;
    at::Tensor q_w, k_w, v_w, out_w;
    at::Tensor fc_in_w, fc_in_b, fc_out_w, fc_out_b;
  };

  // Rotates the first rotary_dim dims of each head, passes the rest through.
  //   y: [rows, T, heads, hd]; cos, sin: [rows, T, 1, rotary_dim] -> [rows, T, heads, hd]
  at::Tensor rotary(const at::Tensor& y, const at::Tensor& cos, const at::Tensor& sin) const {
    const int64_t rot = config().rotary_dim;
    return at::cat({rotate_pairs(y.slice(-1, 0, rot), cos, sin), y.slice(-1, rot)}, -1);
  }

  // Self-attention of layer i over the cache.  x: [rows, T, d] -> [rows, T, d]
  at::Tensor attention(const Block& blk, const at::Tensor& x, const at::Tensor& cos,
                       const at::Tensor& sin, const ForwardBatch& b, KVCache& cache,
                       int64_t i) const {
    const int64_t rows = x.size(0), t = x.size(1);
    const int64_t heads = config().num_heads, hd = config().head_dim;
    auto split = [&](const at::Tensor& y) { return y.view({rows, t, heads, hd}); };
    const at::Tensor q = rotary(split(at::linear(x, blk.q_w)), cos, sin).permute({0, 2, 1, 3});
    const at::Tensor k = rotary(split(at::linear(x, blk.k_w)), cos, sin).permute({0, 2, 1, 3});
    const at::Tensor v =
        split(at::linear(x, blk.v_w)).permute({0, 2, 1, 3});  // [rows, heads, T, hd]
    auto [keys, values] = cache.update(i, k, v, b.slots);
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    return at::linear(attend_cached(cache, i, q, keys, values, b.attn_mask, scale), blk.out_w);
  }

  // The fused form. A GPT-J block reads one LayerNorm output for both branches, so q, k, v and
  // fc_in are one GEMM ([3d + inner, d], a zero bias for q/k/v); its output is attn_out + mlp_out
  // + residual, so out_proj and fc_out are one GEMM over [attn, act(fc_in)] ([d, d + inner]).
  struct FusedBlock {
    Norm ln_1;
    Projection in, out;
  };

  void make_fused() {
    const auto& c = config();
    const int64_t d = c.hidden_size;
    for (int64_t i = 0; i < c.num_layers; ++i) {
      FusedBlock blk;
      blk.ln_1 = {w(layer(i, "ln_1.weight")), w(layer(i, "ln_1.bias"))};
      const at::Tensor in_b =
          at::cat({at::zeros({3 * d}, wte_.options()), w(layer(i, "mlp.fc_in.bias"))});
      blk.in = project(fuse({layer(i, "attn.q_proj.weight"), layer(i, "attn.k_proj.weight"),
                             layer(i, "attn.v_proj.weight"), layer(i, "mlp.fc_in.weight")},
                            0),
                       in_b, c.weights);
      blk.out = project(fuse({layer(i, "attn.out_proj.weight"), layer(i, "mlp.fc_out.weight")}, 1),
                        w(layer(i, "mlp.fc_out.bias")), c.weights);
      fused_.push_back(std::move(blk));
    }
    head_ = project(lm_head_w_, lm_head_b_, head_format(c.weights));
    // The rotary frequencies over the whole head: the dims past rotary_dim get frequency 0, so
    // their angle is 0, cos 1 and sin 0 exactly, and they pass unchanged.
    head_inv_freq_ =
        at::cat({inv_freq_, at::zeros({(c.head_dim - c.rotary_dim) / 2}, inv_freq_.options())});
    // rotate_every_two's signs: -sin on even dims, +sin on odd ones.
    rot_sign_ = at::ones({c.head_dim}, wte_.options());
    rot_sign_.slice(0, 0, c.head_dim, 2).fill_(-1.0);
  }

  // cos and signed sin over the whole head: [rows, T, 1, hd].
  std::pair<at::Tensor, at::Tensor> rotary_tables(const at::Tensor& positions,
                                                  at::ScalarType dtype) const {
    const auto [cos, sin] = rope_cos_sin_pairs(positions, head_inv_freq_, dtype);
    return {cos, sin * rot_sign_.to(dtype)};
  }

  at::Tensor forward_fused(const ForwardBatch& b, KVCache& cache) const {
    const auto& c = config();
    const int64_t d = c.hidden_size, heads = c.num_heads, hd = c.head_dim;
    at::Tensor h = at::embedding(wte_, b.input_ids);  // [rows, T, d]
    const auto [cos, sin] = rotary_tables(b.positions, h.scalar_type());
    const at::Tensor mask = additive_mask(b.attn_mask, h.scalar_type());
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    for (int64_t i = 0; i < static_cast<int64_t>(fused_.size()); ++i) {
      const FusedBlock& blk = fused_[i];
      const at::Tensor x = at::layer_norm(h, {d}, blk.ln_1.w, blk.ln_1.b, c.norm_eps);
      const at::Tensor y = blk.in(x);  // [rows, T, 3d + inner]: q, k, v, fc_in
      const auto [q, keys, values] =
          rotate_and_store(y.narrow(-1, 0, 3 * d), cos, sin, heads, heads, RotaryPairs::kNeighbours,
                           cache, i, b.slots);
      const at::Tensor o = attend_cached(cache, i, q, keys, values, mask, scale);  // [rows, T, d]
      const at::Tensor m = activate_fused(y.narrow(-1, 3 * d, c.intermediate_size), act_);
      h = blk.out.add_to(h, at::cat({o, m}, -1));
    }
    at::Tensor last = output_positions(h, b);  // [rows, (T or K,) d]
    last = at::layer_norm(last, {d}, ln_f_.w, ln_f_.b, c.norm_eps);
    return head_(last);  // [rows, (T,) vocab]
  }

  Activation act_;
  at::Tensor wte_, lm_head_w_, lm_head_b_, inv_freq_, head_inv_freq_, rot_sign_;
  Norm ln_f_;
  std::vector<Block> blocks_;
  std::vector<FusedBlock> fused_;
  Projection head_;
};

}  // namespace

Architecture gptj_architecture() {
  Architecture a;
  a.model_type = "gptj";
  a.input_embedding = "transformer.wte.weight";
  a.description =
      "GPT-J (GPTJForCausalLM): partial interleaved rotary, parallel attention + MLP, biased head";
  a.parse_config = parse_gptj;
  a.weight_specs = gptj_specs;
  a.names.canonical = [](const std::string& key) { return key; };
  a.names.ignorable = gpt2_family_ignorable;
  a.build = [](ModelConfig c, WeightMap w) -> std::unique_ptr<CausalLM> {
    return std::make_unique<GptJ>(std::move(c), std::move(w));
  };
  return a;
}

}  // namespace gengraph

// Gemma 3's text model (transformers' Gemma3ForCausalLM, model_type "gemma3_text"). The LLaMA
// layout with: RMSNorm computed in float32 as x_hat * (1 + weight), four norms per layer (before
// and after attention, before and after the MLP), RMSNorm of q and k over each head before the
// rotation, attention scaled by query_pre_attn_scalar ** -0.5, a GeGLU MLP (tanh GELU),
// embeddings scaled by sqrt(hidden_size), local layers with a sliding window and their own rope
// base beside global ones, and an optional tanh soft cap on the logits.
#include "framework/model/architectures/gemma3.h"

#include <ATen/ATen.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "framework/kernels/rms_norm.h"
#include "framework/model/architectures/layer_functions.h"
#include "framework/model/architectures/rope.h"
#include "framework/model/causal_lm.h"
#include "framework/model/model_registry.h"
#include "framework/util/error.h"

namespace gengraph {
namespace {

std::string layer(int64_t i, const std::string& rest) {
  return "model.layers." + std::to_string(i) + "." + rest;
}

const char* const kNorms[] = {"input_layernorm", "post_attention_layernorm",
                              "pre_feedforward_layernorm", "post_feedforward_layernorm"};

std::vector<TensorSpec> gemma3_specs(const ModelConfig& c) {
  const int64_t d = c.hidden_size, inner = c.intermediate_size, hd = c.head_dim;
  const int64_t q_out = c.num_heads * hd, kv_out = c.num_kv_heads * hd;
  // Gemma's norms scale by (1 + weight): transformers initialises their weights to zero.
  std::vector<TensorSpec> s = {
      {"model.embed_tokens.weight", {c.vocab_size, d}},
      {"model.norm.weight", {d}, Init::kZeros},
  };
  auto linear = [&](const std::string& name, int64_t out, int64_t in, bool bias) {
    s.push_back({name + ".weight", {out, in}});
    if (bias) s.push_back({name + ".bias", {out}, Init::kZeros});
  };
  for (int64_t i = 0; i < c.num_layers; ++i) {
    for (const char* n : kNorms)
      s.push_back({layer(i, std::string(n) + ".weight"), {d}, Init::kZeros});
    linear(layer(i, "self_attn.q_proj"), q_out, d, c.qkv_bias);
    linear(layer(i, "self_attn.k_proj"), kv_out, d, c.qkv_bias);
    linear(layer(i, "self_attn.v_proj"), kv_out, d, c.qkv_bias);
    linear(layer(i, "self_attn.o_proj"), d, q_out, c.out_proj_bias);
    s.push_back({layer(i, "self_attn.q_norm.weight"), {hd}, Init::kZeros});
    s.push_back({layer(i, "self_attn.k_norm.weight"), {hd}, Init::kZeros});
    linear(layer(i, "mlp.gate_proj"), inner, d, false);
    linear(layer(i, "mlp.up_proj"), inner, d, false);
    linear(layer(i, "mlp.down_proj"), d, inner, false);
  }
  if (!c.tie_word_embeddings) s.push_back({"lm_head.weight", {c.vocab_size, d}});
  return s;
}

// transformers' Gemma3RMSNorm: normalise in float32, scale by (1 + weight) in float32, cast back.
// `scale` is 1 + weight, in float32, made once at load (the same values transformers makes at
// every call).  x: [..., d]; scale: [d] float32
at::Tensor gemma_norm(const at::Tensor& x, const at::Tensor& scale, double eps) {
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor normed = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return (normed * scale).to(x.scalar_type());
}

class Gemma3 final : public CausalLM {
 public:
  Gemma3(ModelConfig config, WeightMap weights) : CausalLM(std::move(config), std::move(weights)) {
    const auto& c = this->config();
    const Gemma3Settings s = gemma3_settings(*c.document, c.source);
    tanh_gelu_ = c.activation == "gelu_pytorch_tanh";
    act_ = parse_activation(c.activation, c.source);
    softcap_ = s.final_logit_softcapping;
    embed_ = w("model.embed_tokens.weight");
    // transformers' embed_scale: sqrt(hidden_size) as a float32 scalar, cast to the model dtype.
    embed_scale_ = at::scalar_tensor(std::sqrt(static_cast<double>(c.hidden_size)), at::kFloat)
                       .to(embed_.scalar_type())
                       .to(embed_.device());
    norm_ = scale_of("model.norm.weight");
    lm_head_ = c.tie_word_embeddings ? embed_ : w("lm_head.weight");
    global_inv_freq_ = rope_inv_freq(s.global_rope, c.head_dim).to(embed_.device());
    local_inv_freq_ = rope_inv_freq(s.local_rope, c.head_dim).to(embed_.device());
    scale_ = std::pow(s.query_pre_attn_scalar, -0.5);
    for (int64_t i = 0; i < c.num_layers; ++i) {
      Block blk;
      for (int n = 0; n < 4; ++n)
        blk.norms[n] = scale_of(layer(i, std::string(kNorms[n]) + ".weight"));
      blk.q_norm = scale_of(layer(i, "self_attn.q_norm.weight"));
      blk.k_norm = scale_of(layer(i, "self_attn.k_norm.weight"));
      blk.sliding = !c.sliding_layers.empty() && c.sliding_layers[i];
      if (c.fused) {
        // q and k normed together: their scales side by side, one row per head.
        blk.qk_norm = at::cat({blk.q_norm.expand({c.num_heads, c.head_dim}),
                               blk.k_norm.expand({c.num_kv_heads, c.head_dim})});
        blk.qkv = fused_proj({layer(i, "self_attn.q_proj"), layer(i, "self_attn.k_proj"),
                              layer(i, "self_attn.v_proj")});
        blk.o = fused_proj({layer(i, "self_attn.o_proj")});
        blk.gate_up = fused_proj({layer(i, "mlp.gate_proj"), layer(i, "mlp.up_proj")});
        blk.down = fused_proj({layer(i, "mlp.down_proj")});
      } else {
        for (const char* p : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
          blk.plain.push_back(plain_proj(layer(i, std::string("self_attn.") + p)));
        }
        for (const char* p : {"gate_proj", "up_proj", "down_proj"}) {
          blk.plain.push_back(plain_proj(layer(i, std::string("mlp.") + p)));
        }
      }
      blocks_.push_back(std::move(blk));
    }
    if (c.fused) {
      head_ = project(lm_head_, at::Tensor(), head_format(c.weights));
      rot_sign_ = at::ones({c.head_dim}, embed_.options());  // rotate_half's signs
      rot_sign_.slice(0, 0, c.head_dim / 2).fill_(-1.0);
    }
  }

  at::Tensor forward(const ForwardBatch& b, KVCache& cache) const override {
    const auto& c = config();
    at::Tensor h = at::embedding(embed_, b.input_ids) * embed_scale_;  // [rows, T, d]
    const at::Tensor logits = c.fused ? forward_fused(h, b, cache) : forward_plain(h, b, cache);
    if (!softcap_) return logits;
    return at::tanh(logits / *softcap_) * *softcap_;
  }

 private:
  struct Proj {
    at::Tensor w, b;  // b undefined without a bias
  };
  struct Block {
    at::Tensor norms[4];  // 1 + weight of kNorms, float32
    at::Tensor q_norm, k_norm;
    bool sliding = false;
    std::vector<Proj> plain;  // unfused: q, k, v, o, gate, up, down
    at::Tensor qk_norm;       // fused: [heads + kv_heads, head_dim] float32
    Projection qkv, o, gate_up, down;
  };

  at::Tensor scale_of(const std::string& name) const { return 1.0 + w(name).to(at::kFloat); }

  Proj plain_proj(const std::string& name) const {
    auto bias = weights().find(name + ".bias");
    return {w(name + ".weight"), bias == weights().end() ? at::Tensor() : bias->second};
  }

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

  at::Tensor activation(const at::Tensor& x, bool fused) const {
    if (tanh_gelu_) return at::gelu(x, "tanh");  // transformers' gelu_pytorch_tanh
    return fused ? activate_fused(x, act_) : activate(x, act_);
  }

  // The attention masks of global and local layers.  -> [rows, 1, T, L] bool (or undefined)
  std::pair<at::Tensor, at::Tensor> masks(const ForwardBatch& b) const {
    const auto& c = config();
    const at::Tensor local = window_layer_mask(b, c.sliding_window);
    return {b.attn_mask, local};
  }

  // transformers' formulation, op by op.
  at::Tensor forward_plain(at::Tensor h, const ForwardBatch& b, KVCache& cache) const {
    const auto& c = config();
    const auto dtype = h.scalar_type();
    const auto [gcos, gsin] = rope_cos_sin_halves(b.positions, global_inv_freq_, dtype);
    const auto [lcos, lsin] = rope_cos_sin_halves(b.positions, local_inv_freq_, dtype);
    const auto [global_mask, local_mask] = masks(b);
    const int64_t rows = h.size(0), t = h.size(1), hd = c.head_dim;
    auto heads_first = [&](const at::Tensor& y) {
      return y.view({rows, t, -1, hd}).transpose(1, 2);  // [rows, heads or kv_heads, T, hd]
    };
    for (int64_t i = 0; i < static_cast<int64_t>(blocks_.size()); ++i) {
      const Block& blk = blocks_[i];
      const auto& p = blk.plain;
      const at::Tensor& cos = blk.sliding ? lcos : gcos;
      const at::Tensor& sin = blk.sliding ? lsin : gsin;
      const at::Tensor x = gemma_norm(h, blk.norms[0], c.norm_eps);
      at::Tensor q =
          gemma_norm(heads_first(linear_maybe_bias(x, p[0].w, p[0].b)), blk.q_norm, c.norm_eps);
      at::Tensor k =
          gemma_norm(heads_first(linear_maybe_bias(x, p[1].w, p[1].b)), blk.k_norm, c.norm_eps);
      q = rotate_halves(q, cos, sin);
      k = rotate_halves(k, cos, sin);
      const at::Tensor v = heads_first(linear_maybe_bias(x, p[2].w, p[2].b));
      auto [keys, values] = cache.update(i, k, v, b.slots);  // [rows, kv_heads, L, hd]
      const at::Tensor o =
          attend_cached(cache, i, q, keys, values, blk.sliding ? local_mask : global_mask, scale_,
                        blk.sliding ? c.sliding_window : 0);
      h = h + gemma_norm(linear_maybe_bias(o, p[3].w, p[3].b), blk.norms[1], c.norm_eps);
      const at::Tensor y = gemma_norm(h, blk.norms[2], c.norm_eps);
      const at::Tensor g = activation(linear_maybe_bias(y, p[4].w, p[4].b), false) *
                           linear_maybe_bias(y, p[5].w, p[5].b);
      h = h + gemma_norm(linear_maybe_bias(g, p[6].w, p[6].b), blk.norms[3], c.norm_eps);
    }
    const at::Tensor last = gemma_norm(output_positions(h, b), norm_, c.norm_eps);
    return at::linear(last, lm_head_);  // [rows, (T,) vocab]
  }

  // RMSNorm as one kernel where one applies to float32 activations (LibTorch's on CUDA, gengraph's
  // on CPU: float32 models round as transformers' float32 formula does, up to the sum's order);
  // transformers' formula otherwise.  x: [..., n]; scale: [n] float32
  at::Tensor norm(const at::Tensor& x, const at::Tensor& scale) const {
    const double eps = config().norm_eps;
    if (x.scalar_type() == at::kFloat) {
      if (x.is_cuda()) return at::rms_norm(x, {x.size(-1)}, scale, eps);
      if (kernels::rms_norm_applies(x, scale)) return kernels::rms_norm(x, scale, eps);
    }
    return gemma_norm(x, scale, eps);
  }

  // The fused form: q/k/v as one GEMM, q and k normed together, rotated and stored by
  // rotate_and_store; gate/up as one GEMM; norms as one kernel where one applies.
  at::Tensor forward_fused(at::Tensor h, const ForwardBatch& b, KVCache& cache) const {
    const auto& c = config();
    const int64_t heads = c.num_heads, kv = c.num_kv_heads, hd = c.head_dim;
    const int64_t rows = h.size(0), t = h.size(1), inner = c.intermediate_size;
    const auto dtype = h.scalar_type();
    auto tables = [&](const at::Tensor& inv_freq) {
      auto [cos, sin] = rope_cos_sin_halves(b.positions, inv_freq, dtype);  // [rows, 1, T, hd]
      return std::make_pair(cos.transpose(1, 2), (sin * rot_sign_.to(dtype)).transpose(1, 2));
    };
    const auto [gcos, gsin] = tables(global_inv_freq_);
    const auto [lcos, lsin] = tables(local_inv_freq_);
    const auto [global_bool, local_bool] = masks(b);
    const at::Tensor global_mask = additive_mask(global_bool, dtype);
    const at::Tensor local_mask = local_bool.defined() && !local_bool.is_same(global_bool)
                                      ? additive_mask(local_bool, dtype)
                                      : global_mask;
    for (int64_t i = 0; i < static_cast<int64_t>(blocks_.size()); ++i) {
      const Block& blk = blocks_[i];
      const at::Tensor y = blk.qkv(norm(h, blk.norms[0]));  // [rows, T, (heads + 2 kv) hd]
      const at::Tensor qk = y.narrow(-1, 0, (heads + kv) * hd).view({rows, t, heads + kv, hd});
      const at::Tensor qkv =
          at::cat({gemma_norm(qk, blk.qk_norm, c.norm_eps).view({rows, t, (heads + kv) * hd}),
                   y.narrow(-1, (heads + kv) * hd, kv * hd)},
                  -1);
      const auto [q, keys, values] =
          rotate_and_store(qkv, blk.sliding ? lcos : gcos, blk.sliding ? lsin : gsin, heads, kv,
                           RotaryPairs::kHalves, cache, i, b.slots);
      const at::Tensor o =
          attend_cached(cache, i, q, keys, values, blk.sliding ? local_mask : global_mask, scale_,
                        blk.sliding ? c.sliding_window : 0);
      h = h + norm(blk.o(o), blk.norms[1]);
      const at::Tensor gu = blk.gate_up(norm(h, blk.norms[2]));
      const at::Tensor g = activation(gu.narrow(-1, 0, inner), true) * gu.narrow(-1, inner, inner);
      h = h + norm(blk.down(g), blk.norms[3]);
    }
    return head_(norm(output_positions(h, b), norm_));  // [rows, (T,) vocab]
  }

  bool tanh_gelu_ = true;
  Activation act_;
  std::optional<double> softcap_;
  at::Tensor embed_, embed_scale_, norm_, lm_head_, global_inv_freq_, local_inv_freq_, rot_sign_;
  double scale_ = 1.0;
  std::vector<Block> blocks_;
  Projection head_;
};

}  // namespace

Architecture gemma3_architecture() {
  Architecture a;
  a.model_type = "gemma3_text";
  a.input_embedding = "model.embed_tokens.weight";
  a.description =
      "Gemma 3 text (Gemma3ForCausalLM): (1 + weight) RMSNorms, q/k norms, GeGLU, local "
      "sliding-window layers beside global ones, each with its rope base";
  a.parse_config = parse_gemma3_config;
  a.weight_specs = gemma3_specs;
  a.names.canonical = [](const std::string& key) { return key; };
  a.names.ignorable = [](const std::string& key) { return key == "lm_head.weight"; };
  a.build = [](ModelConfig c, WeightMap w) -> std::unique_ptr<CausalLM> {
    return std::make_unique<Gemma3>(std::move(c), std::move(w));
  };
  return a;
}

}  // namespace gengraph

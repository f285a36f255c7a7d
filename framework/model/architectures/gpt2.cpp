// GPT-2 (transformers' GPT2LMHeadModel): learned positions, pre-norm blocks, Conv1D projections,
// fused qkv, tied LM head.
#include <ATen/ATen.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "framework/model/architectures/layer_functions.h"
#include "framework/model/causal_lm.h"
#include "framework/model/json_fields.h"
#include "framework/model/model_registry.h"
#include "framework/util/error.h"

namespace gengraph {
namespace {

std::string layer(int64_t i, const std::string& rest) {
  return "transformer.h." + std::to_string(i) + "." + rest;
}

ModelConfig parse_gpt2(const nlohmann::json& doc, const std::string& source) {
  JsonFields f(doc, source);
  ModelConfig c;
  c.vocab_size = f.positive_int("vocab_size", 50257);
  c.max_positions = f.positive_int("n_positions", 1024);
  c.hidden_size = f.positive_int("n_embd", 768);
  c.num_layers = f.positive_int("n_layer", 12);
  c.num_heads = f.positive_int("n_head", 12);
  if (c.hidden_size % c.num_heads != 0) {
    throw Error(source + ": n_embd " + std::to_string(c.hidden_size) +
                " is not divisible by n_head " + std::to_string(c.num_heads));
  }
  c.num_kv_heads = c.num_heads;
  c.head_dim = c.hidden_size / c.num_heads;
  c.intermediate_size = f.positive_int("n_inner", 4 * c.hidden_size);
  c.activation = f.string("activation_function", "gelu_new");
  parse_activation(c.activation, source);
  c.norm_eps = f.positive_number("layer_norm_epsilon", 1e-5);
  c.initializer_range = f.positive_number("initializer_range", 0.02);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", true);
  c.scale_attn_weights = f.boolean("scale_attn_weights", true);
  c.scale_attn_by_inverse_layer_idx = f.boolean("scale_attn_by_inverse_layer_idx", false);
  if (f.boolean("reorder_and_upcast_attn", false)) {
    f.fail("reorder_and_upcast_attn", "false (the upcast attention variant is not implemented)");
  }
  c.bos_token_id = f.optional_token("bos_token_id");
  c.pad_token_id = f.optional_token("pad_token_id");
  c.eos_token_ids = f.token_list("eos_token_id");
  return c;
}

std::vector<TensorSpec> gpt2_specs(const ModelConfig& c) {
  const int64_t d = c.hidden_size, inner = c.intermediate_size;
  std::vector<TensorSpec> s = {
      {"transformer.wte.weight", {c.vocab_size, d}},
      {"transformer.wpe.weight", {c.max_positions, d}},
      {"transformer.ln_f.weight", {d}, Init::kOnes},
      {"transformer.ln_f.bias", {d}, Init::kZeros},
  };
  for (int64_t i = 0; i < c.num_layers; ++i) {
    s.push_back({layer(i, "ln_1.weight"), {d}, Init::kOnes});
    s.push_back({layer(i, "ln_1.bias"), {d}, Init::kZeros});
    s.push_back({layer(i, "attn.c_attn.weight"), {d, 3 * d}});
    s.push_back({layer(i, "attn.c_attn.bias"), {3 * d}, Init::kZeros});
    s.push_back({layer(i, "attn.c_proj.weight"), {d, d}});
    s.push_back({layer(i, "attn.c_proj.bias"), {d}, Init::kZeros});
    s.push_back({layer(i, "ln_2.weight"), {d}, Init::kOnes});
    s.push_back({layer(i, "ln_2.bias"), {d}, Init::kZeros});
    s.push_back({layer(i, "mlp.c_fc.weight"), {d, inner}});
    s.push_back({layer(i, "mlp.c_fc.bias"), {inner}, Init::kZeros});
    s.push_back({layer(i, "mlp.c_proj.weight"), {inner, d}});
    s.push_back({layer(i, "mlp.c_proj.bias"), {d}, Init::kZeros});
  }
  if (!c.tie_word_embeddings) s.push_back({"lm_head.weight", {c.vocab_size, d}});
  return s;
}

class Gpt2 final : public CausalLM {
 public:
  Gpt2(ModelConfig config, WeightMap weights) : CausalLM(std::move(config), std::move(weights)) {
    const auto& c = this->config();
    act_ = parse_activation(c.activation, c.source);
    wte_ = w("transformer.wte.weight");
    wpe_ = w("transformer.wpe.weight");
    ln_f_ = {w("transformer.ln_f.weight"), w("transformer.ln_f.bias")};
    lm_head_ = c.tie_word_embeddings ? wte_ : w("lm_head.weight");
    if (c.fused) {
      make_fused();
      return;
    }
    for (int64_t i = 0; i < c.num_layers; ++i) {
      blocks_.push_back(Block{{w(layer(i, "ln_1.weight")), w(layer(i, "ln_1.bias"))},
                              w(layer(i, "attn.c_attn.weight")),
                              w(layer(i, "attn.c_attn.bias")),
                              w(layer(i, "attn.c_proj.weight")),
                              w(layer(i, "attn.c_proj.bias")),
                              {w(layer(i, "ln_2.weight")), w(layer(i, "ln_2.bias"))},
                              w(layer(i, "mlp.c_fc.weight")),
                              w(layer(i, "mlp.c_fc.bias")),
                              w(layer(i, "mlp.c_proj.weight")),
                              w(layer(i, "mlp.c_proj.bias"))});
    }
  }

  at::Tensor forward(const ForwardBatch& b, KVCache& cache) const override {
    if (config().fused) return forward_fused(b, cache);
    const auto& c = config();
    const int64_t rows = b.input_ids.size(0), t = b.input_ids.size(1);
    const int64_t d = c.hidden_size, heads = c.num_heads, hd = c.head_dim;
    at::Tensor h =
        at::embedding(wte_, b.input_ids) + at::embedding(wpe_, b.positions);  // [rows, T, d]
    for (int64_t i = 0; i < static_cast<int64_t>(blocks_.size()); ++i) {
      const Block& blk = blocks_[i];
      at::Tensor a = at::layer_norm(h, {d}, blk.ln_1.w, blk.ln_1.b, c.norm_eps);
      at::Tensor qkv = conv1d_linear(a, blk.c_attn_w, blk.c_attn_b);  // [rows, T, 3d]
      auto parts = qkv.split(d, 2);
      auto heads_first = [&](const at::Tensor& x) {
        return x.view({rows, t, heads, hd}).transpose(1, 2);  // [rows, heads, T, hd]
      };
      auto [k, v] = cache.update(i, heads_first(parts[1]), heads_first(parts[2]), b.slots);
      double scale = c.scale_attn_weights ? 1.0 / std::sqrt(static_cast<double>(hd)) : 1.0;
      if (c.scale_attn_by_inverse_layer_idx) scale /= static_cast<double>(i + 1);
      at::Tensor o =
          attend_cached(cache, i, heads_first(parts[0]), k, v, b.attn_mask, scale);  // [rows, T, d]
      h = h + conv1d_linear(o, blk.c_proj_w, blk.c_proj_b);
      at::Tensor m = at::layer_norm(h, {d}, blk.ln_2.w, blk.ln_2.b, c.norm_eps);
      m = activate(conv1d_linear(m, blk.fc_w, blk.fc_b), act_);
      h = h + conv1d_linear(m, blk.proj_w, blk.proj_b);
    }
    at::Tensor last = output_positions(h, b);  // [rows, (T or K,) d]
    last = at::layer_norm(last, {d}, ln_f_.w, ln_f_.b, c.norm_eps);
    return at::matmul(last, lm_head_.t());  // [rows, (T,) vocab]
  }

 private:
  struct Norm {
    at::Tensor w, b;
  };
  struct Block {
    Norm ln_1;
    at::Tensor c_attn_w, c_attn_b, c_proj_w, c_proj_b;
    Norm ln_2;
    at::Tensor fc_w, fc_b, proj_w, proj_b;
  };
  // The fused form. GPT-2 has one c_attn GEMM already; its Conv1D weights ([in, out]) are stored
  // transposed once, as [out, in] projections (oneDNN's layout on CPU, nn.Linear's elsewhere), the
  // residual adds ride on the output GEMMs, the mask is made additive once per step, and gelu_new
  // is one kernel.
  struct FusedBlock {
    Norm ln_1, ln_2;
    Projection attn, attn_out, fc, fc_out;
  };

  void make_fused() {
    const auto& c = config();
    auto conv = [&](int64_t i, const std::string& name) {
      return project(transposed(layer(i, name + ".weight")), w(layer(i, name + ".bias")),
                     c.weights);
    };
    for (int64_t i = 0; i < c.num_layers; ++i) {
      fused_.push_back(FusedBlock{{w(layer(i, "ln_1.weight")), w(layer(i, "ln_1.bias"))},
                                  {w(layer(i, "ln_2.weight")), w(layer(i, "ln_2.bias"))},
                                  conv(i, "attn.c_attn"),
                                  conv(i, "attn.c_proj"),
                                  conv(i, "mlp.c_fc"),
                                  conv(i, "mlp.c_proj")});
    }
    head_ = project(lm_head_, at::Tensor(), head_format(c.weights));
  }

  at::Tensor forward_fused(const ForwardBatch& b, KVCache& cache) const {
    const auto& c = config();
    const int64_t rows = b.input_ids.size(0), t = b.input_ids.size(1);
    const int64_t d = c.hidden_size, heads = c.num_heads, hd = c.head_dim;
    at::Tensor h =
        at::embedding(wte_, b.input_ids) + at::embedding(wpe_, b.positions);  // [rows, T, d]
    const at::Tensor mask = additive_mask(b.attn_mask, h.scalar_type());
    for (int64_t i = 0; i < static_cast<int64_t>(fused_.size()); ++i) {
      const FusedBlock& blk = fused_[i];
      const at::Tensor a = at::layer_norm(h, {d}, blk.ln_1.w, blk.ln_1.b, c.norm_eps);
      const at::Tensor qkv = blk.attn(a);  // [rows, T, 3d]
      auto heads_first = [&](int64_t part) {
        return qkv.narrow(-1, part * d, d).view({rows, t, heads, hd}).transpose(1, 2);
      };
      auto [k, v] = cache.update(i, heads_first(1), heads_first(2), b.slots);
      double scale = c.scale_attn_weights ? 1.0 / std::sqrt(static_cast<double>(hd)) : 1.0;
      if (c.scale_attn_by_inverse_layer_idx) scale /= static_cast<double>(i + 1);
      const at::Tensor o =
          attend_cached(cache, i, heads_first(0), k, v, mask, scale);  // [rows, T, d]
      h = blk.attn_out.add_to(h, o);
      const at::Tensor m = at::layer_norm(h, {d}, blk.ln_2.w, blk.ln_2.b, c.norm_eps);
      h = blk.fc_out.add_to(h, activate_fused(blk.fc(m), act_));
    }
    at::Tensor last = output_positions(h, b);  // [rows, (T or K,) d]
    last = at::layer_norm(last, {d}, ln_f_.w, ln_f_.b, c.norm_eps);
    return head_(last);  // [rows, (T,) vocab]
  }

  Activation act_;
  at::Tensor wte_, wpe_, lm_head_;
  Norm ln_f_;
  std::vector<Block> blocks_;
  std::vector<FusedBlock> fused_;
  Projection head_;
};

}  // namespace

Architecture gpt2_architecture() {
  Architecture a;
  a.model_type = "gpt2";
  a.input_embedding = "transformer.wte.weight";
  a.description = "GPT-2 (GPT2LMHeadModel): learned positions, Conv1D projections, tied head";
  a.parse_config = parse_gpt2;
  a.weight_specs = gpt2_specs;
  a.names.canonical = [](const std::string& key) {
    // Original OpenAI-converted checkpoints omit the "transformer." prefix.
    if (key.rfind("transformer.", 0) == 0 || key.rfind("lm_head.", 0) == 0) return key;
    return "transformer." + key;
  };
  a.names.ignorable = gpt2_family_ignorable;
  a.build = [](ModelConfig c, WeightMap w) -> std::unique_ptr<CausalLM> {
    return std::make_unique<Gpt2>(std::move(c), std::move(w));
  };
  return a;
}

}  // namespace gengraph

// A typed view of a Hugging Face config.json, shared by every architecture.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "framework/quant/weight_format.h"  // WeightFormat (ModelConfig::weights)

namespace gengraph {

struct StoredWeights;  // framework/model/stored_weights.h

// Rotary position embedding parameters as transformers 5.17 standardizes them (config.json
// "rope_parameters", or the older "rope_scaling" plus a top-level "rope_theta").
struct RopeConfig {
  std::string type = "default";        // rope_type: "default", "linear" or "llama3"
  double theta = 10000.0;              // rope_theta, the base wavelength
  double factor = 1.0;                 // "linear" and "llama3": how much the context was stretched
  double low_freq_factor = 1.0;        // "llama3" only
  double high_freq_factor = 4.0;       // "llama3" only
  int64_t original_max_positions = 0;  // "llama3": original_max_position_embeddings
};

struct ModelConfig {
  std::string model_type;  // config.json "model_type", the model registry key
  std::string source;      // where it came from (file path or "preset:NAME"), for error messages
  // The config.json document it was parsed from (preset overrides applied), so that the model can
  // be written back out as a Hugging Face folder (save_model_folder).
  std::shared_ptr<const nlohmann::json> document;

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;  // == num_heads without grouped-query attention
  int64_t head_dim = 0;
  int64_t intermediate_size = 0;
  int64_t max_positions = 0;  // the model's context length
  double norm_eps = 1e-5;
  std::string activation;
  bool tie_word_embeddings = true;
  double initializer_range = 0.02;

  // GPT-2 specific attention scaling switches (transformers' GPT2Config names).
  bool scale_attn_weights = true;
  bool scale_attn_by_inverse_layer_idx = false;

  // Rotary position embeddings (GPT-J, LLaMA family). rotary_dim counts the leading dimensions of
  // each head that rotate: GPT-J's rotary_dim, head_dim for the LLaMA family, 0 without rotary.
  int64_t rotary_dim = 0;
  RopeConfig rope;

  // Which projections carry a bias (LLaMA family): q/k/v (LLaMA attention_bias, always on for
  // Qwen2), the attention output o_proj (LLaMA attention_bias, off for Qwen2), and the three MLP
  // projections (LLaMA mlp_bias).
  bool qkv_bias = false;
  bool out_proj_bias = false;
  bool mlp_bias = false;

  // Sliding-window attention (Mistral, Qwen2): a query at cache slot i reads slots j with
  // i - j < sliding_window, in the layers marked in sliding_layers (one entry per layer, or empty
  // when no layer slides). 0 = no window.
  int64_t sliding_window = 0;
  std::vector<bool> sliding_layers;

  std::optional<int64_t> bos_token_id;
  std::optional<int64_t> pad_token_id;
  std::vector<int64_t> eos_token_ids;

  // Not from config.json: how this instance computes, set from LoadOptions::fused by the loader.
  // true: projections that read the same input concatenated at load time into one GEMM (q/k/v,
  // gate/up, GPT-J's q/k/v + fc_in and out + fc_out), the attention mask made additive and the
  // rotary tables made once per step, one-kernel activations, and on CPU weights pre-transposed
  // for LibTorch's small-batch GEMMs. false: transformers' formulation, op by op, on the
  // checkpoint's tensors. Both are token-exact with transformers on the parity suite.
  bool fused = true;
  // Not from config.json: the linear layers' weight format (LoadOptions::weights), applied by the
  // fused form's projections at load.
  WeightFormat weights;
  // Not from config.json: projection weights the file holds already on `weights`' grid (a GGUF's
  // Q4_0 / Q4_1 tensors for int4 in groups of 32), taken as they are; null for none.
  std::shared_ptr<const StoredWeights> stored;

  // Throws gengraph::Error naming `source` and the field when the numbers are inconsistent.
  void validate() const;
  void validate_rope() const;
};

// Reads and parses a JSON file, naming the file (and line/byte) on malformed input.
nlohmann::json read_json_file(const std::filesystem::path& path);

}  // namespace gengraph

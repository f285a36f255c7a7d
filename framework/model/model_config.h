// A typed view of a Hugging Face config.json, shared by every architecture.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

namespace gengraph {

// Weight-only quantization of the linear layers (model.weights): the fused form's projections
// (q/k/v, output, MLP, and the output head unless lm_head is false) hold their weights as
//   int8      one int8 per weight, one float scale per output channel (absmax / 127), computed by
//             gengraph's kernels on CPU (with int8_activation_rows, products of that many rows
//             quantize their activations too) and at::_weight_int8pack_mm on CUDA;
//   int4      4-bit values in groups of group_size input channels, a float16 scale and zero per
//             group and output channel, packed for gengraph's int4 kernels;
//   bfloat16  bfloat16 weights with float32 activations (the product in bfloat16);
// and kAsLoaded keeps the model's dtype. Activations, norms, attention and the cache stay in the
// model's dtype.
struct WeightFormat {
  enum class Kind { kAsLoaded, kInt8, kInt4, kBFloat16 };
  Kind kind = Kind::kAsLoaded;
  int64_t group_size = 32;  // int4: input channels per scale (32, 64, 128 or 256)
  bool lm_head = true;      // quantize the output head too
  // int4 only: the output head in int8 instead (with int8 activations, as int8_activation_rows and
  // _block say), as 4-bit engines keep it at higher precision.
  bool int8_head = false;
  // int8 or int4 on CPU: products of at least this many activation rows quantize the activations
  // to int8 too (W8A8, kernels::linear_w8a8; W4A8, kernels::linear_w4a8); fewer rows stay
  // weight-only. 0: never (the default).
  int64_t int8_activation_rows = 0;
  // Those products' activation scales: 0, one per row (LibTorch's integer GEMM); B, one per block
  // of B input channels of each row (a multiple of 32 dividing every projection's input width;
  // gengraph's VNNI / AVX2 kernels); int4 takes 32 only. No effect while int8_activation_rows is 0.
  int64_t int8_activation_block = 0;
  bool quantized() const { return kind != Kind::kAsLoaded; }
  // "float" (as loaded), "int8", "int4" or "bfloat16"; describe() adds the group and the head.
  std::string name() const;
  std::string describe() const;
  bool operator==(const WeightFormat& o) const {
    return kind == o.kind && group_size == o.group_size && lm_head == o.lm_head &&
           int8_head == o.int8_head && int8_activation_rows == o.int8_activation_rows &&
           int8_activation_block == o.int8_activation_block;
  }
  bool operator!=(const WeightFormat& o) const { return !(*this == o); }
};
// "float" | "int8" | "int4" | "bfloat16"; anything else is refused naming `where`.
WeightFormat::Kind parse_weight_kind(const std::string& name, const std::string& where);
// The int4 group sizes (input channels per scale) gengraph's kernels take: the one check of
// model.group_size, gengraph quality --group-size, EngineOptions::group_size and the quantization
// at load, whose errors say "expected " kGroupSizes.
constexpr const char* kGroupSizes = "32, 64, 128 or 256";
bool is_group_size(int64_t n);

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

  // Throws gengraph::Error naming `source` and the field when the numbers are inconsistent.
  void validate() const;
  void validate_rope() const;
};

// Reads config.json at `path` and parses it with the parser registered for its model_type.
ModelConfig load_model_config(const std::filesystem::path& path);

// Parses an already-read config.json document; `source` names it in errors.
ModelConfig parse_model_config(const nlohmann::json& doc, const std::string& source);

// Reads and parses a JSON file, naming the file (and line/byte) on malformed input.
nlohmann::json read_json_file(const std::filesystem::path& path);

}  // namespace gengraph

// Gemma 3's text model (transformers' Gemma3ForCausalLM, model_type "gemma3_text"): what its
// config.json says beyond ModelConfig's shared fields. gemma3_config.cpp parses it; gemma3.cpp
// builds the model, reading these settings back from ModelConfig::document.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>

#include "framework/model/model_config.h"

namespace gengraph {

struct Gemma3Settings {
  // Rotary embeddings per layer type: global (full_attention) and local (sliding_attention).
  RopeConfig global_rope, local_rope;
  // Attention scores are scaled by query_pre_attn_scalar ** -0.5 (not head_dim ** -0.5).
  double query_pre_attn_scalar = 256.0;
  // final_logit_softcapping: logits become tanh(logits / c) * c; none when absent or null.
  std::optional<double> final_logit_softcapping;
};

// The config.json of a gemma3_text model, read as transformers 5.17's Gemma3TextConfig reads it;
// what gengraph does not implement (attention logit softcapping, bidirectional attention, rope
// types other than default and linear, partial rotary) is refused naming the key.
ModelConfig parse_gemma3_config(const nlohmann::json& doc, const std::string& source);

// The Gemma-only settings of that document (parse_gemma3_config has already checked them).
Gemma3Settings gemma3_settings(const nlohmann::json& doc, const std::string& source);

}  // namespace gengraph

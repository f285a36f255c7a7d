// Rotary position embeddings shared by GPT-J and the LLaMA family: config parsing, inverse
// frequencies, and the two ways of pairing dimensions (GPT-J's interleaved pairs, LLaMA's halves).
// Everything per step is a tensor op on the positions tensor, so forward() traces.
#pragma once

#include <ATen/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>

#include "framework/model/model_config.h"

namespace gengraph {

// Reads the rope settings of a LLaMA-family config.json as transformers 5.17 does: "rope_scaling"
// (older files) wins over "rope_parameters"; inside it "rope_type" (or the older "type") defaults
// to "default"; "rope_theta" comes from the dict, else the top level, else 10000; llama3's
// original_max_position_embeddings comes from the top level, else the dict, else max_positions.
// Rope types that are not implemented, per-layer-type dicts and partial_rotary_factor != 1 are
// refused naming the key.
RopeConfig parse_rope(const nlohmann::json& doc, const std::string& source, int64_t max_positions);

// Inverse frequencies for `dim` rotating dimensions, float32 [dim / 2], computed with the same
// float32 operations as transformers' rope init functions (default, linear, llama3).
at::Tensor rope_inv_freq(const RopeConfig& rope, int64_t dim);

// cos/sin of the rotation angles positions * inv_freq, computed in float32 and cast to `dtype`
// (transformers does the same), laid out for rotate_halves: the dim / 2 angles repeated as two
// halves.  positions: [rows, T] int64, inv_freq: [dim / 2] -> cos, sin: [rows, 1, T, dim]
std::pair<at::Tensor, at::Tensor> rope_cos_sin_halves(const at::Tensor& positions,
                                                      const at::Tensor& inv_freq,
                                                      at::ScalarType dtype);

// The same angles laid out for rotate_pairs: each angle repeated for the two dims of its pair.
//   positions: [rows, T] int64, inv_freq: [dim / 2] -> cos, sin: [rows, T, 1, dim]
std::pair<at::Tensor, at::Tensor> rope_cos_sin_pairs(const at::Tensor& positions,
                                                     const at::Tensor& inv_freq,
                                                     at::ScalarType dtype);

// LLaMA's rotate_half form: dim i pairs with dim i + hd / 2.
//   x: [rows, heads, T, hd]; cos, sin: [rows, 1, T, hd] -> [rows, heads, T, hd]
at::Tensor rotate_halves(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// GPT-J's rotate_every_two form: dim 2i pairs with dim 2i + 1.
//   x: [rows, T, heads, rot]; cos, sin: [rows, T, 1, rot] -> [rows, T, heads, rot]
at::Tensor rotate_pairs(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace gengraph

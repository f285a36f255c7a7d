#include "framework/model/architectures/rope.h"

#include <ATen/ATen.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "framework/model/json_fields.h"

namespace gengraph {
namespace {

// The dict holding the rope settings and its key, as transformers picks it: a non-empty
// "rope_scaling" wins over "rope_parameters"; neither gives an empty dict.
std::pair<const nlohmann::json*, std::string> rope_dict(const nlohmann::json& doc,
                                                        const JsonFields& top) {
  static const nlohmann::json kEmpty = nlohmann::json::object();
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!top.has(key)) continue;
    if (!doc[key].is_object()) top.fail(key, "an object");
    if (!doc[key].empty()) return {&doc[key], key};
  }
  return {&kEmpty, "rope_parameters"};
}

double required_number(const JsonFields& p, const std::string& key, const std::string& type) {
  if (!p.has(key)) p.fail(key, "a positive number (required by rope_type '" + type + "')");
  return p.positive_number(key, 1.0);
}

}  // namespace

RopeConfig parse_rope(const nlohmann::json& doc, const std::string& source, int64_t max_positions) {
  const JsonFields top(doc, source);
  const auto [dict, dict_key] = rope_dict(doc, top);
  const JsonFields p(*dict, source, dict_key + ".");
  for (const char* layer_type : {"full_attention", "sliding_attention"}) {
    if (p.has(layer_type)) {
      p.fail(layer_type, "one rope dict for all layers (per-layer-type rope is not supported)");
    }
  }
  RopeConfig r;
  const std::string type_key = p.has("rope_type") || !p.has("type") ? "rope_type" : "type";
  r.type = p.string(type_key, "default");
  if (r.type != "default" && r.type != "linear" && r.type != "llama3") {
    p.fail(type_key, "one of default, linear, llama3 (the implemented rope types)");
  }
  r.theta = p.has("rope_theta") ? p.positive_number("rope_theta", 1.0)
                                : top.positive_number("rope_theta", 10000.0);
  const JsonFields& partial = p.has("partial_rotary_factor") ? p : top;
  if (partial.number("partial_rotary_factor", 1.0) != 1.0) {
    partial.fail("partial_rotary_factor",
                 "1 (partial rotary is not supported by this architecture)");
  }
  if (r.type == "default") return r;
  r.factor = required_number(p, "factor", r.type);
  if (r.type == "llama3") {
    r.low_freq_factor = required_number(p, "low_freq_factor", r.type);
    r.high_freq_factor = required_number(p, "high_freq_factor", r.type);
    if (r.high_freq_factor <= r.low_freq_factor) {
      p.fail("high_freq_factor", "a number above low_freq_factor");
    }
    // transformers lets a top-level original_max_position_embeddings override the dict's.
    r.original_max_positions =
        top.has("original_max_position_embeddings")
            ? top.positive_int("original_max_position_embeddings")
            : p.positive_int("original_max_position_embeddings", max_positions);
  }
  return r;
}

at::Tensor rope_inv_freq(const RopeConfig& rope, int64_t dim) {
  // The float32 operations of transformers' init functions, in the same order:
  // 1.0 / (theta ** (arange(0, dim, 2) / dim)), where `1.0 / t` is t.reciprocal().
  const at::Tensor exponent = at::arange(0, dim, 2, at::kLong) / dim;  // [dim / 2] float32
  at::Tensor inv_freq = at::reciprocal(at::pow(rope.theta, exponent));
  if (rope.type == "linear") return inv_freq / rope.factor;
  if (rope.type != "llama3") return inv_freq;
  const double old_len = static_cast<double>(rope.original_max_positions);
  const double low_wavelen = old_len / rope.low_freq_factor;
  const double high_wavelen = old_len / rope.high_freq_factor;
  const at::Tensor wavelen = at::reciprocal(inv_freq) * (2 * M_PI);
  // Long wavelengths are slowed down by `factor`, short ones kept, the band between smoothed.
  at::Tensor scaled = at::where(wavelen > low_wavelen, inv_freq / rope.factor, inv_freq);
  const at::Tensor smooth = (at::reciprocal(wavelen) * old_len - rope.low_freq_factor) /
                            (rope.high_freq_factor - rope.low_freq_factor);
  const at::Tensor smoothed = (1 - smooth) * scaled / rope.factor + smooth * scaled;
  const at::Tensor medium =
      (wavelen < high_wavelen).logical_not() * (wavelen > low_wavelen).logical_not();
  return at::where(medium, smoothed, scaled);
}

std::pair<at::Tensor, at::Tensor> rope_cos_sin_halves(const at::Tensor& positions,
                                                      const at::Tensor& inv_freq,
                                                      at::ScalarType dtype) {
  const at::Tensor angles = positions.to(at::kFloat).unsqueeze(-1) * inv_freq;  // [rows, T, d/2]
  const at::Tensor emb = at::cat({angles, angles}, -1);                         // [rows, T, d]
  return {emb.cos().to(dtype).unsqueeze(1), emb.sin().to(dtype).unsqueeze(1)};
}

std::pair<at::Tensor, at::Tensor> rope_cos_sin_pairs(const at::Tensor& positions,
                                                     const at::Tensor& inv_freq,
                                                     at::ScalarType dtype) {
  const at::Tensor angles = positions.to(at::kFloat).unsqueeze(-1) * inv_freq;  // [rows, T, d/2]
  auto per_pair = [&](const at::Tensor& t) {
    return at::repeat_interleave(t.to(dtype).unsqueeze(2), 2, 3);  // [rows, T, 1, d]
  };
  return {per_pair(angles.cos()), per_pair(angles.sin())};
}

at::Tensor rotate_halves(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const at::Tensor rotated = at::cat({-x.slice(-1, half), x.slice(-1, 0, half)}, -1);
  return x * cos + rotated * sin;
}

at::Tensor rotate_pairs(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const at::Tensor even = x.slice(-1, 0, c10::nullopt, 2);  // [rows, T, heads, rot / 2]
  const at::Tensor odd = x.slice(-1, 1, c10::nullopt, 2);
  const at::Tensor rotated = at::stack({-odd, even}, -1).flatten(-2);  // [rows, T, heads, rot]
  return x * cos + rotated * sin;
}

}  // namespace gengraph

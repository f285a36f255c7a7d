#include "experiments/experiment/row_forms.h"

#include "framework/quant/weight_format.h"
#include "framework/util/device.h"

namespace gengraph {

std::string model_name(const ModelSpec& m) {
  return m.preset.empty() ? m.path : "preset:" + m.preset;
}

ModelOptions model_options(const ModelSpec& m) {
  ModelOptions o;
  o.device = m.device;
  const c10::ScalarType dtype = parse_dtype(m.dtype);
  o.dtype = dtype == c10::kBFloat16 ? DType::kBFloat16
            : dtype == c10::kHalf   ? DType::kFloat16
                                    : DType::kFloat32;
  o.fused = m.fused;
  o.check_weights = m.check_weights;
  o.weights = m.weights;
  o.group_size = m.group_size;
  o.quantize_head = m.quantize_head;
  o.int8_head = m.int8_head;
  o.int8_activation_rows = m.int8_activation_rows;
  o.int8_activation_block = m.int8_activation_block;
  if (!m.preset.empty()) {
    o.model_config = m.config_overrides;
    o.weights_seed = m.seed;
  }
  return o;
}

RunOptions run_options(const BackendSpec& spec) {
  RunOptions o;
  o.backend = spec.name;
  o.backend_options = spec.options;
  o.whole_step = spec.loop.whole_step;
  o.capture = spec.loop.capture;
  o.sync_every = spec.loop.sync_every;
  return o;
}

WeightFormat weight_format(const ModelSpec& m) {
  return parse_weight_format(weight_keys(m), key_names_with_prefix("model."));
}

ModelSpec row_model_spec(const ExperimentConfig& c, const BackendSpec& b) {
  ModelSpec m = b.model.value_or(c.model);
  if (b.fused) m.fused = *b.fused;
  if (!m.fused) {
    m.weights = "float";
    m.int8_head = false;
    m.int8_activation_rows = 0;
  }
  return m;
}

std::string form_key(const ModelSpec& m) {
  return weight_format(m).describe() + (m.fused ? "" : ", unfused");
}

nlohmann::json row_generation(const ExperimentConfig& c, const BackendSpec& spec) {
  nlohmann::json g = c.generation;
  for (auto it = spec.generation.begin(); it != spec.generation.end(); ++it) g[it.key()] = *it;
  return g;
}

}  // namespace gengraph

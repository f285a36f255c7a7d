// What each row of an experiment runs: the model in the form it asks for (`fused`, `model:`), the
// Engine's run options, and its generation keys. Shared by the check (check.cpp) and the run
// (runner.cpp), so that both see the same rows.
#pragma once

#include <gengraph/gengraph.h>

#include <nlohmann/json.hpp>
#include <string>

#include "experiments/experiment/experiment_config.h"

namespace gengraph {

// The experiment's model as the public Model loads it: "preset:NAME" or the folder.
std::string model_name(const ModelSpec& m);
ModelOptions model_options(const ModelSpec& m);
RunOptions run_options(const BackendSpec& spec);
// The weight format of `m`, through the one parser (framework/quant/weight_format.h).
WeightFormat weight_format(const ModelSpec& m);

// The model a row runs on: the experiment's, in the row's weight format (`model:`) and form
// (`fused`). The unfused form computes transformers' way, weights as loaded.
ModelSpec row_model_spec(const ExperimentConfig& c, const BackendSpec& b);
// What tells two rows' models apart: the runner loads one model per distinct key.
std::string form_key(const ModelSpec& m);
// A row's generation settings: the experiment's, under the row's own `generation:` keys.
nlohmann::json row_generation(const ExperimentConfig& c, const BackendSpec& spec);

}  // namespace gengraph

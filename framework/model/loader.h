// Building a model: from a local Hugging Face folder, or from a built-in preset with random
// weights drawn from a seed (any shape, no files needed).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "framework/model/causal_lm.h"

namespace gengraph {

struct ModelSource {
  std::string preset;               // a built-in preset name, or
  std::filesystem::path path;       // a folder with config.json + safetensors
  nlohmann::json config_overrides;  // config.json keys overriding the preset's (presets only)
  uint64_t seed = 0;                // random-weight seed (presets only)
  LoadOptions load;                 // dtype and device
};

struct LoadedModel {
  std::shared_ptr<const CausalLM> model;
  std::string source;                  // "preset:NAME" or the folder
  nlohmann::json generation_defaults;  // generation_config.json when the folder has one, else null
  nlohmann::json config_json;          // the config.json document the model was built from
  double load_seconds = 0;
  // What the load did that the files did not say outright (e.g. a tie that was not made).
  std::vector<std::string> warnings;
};

LoadedModel load_model(const ModelSource& source);

// The model's configuration alone, checked as load_model checks it (preset overrides included),
// without any weights: what an experiment can be validated against before the load.
ModelConfig model_config_of(const ModelSource& source);

// Checks that `dir` is a model folder with a config.json that is a regular file, and returns that
// file's path. Errors say what was found instead (nothing, a file, a directory, a FIFO, ...) and,
// when the path is also the name of a built-in preset, how to ask for the preset.
std::filesystem::path check_model_folder(const std::filesystem::path& dir);

// Writes `model` as a Hugging Face folder (config.json + model.safetensors, tensors in the model's
// dtype under transformers' names), so that another tool can load the very same weights.
void save_model_folder(const LoadedModel& model, const std::filesystem::path& folder);
// The same for a model alone: its config.json is the document it was parsed from.
void save_model_folder(const CausalLM& model, const std::filesystem::path& folder);

// Presets of published shapes: config.json documents by name.
std::vector<std::string> preset_names();
nlohmann::json preset_config(const std::string& name);

}  // namespace gengraph

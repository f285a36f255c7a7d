// Runs an experiment: load the model once, then for each backend warm up, repeat, time, and
// collect the generated tokens. Produces the results document (docs/results-schema.md).
#pragma once

#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "framework/config/experiment_config.h"
#include "framework/decoding/generation_config.h"

namespace gengraph {

struct ResolvedInputs {
  std::vector<std::vector<int64_t>> prompts;
};

// Generation settings as they apply to this model: transformers' defaults, then the model's
// generation_config.json (or its config.json special tokens), then the experiment's values.
GenerationConfig resolve_generation(const ExperimentConfig& c, const nlohmann::json& model_defaults,
                                    int64_t config_bos, const std::vector<int64_t>& config_eos,
                                    std::optional<int64_t> config_pad,
                                    std::vector<std::string>* ignored_keys);

// `log` receives progress lines; the results document is returned (nothing is written).
nlohmann::json run_experiment(const ExperimentConfig& config, std::ostream& log);

// Writes `doc` to `path` atomically (temporary file, then rename); creates parent folders.
void write_results(const nlohmann::json& doc, const std::filesystem::path& path);

// A readable table of a results document.
std::string format_table(const nlohmann::json& doc);

}  // namespace gengraph

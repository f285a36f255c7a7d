// Generation settings as they apply to one model, layered as transformers layers them: its
// ResolvedSettings defaults, then the model's generation_config.json (or, without one, the special
// tokens of its config.json), then the caller's overrides. The CLI, the runner and the public
// Engine all resolve settings here, so the same model and keys give the same settings everywhere.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "framework/decoding/resolved_settings.h"

namespace gengraph {

struct LoadedModel;
struct ModelConfig;

// `overrides`: ResolvedSettings keys -> values (an object; `source` names them in errors). Keys of
// generation_config.json that gengraph does not implement are returned in `ignored_keys`. The
// result is validated, and its token ids are checked against the model's vocabulary.
ResolvedSettings resolve_generation(const LoadedModel& model, const nlohmann::json& overrides,
                                    const std::string& source,
                                    std::vector<std::string>* ignored_keys = nullptr);

// The same before any weight is loaded: `model` is the model's configuration,
// `generation_defaults` its folder's generation_config.json (null when it has none) and
// `model_source` "preset:NAME" or the folder. `validate` and `submit` resolve through it, so they
// refuse what `run` would.
ResolvedSettings resolve_generation(const ModelConfig& model,
                                    const nlohmann::json& generation_defaults,
                                    const std::string& model_source,
                                    const nlohmann::json& overrides, const std::string& source,
                                    std::vector<std::string>* ignored_keys = nullptr);

// A model folder's generation_config.json (an object), or null when the folder has none.
nlohmann::json read_generation_defaults(const std::filesystem::path& folder);

}  // namespace gengraph

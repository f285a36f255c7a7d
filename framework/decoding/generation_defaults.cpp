#include "framework/decoding/generation_defaults.h"

#include "framework/model/loader.h"
#include "framework/util/error.h"
#include "framework/util/path_errors.h"

namespace gengraph {

nlohmann::json read_generation_defaults(const std::filesystem::path& folder) {
  const auto path = folder / "generation_config.json";
  if (!checked_exists(path, "the model's generation_config.json")) return nullptr;
  nlohmann::json doc = read_json_file(path);
  if (!doc.is_object()) {
    throw Error("'" + path.string() + "': expected a JSON object, found " +
                doc.dump().substr(0, 60));
  }
  return doc;
}

ResolvedSettings resolve_generation(const LoadedModel& model, const nlohmann::json& overrides,
                                    const std::string& source,
                                    std::vector<std::string>* ignored_keys) {
  return resolve_generation(model.model->config(), model.generation_defaults, model.source,
                            overrides, source, ignored_keys);
}

ResolvedSettings resolve_generation(const ModelConfig& mc,
                                    const nlohmann::json& generation_defaults,
                                    const std::string& model_source,
                                    const nlohmann::json& overrides, const std::string& source,
                                    std::vector<std::string>* ignored_keys) {
  if (!overrides.is_null() && !overrides.is_object()) {
    throw Error(source + ": expected a mapping of generation keys to values, found " +
                overrides.dump());
  }
  ResolvedSettings g;
  if (generation_defaults.is_object()) {
    auto ignored =
        apply_generation_defaults(g, generation_defaults, model_source + "/generation_config.json");
    if (ignored_keys) *ignored_keys = ignored;
  } else {
    // transformers builds the generation config from config.json's special tokens.
    g.bos_token_id = mc.bos_token_id;
    g.eos_token_id = mc.eos_token_ids;
    g.pad_token_id = mc.pad_token_id;
  }
  if (overrides.is_object()) {
    for (auto it = overrides.begin(); it != overrides.end(); ++it) {
      apply_generation_key(g, it.key(), it.value(), source);
    }
  }
  g.validate();
  const bool preset = model_source.rfind("preset:", 0) == 0;
  const std::string defaults =
      preset ? model_source + " (its config)"
             : model_source +
                   (generation_defaults.is_object() ? "/generation_config.json" : "/config.json");
  g.validate_for_vocab(mc.vocab_size, [&](const std::string& key) {
    return overrides.is_object() && overrides.contains(key) ? source : defaults;
  });
  return g;
}

}  // namespace gengraph

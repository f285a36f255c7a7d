#include "framework/decoding/generation_defaults.h"

#include "framework/model/loader.h"
#include "framework/util/error.h"

namespace gengraph {

GenerationConfig resolve_generation(const LoadedModel& model, const nlohmann::json& overrides,
                                    const std::string& source,
                                    std::vector<std::string>* ignored_keys) {
  if (!overrides.is_null() && !overrides.is_object()) {
    throw Error(source + ": expected a mapping of generation keys to values, found " +
                overrides.dump());
  }
  GenerationConfig g;
  if (model.generation_defaults.is_object()) {
    auto ignored = apply_generation_defaults(g, model.generation_defaults,
                                             model.source + "/generation_config.json");
    if (ignored_keys) *ignored_keys = ignored;
  } else {
    // transformers builds the generation config from config.json's special tokens.
    const auto& mc = model.model->config();
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
  const bool preset = model.source.rfind("preset:", 0) == 0;
  const std::string defaults =
      preset ? model.source + " (its config)"
             : model.source + (model.generation_defaults.is_object() ? "/generation_config.json"
                                                                     : "/config.json");
  g.validate_for_vocab(model.model->config().vocab_size, [&](const std::string& key) {
    return overrides.is_object() && overrides.contains(key) ? source : defaults;
  });
  return g;
}

}  // namespace gengraph

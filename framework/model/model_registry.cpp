#include "framework/model/model_registry.h"

#include <mutex>
#include <nlohmann/json.hpp>

#include "framework/model/causal_lm.h"
#include "framework/model/json_fields.h"
#include "framework/util/error.h"
#include "framework/util/strings.h"

namespace gengraph {

// framework/model/architectures/gemma3.cpp (declared here rather than in model_registry.h, which
// most of the tree includes).
Architecture gemma3_architecture();

ModelRegistry& ModelRegistry::instance() {
  static ModelRegistry registry;
  return registry;
}

void ModelRegistry::add(Architecture arch) {
  if (archs_.count(arch.model_type)) {
    throw Error("model type '" + arch.model_type + "' is already registered");
  }
  archs_.emplace(arch.model_type, std::move(arch));
}

const Architecture& ModelRegistry::get(const std::string& model_type,
                                       const std::string& context) const {
  auto it = archs_.find(model_type);
  if (it == archs_.end()) {
    throw Error(context + ": unsupported model_type '" + model_type +
                "'; supported: " + join(names(), ", "));
  }
  return it->second;
}

std::vector<std::string> ModelRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : archs_) out.push_back(k);
  return out;
}

void register_builtin_architectures() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto& registry = ModelRegistry::instance();
    registry.add(gpt2_architecture());
    registry.add(gptj_architecture());
    registry.add(llama_architecture());
    registry.add(mistral_architecture());
    registry.add(qwen2_architecture());
    registry.add(gemma3_architecture());
  });
}

ModelConfig parse_model_config(const nlohmann::json& doc, const std::string& source) {
  if (!doc.is_object()) throw Error(source + ": expected a JSON object");
  if (!doc.contains("model_type") || !doc["model_type"].is_string()) {
    throw Error(source + ": missing string field 'model_type' (which architecture is this?)");
  }
  ConfigKeyRecorder::note("model_type");
  const Architecture& arch =
      ModelRegistry::instance().get(doc["model_type"].get<std::string>(), source);
  ModelConfig c = arch.parse_config(doc, source);
  c.model_type = arch.model_type;
  c.source = source;
  c.document = std::make_shared<const nlohmann::json>(doc);
  c.validate();
  return c;
}

ModelConfig load_model_config(const std::filesystem::path& path) {
  return parse_model_config(read_json_file(path), path.string());
}

}  // namespace gengraph

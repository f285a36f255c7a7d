// Architectures keyed by config.json's model_type. Built-ins are registered explicitly by
// register_builtin_architectures(); an unknown model_type is refused naming the supported ones.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "framework/model/model_config.h"
#include "framework/model/weights.h"

namespace gengraph {

class CausalLM;

struct Architecture {
  std::string model_type;   // config.json "model_type"
  std::string description;  // one line for listings
  std::function<ModelConfig(const nlohmann::json& doc, const std::string& source)> parse_config;
  std::function<std::vector<TensorSpec>(const ModelConfig&)> weight_specs;
  // The canonical name of the input embedding, which tie_word_embeddings ties lm_head.weight to.
  std::string input_embedding;
  NameRules names;
  std::function<std::unique_ptr<CausalLM>(ModelConfig, WeightMap)> build;
};

class ModelRegistry {
 public:
  static ModelRegistry& instance();
  // Throws when the model_type is already registered.
  void add(Architecture arch);
  // Throws naming `context` and listing the supported model types.
  const Architecture& get(const std::string& model_type, const std::string& context) const;
  std::vector<std::string> names() const;

 private:
  std::map<std::string, Architecture> archs_;
};

// Idempotent: registers the built-in architectures (gpt2, gptj, llama, mistral, qwen2) once.
void register_builtin_architectures();

// Defined in each architecture's file (llama.cpp defines the whole LLaMA family).
Architecture gpt2_architecture();
Architecture gptj_architecture();
Architecture llama_architecture();
Architecture mistral_architecture();
Architecture qwen2_architecture();

// config.json parsed by the architecture registered for its model_type: here, beside the
// registry, so that ModelConfig itself knows no architecture.
// Reads config.json at `path` and parses it with the parser registered for its model_type.
ModelConfig load_model_config(const std::filesystem::path& path);
// Parses an already-read config.json document; `source` names it in errors.
ModelConfig parse_model_config(const nlohmann::json& doc, const std::string& source);

}  // namespace gengraph

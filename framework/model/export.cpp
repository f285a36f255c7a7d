// Writing a model back out as a Hugging Face folder (for peers that must load the same weights).
#include <ATen/ATen.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "framework/model/loader.h"
#include "framework/model/model_registry.h"
#include "framework/model/safetensors.h"
#include "framework/util/device.h"
#include "framework/util/error.h"
#include "framework/util/files.h"
#include "framework/util/path_errors.h"

namespace gengraph {

namespace {

void write_folder(const CausalLM& model, nlohmann::json config,
                  const std::filesystem::path& folder) {
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  if (ec) throw Error("making the model folder '" + folder.string() + "': " + path_problem(ec));
  write_safetensors(folder / "model.safetensors",
                    std::vector<std::pair<std::string, at::Tensor>>(model.weights().begin(),
                                                                    model.weights().end()));
  config["torch_dtype"] = dtype_name(model.dtype());
  write_file_or_throw(folder / "config.json", config.dump(2) + "\n", "the model's config.json");
}

}  // namespace

void save_model_folder(const LoadedModel& loaded, const std::filesystem::path& folder) {
  write_folder(*loaded.model, loaded.config_json, folder);
}

void save_model_folder(const CausalLM& model, const std::filesystem::path& folder) {
  if (!model.config().document) {
    throw Error(
        "model from " + model.config().source +
        ": no config.json document to write it out with (built without parse_model_config)");
  }
  write_folder(model, *model.config().document, folder);
}

}  // namespace gengraph

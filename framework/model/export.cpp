// Writing a model back out as a Hugging Face folder (for peers that must load the same weights).
#include <ATen/ATen.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "framework/model/loader.h"
#include "framework/model/safetensors.h"
#include "framework/util/device.h"
#include "framework/util/error.h"

namespace gengraph {

void save_model_folder(const LoadedModel& loaded, const std::filesystem::path& folder) {
  std::filesystem::create_directories(folder);
  write_safetensors(folder / "model.safetensors",
                    std::vector<std::pair<std::string, at::Tensor>>(loaded.model->weights().begin(),
                                                                    loaded.model->weights().end()));
  nlohmann::json config = loaded.config_json;
  config["torch_dtype"] = dtype_name(loaded.model->dtype());
  write_file_or_throw(folder / "config.json", config.dump(2) + "\n", "the model's config.json");
}

}  // namespace gengraph

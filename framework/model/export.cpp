// Writing a model back out as a Hugging Face folder (for peers that must load the same weights).
#include <fstream>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "framework/model/loader.h"
#include "framework/util/error.h"

namespace gengraph {
namespace {

std::string st_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "F32";
    case at::kHalf: return "F16";
    case at::kBFloat16: return "BF16";
    default: throw Error("save_model_folder: unsupported weight dtype " + std::string(c10::toString(t)));
  }
}

}  // namespace

void save_model_folder(const LoadedModel& loaded, const std::filesystem::path& folder) {
  std::filesystem::create_directories(folder);
  nlohmann::json header = nlohmann::json::object();
  std::vector<at::Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, t] : loaded.model->weights()) {
    const at::Tensor c = t.to(at::kCPU).contiguous();
    header[name] = {{"dtype", st_dtype(c.scalar_type())},
                    {"shape", c.sizes().vec()},
                    {"data_offsets", {offset, offset + c.nbytes()}}};
    offset += c.nbytes();
    data.push_back(c);
  }
  std::string h = header.dump();
  while ((8 + h.size()) % 8) h += ' ';
  const uint64_t n = h.size();
  const auto path = folder / "model.safetensors";
  {
    std::ofstream out(path.string() + ".tmp", std::ios::binary);
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << h;
    for (const auto& c : data) out.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
    if (!out) throw Error("cannot write '" + path.string() + "'");
  }
  std::filesystem::rename(path.string() + ".tmp", path);
  nlohmann::json config = loaded.config_json;
  config["torch_dtype"] = std::string(loaded.model->dtype() == at::kFloat ? "float32"
                                      : loaded.model->dtype() == at::kBFloat16 ? "bfloat16" : "float16");
  std::ofstream(folder / "config.json") << config.dump(2) << "\n";
}

}  // namespace gengraph

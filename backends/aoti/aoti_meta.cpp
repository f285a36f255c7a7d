// An AOTInductor package's metadata (AotiMeta): what tools/export_aoti.py records in it, read
// from its zip directory, and the names of weight formats it uses.
#include <torch/headeronly/version.h>

#include <filesystem>
#include <string>
#include <unordered_map>

#include "backends/aoti/aoti_package.h"
#include "backends/aoti/aoti_step.h"
#include "framework/model/model_config.h"
#include "framework/util/error.h"
#include "framework/util/json_at.h"

namespace gengraph {

std::string torch_version() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
         std::to_string(TORCH_VERSION_PATCH);
}

AotiMeta AotiMeta::from(const std::unordered_map<std::string, std::string>& raw,
                        const std::filesystem::path& path) {
  auto text = [&](const std::string& key) -> std::string {
    auto it = raw.find("gengraph." + key);
    if (it == raw.end()) {
      throw Error("AOTInductor package '" + path.string() + "' has no metadata 'gengraph." + key +
                  "': it was not made by tools/export_aoti.py");
    }
    return it->second;
  };
  auto number = [&](const std::string& key) -> int64_t {
    const std::string v = text(key);
    try {
      size_t used = 0;
      const int64_t n = std::stoll(v, &used);
      if (used == v.size()) return n;
    } catch (const std::exception&) {
    }
    throw Error("AOTInductor package '" + path.string() + "': metadata key 'gengraph." + key +
                "': expected an integer (written as a string), found the string " +
                JsonAt::quoted(v));
  };
  AotiMeta m;
  m.format = static_cast<int>(number("format"));
  m.model_type = text("model_type");
  m.model_fingerprint = text("model_fingerprint");
  m.layers = number("layers");
  m.kv_heads = number("kv_heads");
  m.head_dim = number("head_dim");
  m.vocab_size = number("vocab_size");
  m.dtype = text("dtype");
  m.device = text("device");
  m.max_rows = number("max_rows");
  m.context = number("context");
  m.freezing = text("freezing") == "True";
  // Packages made before quantized exports have no "weights": they hold the float model.
  const auto weights = raw.find("gengraph.weights");
  m.weights = weights == raw.end() ? "float" : weights->second;
  m.torch_version = text("torch_version");
  m.made_by = text("made_by");
  // Packages made before the ragged form have neither key: the step form.
  const auto form = raw.find("gengraph.form");
  if (form != raw.end()) m.form = form->second;
  const auto invariant = raw.find("gengraph.invariant");
  m.invariant = invariant != raw.end() && invariant->second == "True";
  return m;
}

AotiMeta AotiMeta::read(const std::filesystem::path& path) {
  if (!std::filesystem::is_regular_file(path)) {
    throw Error("AOTInductor package '" + path.string() + "' " +
                (std::filesystem::exists(path) ? "is not a file" : "does not exist"));
  }
  return from(inspect_package(path, false).meta, path);
}

std::string aoti_weights_tag(const WeightFormat& f) {
  if (!f.quantized()) return "float";
  std::string tag = f.name();
  if (f.kind == WeightFormat::Kind::kInt4) tag += "-g" + std::to_string(f.int4_group());
  if (f.int8_blocks()) tag += "-g" + std::to_string(f.group_size);
  if (!f.lm_head) tag += "-float-head";
  if (f.head_int8()) tag += "-int8-head";
  if (f.int8_activation_rows > 0) {  // int8 or int4
    tag += "-a" + std::to_string(f.int8_activation_rows);
    if (f.int8_activation_block > 0) tag += "-b" + std::to_string(f.int8_activation_block);
  }
  return tag;
}

}  // namespace gengraph

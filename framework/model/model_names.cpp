#include "framework/model/model_names.h"

#include <algorithm>
#include <system_error>
#include <vector>

#include "framework/model/gguf.h"
#include "framework/model/known_models.h"
#include "framework/model/loader.h"
#include "framework/util/error.h"
#include "framework/util/path_errors.h"

namespace gengraph {

ModelName resolve_model_name(const std::string& name, const std::string& what, bool locate_known) {
  ModelName out;
  if (name.rfind("preset:", 0) == 0) {
    out.preset = name.substr(7);
    return out;
  }
  const auto presets = preset_names();
  const bool preset_named = std::find(presets.begin(), presets.end(), name) != presets.end();
  const bool known_named = find_known_model(name) != nullptr;
  const char* builtin = preset_named ? "built-in preset" : "known real model";
  if (checked_exists(name, what)) {
    if (is_gguf_file(name)) {  // a GGUF file is a model by itself (docs/gguf.md)
      out.folder = name;
      return out;
    }
    std::error_code ec;
    const bool model_folder =
        std::filesystem::is_regular_file(std::filesystem::path(name) / "config.json", ec);
    if (model_folder || !(preset_named || known_named)) {
      if (!checked_is_directory(name, what)) {
        throw Error(what + " '" + name +
                    "' is not a folder: it is a file, and not a GGUF file (expected a folder with "
                    "config.json and model.safetensors, a GGUF file, a preset name or a known "
                    "model name)");
      }
      if (preset_named || known_named) {
        out.note = what + " " + name + " is the model folder './" + name + "', not the " + builtin +
                   " of that name" + (preset_named ? " (for the preset: preset:" + name + ")" : "");
      }
      out.folder = name;
      return out;
    }
    out.note = what + " " + name + ": '" + name +
               "' in the working folder is not a model folder (no config.json); using the " +
               builtin;
  } else if (name.find('/') != std::string::npos || name.rfind('.', 0) == 0) {
    throw Error(what + " '" + name +
                "': no such model folder (and not a preset or known model name; see gengraph "
                "presets and gengraph models)");
  }
  if (preset_named || !known_named) {
    out.preset = name;
  } else {
    if (locate_known) out.folder = resolve_known_model(name);
    out.known = true;
  }
  return out;
}

}  // namespace gengraph

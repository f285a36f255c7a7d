// What a model name given by a user means, decided in one place for every boundary (the CLI's
// --model, the Engine and the Python package, a draft model's `model`, `gengraph quality`, an
// experiment's model.name):
//   "preset:NAME"                      the preset NAME, always;
//   an existing folder with config.json a model folder (a note says so when a preset or known
//                                      model has the same name);
//   an existing path that is no model folder, where a preset or known model has that name: the
//                                      preset or known model (with a note);
//   no such path, a known model name   the folder the set-up made for it (gengraph models);
//   no such path, path-like ('/', './') refused;
//   otherwise                          a preset name (an unknown one is refused when its
//                                      configuration is looked up, listing the presets).
#pragma once

#include <filesystem>
#include <string>

namespace gengraph {

struct ModelName {
  std::string preset;            // the preset's name; empty for a folder
  std::filesystem::path folder;  // the model folder (a known model's resolved); empty for a preset
  bool known = false;            // a known real model
  // When the name could mean two things: which one was taken and how to ask for the other; "" when
  // it could not.
  std::string note;
};

// `what` names the input in errors and notes ("Engine: model", "generate: --model", "'model'").
// Throws gengraph::Error for a file, a path-like name with nothing there, or a known model that is
// not set up here (resolve_known_model's reason). `locate_known` false leaves a known model's
// folder empty, for a caller that hands the name on (the CLI writes it as model.name).
ModelName resolve_model_name(const std::string& name, const std::string& what,
                             bool locate_known = true);

}  // namespace gengraph

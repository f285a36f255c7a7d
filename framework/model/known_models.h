// Real models by name: checkpoints that the set-up (scripts/setup.sh, through
// tools/fetch_real_model.py) fetches and converts once into a Hugging Face folder in gengraph's
// cache, so that an experiment can say `model: {name: smollm2-135m}` on any machine that ran it.
// Presets (loader.h) are shapes with random weights; these are trained weights.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace gengraph {

struct KnownModel {
  std::string name;         // what experiments and the CLI call it, e.g. "smollm2-135m"
  std::string description;  // one line for listings
  std::string license;      // of the weights
  std::string origin;       // where the set-up gets them and what it does to them
};

// The table, in listing order.
const std::vector<KnownModel>& known_models();
std::vector<std::string> known_model_names();

// The entry of `name`, or nullptr when there is none.
const KnownModel* find_known_model(const std::string& name);

// gengraph's cache: $GENGRAPH_CACHE when set and not empty, else $HOME/.cache/gengraph. Throws
// when neither variable gives a folder.
std::filesystem::path gengraph_cache_dir();

// Where the set-up puts a known model, set up or not: <cache>/models/<name>.
std::filesystem::path known_model_folder(const std::string& name);

struct KnownModelStatus {
  bool ready = false;  // the folder is there with its config.json
  // Where it would be; when ready, the folder itself (the set-up's link resolved:
  // <cache>/models/<name>-<hash>).
  std::filesystem::path folder;
  std::string unavailable_reason;  // why the last set-up could not make it ("" when none said)
};

// Whether the known model `name` is set up here (throws for a name that is not in the table).
KnownModelStatus known_model_status(const std::string& name);

// The folder of the known model `name` (the set-up's link resolved). Throws an Error naming the
// model for a name not in the table (with the known names), and for one not set up here: where it
// was looked for, the reason the set-up left in <cache>/models/<name>.unavailable when there is
// one, and how to get it.
std::filesystem::path resolve_known_model(const std::string& name);

}  // namespace gengraph

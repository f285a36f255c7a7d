// Runs an experiment: load the model once, then for each backend warm up, repeat, time, and
// collect the generated tokens. Produces the results document (docs/results-schema.md).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "framework/config/experiment_config.h"
#include "framework/decoding/generation_config.h"
#include "framework/util/error.h"

namespace gengraph {

struct LoadedModel;

// Generation settings as they apply to this model: transformers' defaults, then the model's
// generation_config.json (or, without one, its config.json special tokens), then `overrides`
// (GenerationConfig keys; `source` names them in errors). Keys of generation_config.json that
// gengraph does not implement are returned in `ignored_keys`.
GenerationConfig resolve_generation(const LoadedModel& model, const nlohmann::json& overrides,
                                    const std::string& source,
                                    std::vector<std::string>* ignored_keys = nullptr);

// Checks what parsing cannot: every backend name and its options (where the backend can check
// them without a model), and that the model preset exists or the folder has a config.json.
void check_runnable(const ExperimentConfig& config);

// Every point of the experiment (expand_sweep), each passed through check_runnable; an error
// names its sweep point.
std::vector<std::pair<std::vector<std::string>, ExperimentConfig>> check_experiment(
    const ExperimentConfig& config);

// `log` receives progress lines; the results document is returned (nothing is written). With a
// sweep, every point is validated first, then run; the document holds one entry per point.
nlohmann::json run_experiment(const ExperimentConfig& config, std::ostream& log);

// One configuration: build every backend, warm each up, then time interleaved repeats; then the
// peers (transformers' generate() through tools/hf_peer.py).
nlohmann::json run_point(const ExperimentConfig& config, std::ostream& log);

// Thrown when SIGINT or SIGTERM arrived while gengraph held temporary files or ran a tool (peer,
// tokenizer, plot): the tool got the signal too, the temporary files are removed, and no results
// are written. The CLI exits with 128 + the signal, as a shell does.
struct Interrupted : Error {
  explicit Interrupted(int sig)
      : Error("interrupted by signal " + std::to_string(sig) +
              ": temporary files removed, no results written"),
        signal(sig) {}
  int signal;
};

// Writes `doc` to `path` and, when `plot` is not empty, draws it there as a PNG with
// tools/plot_results.py (matplotlib in the .venv). Both are written to temporary files and renamed
// into place only when both succeeded: on any error neither exists afterwards. Creates parent
// folders; a device or pipe (/dev/stdout) as `path` is written through.
void write_outputs(const nlohmann::json& doc, const std::filesystem::path& path,
                   const std::filesystem::path& plot);

// Refuses an output path that cannot be a file: a parent that exists but is not a folder, or the
// path itself a folder. `what` names it in the error ("results", "plot").
void check_output_path(const std::filesystem::path& path, const std::string& what);

// Labels of the runs recorded as failed (peers that exited non-zero or timed out), with the sweep
// point when there is one.
std::vector<std::string> failed_runs(const nlohmann::json& doc);

// A readable table of a results document.
std::string format_table(const nlohmann::json& doc);

}  // namespace gengraph

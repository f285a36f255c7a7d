// Runs an experiment: load the model once, then for each backend warm up, repeat, time, and
// collect the generated tokens. Produces the results document (docs/results-schema.md).
#pragma once

#include <gengraph/stream.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "experiments/experiment/experiment_config.h"
#include "framework/decoding/resolved_settings.h"
#include "framework/util/error.h"

namespace gengraph {

// Checks what parsing cannot: every backend name and its options (where the backend can check
// them without a model), and that the model preset exists or the folder has a config.json.
void check_runnable(const ExperimentConfig& config);

// Every point of the experiment (expand_sweep), each passed through check_runnable; an error
// names its sweep point.
std::vector<std::pair<std::vector<std::string>, ExperimentConfig>> check_experiment(
    const ExperimentConfig& config);

// `log` receives progress lines; the results document is returned (nothing is written). With a
// sweep, every point is validated first, then run; the document holds one entry per point.
// `stream`, when given, receives the tokens of the first timed run of the first backend (of each
// point) as they are chosen.
nlohmann::json run_experiment(const ExperimentConfig& config, std::ostream& log,
                              const TokenStream& stream = {});

// One configuration: build every backend, warm each up, then time interleaved repeats; then the
// peers (transformers' generate() through tools/hf_peer.py, other engines through
// tools/engine_peer.py).
nlohmann::json run_point(const ExperimentConfig& config, std::ostream& log);

// A readable table of a results document: experiments/results/table.h.

}  // namespace gengraph

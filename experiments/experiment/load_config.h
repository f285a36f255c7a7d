// An experiment under load (YAML `load:` and `serving:`,
// docs/experiments.md#experiments-under-load): requests replayed as an arrival process in
// wall-clock time through several serving systems side by side. Parsed here through the one YAML
// reader (yaml_input.h), so errors name the file, line and column, and the key.
#pragma once

#include <gengraph/serving.h>

#include <cstdint>
#include <string>
#include <vector>

#include "experiments/experiment/yaml_input.h"

namespace gengraph {

// The systems a load experiment can run, in their default order.
extern const std::vector<std::string> kLoadSystems;

// A range of whole numbers drawn uniformly (min == max: that one number).
struct LengthRange {
  int64_t min = 0, max = 0;
};

// One system of the comparison: `kind` one of kLoadSystems, `label` its row name (the kind by
// default), `serving` the scheduler's options (the experiment's `serving:` under the entry's own).
struct LoadSystem {
  std::string kind;
  std::string label;
  SchedulerOptions serving;
};

struct LoadSpec {
  std::string arrival = "poisson";  // poisson | all_at_once
  // Requests per second, one point each; kAllAtOnce (0) is a saturation point (every request
  // waiting from the start). `arrival: all_at_once` gives the one point {kAllAtOnce}.
  std::vector<double> rates;
  int64_t requests = 100;
  LengthRange prompt_lengths{16, 16};  // tokens after the shared prefix
  // Each request's max_new_tokens, with min_new_tokens equal to it (exact lengths, EOS ignored);
  // absent (has_output_lengths false): the experiment's generation settings for every request.
  bool has_output_lengths = false;
  LengthRange output_lengths{16, 16};
  int64_t shared_prefix_length = 0;   // leading tokens common to ...
  double shared_prefix_fraction = 0;  // ... this fraction of the requests (a system prompt)
  uint64_t seed = 0;
  std::vector<LoadSystem> systems;
  int64_t static_batch_max = 32;
  double time_limit_s = 600;  // per rate and system; unfinished requests are cancelled
  SchedulerOptions serving;   // the experiment's `serving:` (each system may override keys)
};

constexpr double kAllAtOnce = 0;

// The `serving:` mapping read over `base` (SchedulerOptions' fields by name; unknown keys refused;
// the policy checked against the registered ones).
SchedulerOptions read_serving(MapReader r, const SchedulerOptions& base, const std::string& file);

// The `load:` mapping; `serving` is the experiment's (already read).
LoadSpec read_load(MapReader r, const SchedulerOptions& serving, const std::string& file);

// "1 req/s", "all at once": a rate as tables and progress lines name it.
std::string rate_name(double rate);

}  // namespace gengraph

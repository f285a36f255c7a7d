// Runs an experiment under load (`load:`, docs/experiments.md#experiments-under-load): the same
// synthetic requests, at the same offsets of an arrival process, replayed in wall-clock time
// through each system (the continuous-batching Scheduler, one request at a time on an Engine,
// static batches on an Engine), one point per arrival rate; per point and system the latency
// percentiles, the throughput and, for the scheduler, its KV blocks and prefix reuse.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <vector>

#include "experiments/experiment/experiment_config.h"

namespace gengraph {

// What check_runnable plans for a load experiment before any weight is read: its longest
// request (shared prefix, longest prompt, longest output) as a synthetic batch of the largest
// static batch (one request without static_batching), through the ordinary checks of backend,
// settings, context length and memory.
ExperimentConfig load_plan_config(const ExperimentConfig& config);

// The run: the results document (runs: one row per system and rate). `config` has passed
// check_runnable.
nlohmann::json run_load_experiment(const ExperimentConfig& config, std::ostream& log);

// The q-quantile (0..1) of `values`, linear between order statistics (0 for none).
double quantile(std::vector<double> values, double q);

}  // namespace gengraph

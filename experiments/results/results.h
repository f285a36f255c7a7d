// The results document (docs/results-schema.md): its parts that every producer shares, writing it
// whole or not at all, and reading it back.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "experiments/experiment/experiment_config.h"
#include "framework/util/error.h"
#include "framework/util/json_at.h"

namespace gengraph {

struct Generation;

// The current UTC time as "2026-12-01T02:00:00Z" (results, job manifests).
std::string now_iso8601();

// The fields every results document starts with, for one point or a whole sweep.
nlohmann::json results_header(const ExperimentConfig& c);

// A row's "outputs": per input its prompt length and sequences (tokens, score where scored).
nlohmann::json outputs_json(const Generation& r, const std::vector<std::vector<int64_t>>& prompts);

// How a row's outputs compare with the first row's: whether every input's sequences hold the
// same tokens ("same tokens" means tokens: in bfloat16 two correct backends can pick the same
// beams with scores that differ in the last bits), and, where they do and both carry scores, the
// largest |score difference|. Outputs of another shape (a failed or older row) do not match.
struct OutputComparison {
  bool same_tokens = false;
  std::optional<double> max_score_difference;
};
OutputComparison compare_outputs(const nlohmann::json& a, const nlohmann::json& b);

// Records the comparison with the first row's outputs in a run's JSON.
void record_comparison(nlohmann::json& run, const nlohmann::json& first_outputs);

// Labels of the runs recorded as failed (peers that exited non-zero or timed out), with the sweep
// point when there is one.
std::vector<std::string> failed_runs(const nlohmann::json& doc);

// Writes `doc` to `path` and, when `plot` is not empty, draws it there as a PNG with
// tools/plot_results.py (matplotlib in the .venv). Both are written to temporary files and renamed
// into place only when both succeeded: on any error neither exists afterwards. Creates parent
// folders; a device or pipe (/dev/stdout) as `path` is written through.
void write_outputs(const nlohmann::json& doc, const std::filesystem::path& path,
                   const std::filesystem::path& plot);

// Refuses an output path that cannot be a file: a parent that exists but is not a folder, the
// path itself a folder, or a nearest existing folder (or device) this process may not write to.
// Commands call it before their work, so that a path that can never be written fails first.
// `what` names it in the error ("results", "plot").
void check_output_path(const std::filesystem::path& path, const std::string& what);

// The readers of results files (show, compare) read every field through JsonAt
// (framework/util/json_at.h), so that each refusal names the file and the key path.

// How errors about the results file `path` begin: "'r.json' is not a gengraph results file" ("the
// results" for a document that is not from a file).
std::string results_source(const std::string& path);

// The key=value overrides of a sweep point ("inputs.batch_size=1, ..."), from its 'point' list.
std::string point_label(const JsonAt& point);

// A timing summary of a results row (timings.total_ms, ...: median, min, max, mean, stdev,
// values; each may be absent, an empty summary for none). It is refused, naming the key path and
// the value, when it holds what no measurement gives: a time or rate that is not > 0 or is above
// 1e12 (ms: 31 years; tokens/s: a trillion), a median, mean or value outside [min, max].
struct TimingSummary {
  std::optional<double> median, min, max;
  std::vector<double> values;
};
TimingSummary read_timing(const JsonAt& summary);
// A row's timings.<metric>: the row must have a 'timings' object; a metric absent from it, or
// null (as gengraph writes a metric without values), is an empty summary.
TimingSummary row_timing(const JsonAt& run, const std::string& metric);

// Whether two paths name one file: the same file when both exist (hard and symbolic links, "./a"
// and "a"), else the same path once made absolute and normal (std::filesystem::weakly_canonical).
bool same_file(const std::filesystem::path& a, const std::filesystem::path& b);

// A results file, read and checked for what every reader needs (schema_version 1, runs or
// points); errors name the file.
nlohmann::json read_results(const std::string& path);

// Runs `f` on results files, turning a json exception that escaped the typed reads (a bug) into an
// error naming them. A last resort: readers use JsonAt.
template <typename F>
std::string with_results_errors(const std::string& files, F f) {
  try {
    return f();
  } catch (const nlohmann::json::exception& e) {
    throw Error(files + ": a field is missing or of the wrong type (" + e.what() +
                "); see docs/results-schema.md");
  }
}

}  // namespace gengraph

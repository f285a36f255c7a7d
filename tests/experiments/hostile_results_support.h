// Helpers shared by test_hostile_results.cpp and test_hostile_outputs.cpp (one file each was over
// 600 lines).
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <streambuf>
#include <tuple>

#include "experiments/results/compare.h"
#include "experiments/results/results.h"
#include "experiments/results/statistics.h"
#include "experiments/results/table.h"
#include "framework/util/error.h"
#include "tests/support/test_util.h"

namespace gengraph::hostile_results {

using namespace testing::cli_names;  // NOLINT(build/namespaces)
using Json = nlohmann::json;

// One timing summary as gengraph writes it.
inline Json timing(double scale = 1) {
  return {{"median", 2 * scale}, {"min", 1 * scale}, {"max", 3 * scale},
          {"mean", 2 * scale},   {"stdev", scale},   {"values", {scale, 2 * scale, 3 * scale}}};
}

inline Json timings(double scale = 1) {
  return {{"time_to_first_token_ms", timing(scale)},
          {"decode_ms_per_token", timing(scale)},
          {"total_ms", timing(scale)},
          {"tokens_per_second", timing(1 / scale)}};
}

// One point of a results file with every field `show` and `compare` read: three rows (one with a
// bandwidth, an aoti report and a loop that fell back; one that ran the whole step; a failed
// peer).
inline Json point_doc() {
  return Json::parse(R"({
    "environment": {"gengraph_commit": "abc123", "torch_version": "2.11.0", "device": "cpu",
                    "dtype": "float32", "threads": 2},
    "model": {"source": "preset:gpt2-tiny", "model_type": "gpt2", "parameters": 182016},
    "generation": {"max_new_tokens": 2}, "inputs": {"batch_size": 1, "prompt_lengths": [2]},
    "run": {"warmup": 0, "repeats": 3},
    "bandwidth": {"read_bytes_per_second": 2.9e10, "copy_bytes_per_second": 2.2e10},
    "runs": [
      {"label": "eager", "backend": "eager",
       "outputs": [{"input": 0, "prompt_length": 2,
                    "sequences": [{"tokens": [5, 6], "score": -1.5, "text": "hi"}]}],
       "bandwidth": {"bytes_per_decode_step": 5e8, "bytes_moved_per_step": 6e8,
                     "fraction_of_read_bandwidth": 0.8, "fraction_of_copy_bandwidth": 1.1},
       "report": {"aoti_package_bytes": 1e6, "aoti_export_seconds": 1.0,
                  "aoti_compile_seconds": 2.0, "aoti_load_seconds": 0.1, "aoti_built": 1,
                  "aoti_freezing": 0, "sdpa_kernel": 1},
       "loop": {"whole_step": "auto", "ran_whole_step": false, "fallback": "a reason"}},
      {"label": "static", "backend": "eager", "tokens_match_first_row": true,
       "outputs": [{"input": 0, "prompt_length": 2,
                    "sequences": [{"tokens": [5, 6], "score": -1.5}]}],
       "loop": {"whole_step": "on", "ran_whole_step": true, "captured": false,
                "flag_reads": 3, "steps_run": 8}},
      {"label": "hf_eager", "backend": "peer:hf_eager", "error": "peer 'hf_eager': exit 1"}
    ]})");
}

inline Json complete_doc() {
  Json d = point_doc();
  d["runs"][0]["timings"] = timings();
  d["runs"][1]["timings"] = timings(0.5);
  d["schema_version"] = 1;
  d["experiment"] = "e";
  d["created"] = "2026-01-01T00:00:00Z";
  d["baseline"] = "eager";
  return d;
}

inline Json sweep_doc() {
  Json d = {{"schema_version", 1}, {"experiment", "e"}, {"baseline", "eager"}};
  for (const char* p : {"inputs.batch_size=1", "inputs.batch_size=2"}) {
    Json point = complete_doc();
    point.erase("schema_version");
    point["point"] = {p};
    d["points"].push_back(point);
  }
  d["missing_points"] = {{{"point", {"inputs.batch_size=3"}}, {"status", "no result"}}};
  return d;
}

// {exit status, stdout, stderr} of the CLI in-process.
inline std::tuple<int, std::string, std::string> cli_out(const std::vector<std::string>& args) {
  ::testing::internal::CaptureStderr();
  ::testing::internal::CaptureStdout();
  const int rc = cli(args);
  std::string out = ::testing::internal::GetCapturedStdout();
  return {rc, out, ::testing::internal::GetCapturedStderr()};
}

// `show` and `compare` (both ways) of a results file holding `doc`: each must exit `rc`; returns
// their stderr, one after the other.
inline std::string show_and_compare(const TempDir& dir, const Json& doc, int rc) {
  write_file(dir / "m.json", doc.dump());
  // Compared with an undamaged file of the same shape, so that its rows are read.
  write_file(dir / "c.json", (doc.contains("points") ? sweep_doc() : complete_doc()).dump());
  std::string errors;
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"show", (dir / "m.json").string()},
        {"compare", (dir / "m.json").string(), (dir / "c.json").string()},
        {"compare", (dir / "c.json").string(), (dir / "m.json").string()}}) {
    auto [got, out, err] = cli_out(args);
    EXPECT_EQ(got, rc) << args[0] << ": " << err;
    EXPECT_THAT(err, ::testing::Not(HasSubstr("json.exception"))) << args[0];
    errors += err;
  }
  return errors;
}

}  // namespace gengraph::hostile_results

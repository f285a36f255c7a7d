// Parts of gengraph's Slurm jobs (experiments/cluster/slurm.cpp) shared by submit, task and
// collect: the job manifest and its checks, the sweep's points, and the values bound for the job
// script. Internal to experiments/.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "experiments/cluster/slurm.h"
#include "experiments/experiment/experiment_config.h"

namespace gengraph::slurm {

using Json = nlohmann::json;

constexpr const char* kJobSchema = "gengraph-slurm-job-1";
constexpr const char* kPartSchema = "gengraph-slurm-part-1";

// A job manifest, checked (check_job_manifest): the document as read, and its fields typed.
struct JobManifest {
  Json doc;
  std::string file;
  std::string id, experiment, cwd, gengraph;
  ExperimentConfig config;  // config_text parsed as submitted (config_file, overrides)
  std::vector<std::vector<std::string>> points;
  std::vector<std::string> job_ids;  // each submission's Slurm job id, oldest first
};

// Walks the points of the experiment's sweep (the overrides of each) in the order expand_sweep
// gives them, the last key varying fastest, without parsing any.
class SweepWalk {
 public:
  explicit SweepWalk(const ExperimentConfig& c) : c_(c), index_(c.sweep.size(), 0) {}
  std::vector<std::string> point() const {
    std::vector<std::string> p;
    for (size_t k = 0; k < c_.sweep.size(); ++k)
      p.push_back(c_.sweep[k].first + "=" + c_.sweep[k].second[index_[k]]);
    return p;
  }
  void next() {
    for (size_t k = c_.sweep.size(); k > 0; --k) {
      if (++index_[k - 1] < c_.sweep[k - 1].second.size()) return;
      index_[k - 1] = 0;
    }
  }

 private:
  const ExperimentConfig& c_;
  std::vector<size_t> index_;
};

// Where the first control character of `v` starts (C0, DEL, or a C1 control U+0080..U+009F in
// UTF-8), or npos.
size_t control_character_at(const std::string& v);

// `v` in double quotes for a message, as the JSON readers quote values (control characters,
// quotes and backslashes escaped, cut after 120 bytes).
std::string shown(const std::string& v);

// Refuses control characters in a value bound for the job script.
void check_no_control_characters(const std::string& value, const std::string& origin,
                                 const std::string& place);

// The point numbers of a job of `n` points, for messages: "0 to 3".
std::string point_range(int64_t n);

// A point number written in decimal digits (no sign, no leading zeros), or nullopt.
std::optional<int64_t> point_number(const std::string& text);

// The number of points of the experiment's sweep, or kMaxJobPoints + 1 when there are more.
int64_t sweep_size(const ExperimentConfig& c);

// Refuses a sweep of more points than one job holds, before any point is parsed.
void check_sweep_size(const ExperimentConfig& c);

// The configuration of one point: the experiment with the point's overrides after its own, as
// expand_sweep parses each point.
ExperimentConfig point_config(const ExperimentConfig& c, const std::vector<std::string>& point);

// A point for messages: "[key=value, ...]", a value with a control character escaped.
std::string point_list(const std::vector<std::string>& p);

// How errors about the JSON file `file` begin: its name in quotes.
std::string file_source(const std::string& file);

JobManifest parse_job_manifest(const Json& m, const std::string& file);

// The manifest's text; refused (naming the key) when a string in it is not UTF-8, which JSON
// cannot hold.
std::string manifest_text(const Json& m, const std::string& file);

}  // namespace gengraph::slurm

// Parts of gengraph's Slurm jobs (experiments/cluster/slurm.cpp) shared by submit, task and
// collect: the job script writer, the job manifest and its checks, the sweep's points, and the
// values bound for the job script. BatchScript and check_job_manifest are also what the tests
// and the fuzz targets call; the gengraph::slurm parts are internal to experiments/.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "experiments/experiment/experiment_config.h"

namespace gengraph {

// The most points one job may hold (job.json's `points`, the experiment's sweep).
constexpr int64_t kMaxJobPoints = 100000;

// The one writer of Slurm batch scripts (job.sbatch): every value that goes into one passes
// through it, so that no value can add a line or a command to the script.
// - #SBATCH lines: sbatch reads them itself, without a shell. It splits a line at whitespace,
//   takes double and single quotes as quotes and a backslash as an escape, and ends the line at
//   an unquoted '#' (old versions: at any unescaped '#'). A value holding no space, quote,
//   backslash or '#' is written as it is; any other in double quotes, with a backslash before
//   each quote (double or single), backslash and '#', which sbatch reads back unchanged (checked
//   against the real sbatch in HostileSlurm.TheRealSbatchReadsBackEveryValue). '$' and '`' mean
//   nothing to sbatch and stay as they are.
// - the command: one `exec` line. Each value is one shell word in double quotes, with a backslash
//   before each double quote, backslash, '$' and '`' (POSIX: the only characters special inside
//   double quotes), so that paths with spaces or quotes work as they are; fixed words of
//   gengraph's own ("task") are written bare.
// - comments: one line each.
// Everywhere, control characters are refused: C0 (newline, carriage return, tab, ...), DEL and
// the C1 controls (U+0080 to U+009F). A newline or carriage return would start a line of the
// value's choosing, and none has a use in an option, a path or a name. An error names where the
// value came from (`origin`: "the experiment's name", "cluster.partition", "job.json key 'cwd'"),
// the option, the value (escaped for display) and what is allowed.
class BatchScript {
 public:
  // "# text"
  void comment(const std::string& text, const std::string& origin);
  // "#SBATCH --key" (an empty value) or "#SBATCH --key=value". `key`: an sbatch long option's
  // name (lowercase letters, digits, '-').
  void option(const std::string& key, const std::string& value, const std::string& origin);
  // The command, "exec WORD...": each a value (quoted) or a fixed word (letters, digits, '-',
  // '_', '.', '/'; written bare).
  struct Word {
    std::string text;
    std::string origin;  // "" for a fixed word of gengraph's own
  };
  void exec(const std::vector<Word>& words);
  // "#!/bin/bash", the comments, the #SBATCH lines, then the exec line (which must be set).
  std::string text() const;

 private:
  std::vector<std::string> header_;
  std::string command_;
};

// Checks a job manifest (the document of a job folder's job.json) without side effects: every
// field's type (schema, id, experiment, config_file, config_text, overrides, cwd and gengraph as
// absolute paths, created, points, jobs with their job ids and tasks), the sizes (at most
// kMaxJobPoints points), and that config_text, with the overrides, is an experiment named
// `experiment` whose sweep expands to exactly `points`, in order. Throws a gengraph::Error that
// names `file`, the key (e.g. "points[3]"), what was expected and what was found.
void check_job_manifest(const nlohmann::json& manifest, const std::string& file);

}  // namespace gengraph

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

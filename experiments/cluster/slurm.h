// Sweeps on a Slurm cluster: one array task per sweep point, results merged as one.
//   gengraph submit CONFIG [--set K=V]... [--slurm-option K=V]... [--job-dir DIR]
//                   [--gengraph PATH]
//       checks every point, writes DIR (default results/<name>.slurm/) with job.json (the
//       experiment as submitted), job.sbatch and logs/, and submits the array with sbatch
//   gengraph submit --rerun DIR [--slurm-option K=V]... [--gengraph PATH]
//       submits again only the points without a result (with this binary, or PATH)
//   gengraph task DIR [INDEX]            (what each array task runs; INDEX: $SLURM_ARRAY_TASK_ID)
//       runs one point, writes DIR/parts/INDEX.json (or INDEX.error.json) atomically
//   gengraph collect DIR|JOB_ID [--output FILE]
//       merges the parts into one results file, as `gengraph run` writes it (and the plot);
//       exit 3 naming the points that failed or have no result yet
// The model folders are read by the tasks from their shared paths; nothing is copied through the
// scheduler. See docs/distributed.md.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

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

// Returns the job folder. `slurm_options`: "key=value" or "key" (sbatch long options, no "--").
// `gengraph`: the binary the tasks run (--gengraph PATH, an executable file); "" for this one.
std::string submit_experiment(const std::string& config_path, const std::vector<std::string>& sets,
                              const std::vector<std::string>& slurm_options,
                              const std::string& job_dir, std::ostream& out,
                              const std::string& gengraph = "");

// Submits the points of `job_dir` that have no result; returns how many. The tasks run in
// job.json's cwd, which must be an existing folder, and run job.json's gengraph only when it is
// this binary (the same file); another is run only when named as `gengraph` (--gengraph PATH),
// which job.json then records. Errors name job.json and the key.
int resubmit_missing(const std::string& job_dir, const std::vector<std::string>& slurm_options,
                     std::ostream& out, const std::string& gengraph = "");

// Runs one point of the job (the array task's work). Returns the process exit status: 0 when the
// part was written, 1 when the point failed (its error part was written).
int run_task(const std::string& job_dir, std::optional<int64_t> index, std::ostream& log);

// Merges the job's parts; writes the results (and plot) to `output` (default: the experiment's
// output, else results/<name>.json). Returns 0, or 3 when points failed or have no result.
int collect_job(const std::string& job_dir_or_id, const std::string& output, std::ostream& out,
                std::ostream& err);

}  // namespace gengraph

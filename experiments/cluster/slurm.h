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
// scheduler. See docs/distributed.md. The job script writer and the job manifest check are in
// experiments/cluster/slurm_job.h.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace gengraph {

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

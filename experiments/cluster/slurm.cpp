#include "experiments/cluster/slurm.h"

#include <gengraph/plugin.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <sstream>

#include "experiments/cluster/slurm_job.h"
#include "experiments/experiment/experiment_config.h"
#include "experiments/experiment/runner.h"
#include "experiments/results/results.h"
#include "experiments/results/table.h"
#include "experiments/tools/process.h"
#include "framework/model/model_config.h"
#include "framework/util/error.h"
#include "framework/util/files.h"
#include "framework/util/json_at.h"

namespace gengraph {
namespace {

namespace fs = std::filesystem;

using namespace slurm;  // NOLINT: the job's own parts (slurm_job.h)

std::string random_id() {
  std::random_device rd;
  std::ostringstream s;
  s << std::hex << rd() << rd();
  return s.str();
}

// An sbatch option's value and where it came from, for messages.
struct SbatchValue {
  std::string value;
  std::string origin;
};

// sbatch options from the experiment's cluster block, then --slurm-option overrides.
std::map<std::string, SbatchValue> sbatch_options(const ExperimentConfig& e,
                                                  const std::vector<std::string>& overrides) {
  const ClusterSpec& c = e.cluster;
  const std::string in = e.file + ": ";
  std::map<std::string, SbatchValue> o;
  if (!c.partition.empty()) o["partition"] = {c.partition, in + "cluster.partition"};
  if (!c.time.empty()) o["time"] = {c.time, in + "cluster.time"};
  if (c.gpus > 0) o["gres"] = {"gpu:" + std::to_string(c.gpus), in + "cluster.gpus"};
  if (c.cpus > 0) o["cpus-per-task"] = {std::to_string(c.cpus), in + "cluster.cpus"};
  if (!c.memory.empty()) o["mem"] = {c.memory, in + "cluster.memory"};
  for (const auto& [k, v] : c.options) o[k] = {v, in + "cluster.options." + k};
  for (const auto& spec : overrides) {
    const auto eq = spec.find('=');
    const std::string k = spec.substr(0, eq),
                      v = eq == std::string::npos ? "" : spec.substr(eq + 1);
    if (!sbatch_option_name(k)) {
      throw Error("--slurm-option " + shown(spec) +
                  ": expected an sbatch long option without '--', as KEY=VALUE or KEY, e.g. "
                  "partition=gpu");
    }
    if (sbatch_option_set_by_gengraph(k))
      throw Error("--slurm-option '" + spec + "': gengraph sets --" + k);
    o[k] = {v, "--slurm-option " + k};
  }
  return o;
}

std::string array_spec(const std::vector<int64_t>& tasks) {
  std::string s;
  for (const int64_t t : tasks) s += (s.empty() ? "" : ",") + std::to_string(t);
  return s;
}

std::string self_executable() {
  std::error_code ec;
  const auto p = fs::read_symlink("/proc/self/exe", ec);
  if (ec)
    throw Error("cannot tell where this gengraph binary is (/proc/self/exe): " + ec.message());
  // A binary replaced since it started (a rebuild) reads "PATH (deleted)": PATH is the gengraph
  // meant.
  std::string path = p.string();
  const std::string deleted = " (deleted)";
  if (path.size() > deleted.size() &&
      path.compare(path.size() - deleted.size(), deleted.size(), deleted) == 0)
    path.resize(path.size() - deleted.size());
  return path;
}

// What is at `p` when it is not the executable file a job needs, for messages.
std::string what_is_there(const fs::path& p) {
  std::error_code ec;
  const auto st = fs::status(p, ec);
  if (!fs::exists(st)) return "which does not exist here";
  if (!fs::is_regular_file(st)) return "which is not a file";
  return "which is not executable here";
}

// The gengraph binary the tasks run: this one, or `named` (--gengraph PATH), the user's own
// choice, which must be an executable file; its absolute path.
std::string chosen_gengraph(const std::string& named) {
  if (named.empty()) return self_executable();
  const fs::path p = fs::absolute(named).lexically_normal();
  std::error_code ec;
  if (!fs::is_regular_file(p, ec) || ::access(p.c_str(), X_OK) != 0) {
    throw Error("--gengraph " + shown(named) +
                ": expected the path of the gengraph binary the tasks run (an executable file), "
                "found " +
                shown(p.string()) + ", " + what_is_there(p));
  }
  return p.string();
}

// Whether `path` is the binary this process runs: the same file (device and inode, so that a
// link to it counts), or the same path.
bool is_this_gengraph(const std::string& path) {
  std::error_code ec;
  if (fs::equivalent(path, "/proc/self/exe", ec) && !ec) return true;
  const fs::path canonical = fs::weakly_canonical(path, ec);
  return !ec && canonical == fs::path(self_executable());
}

// The values of a job script besides the sbatch options, with where each came from.
struct ScriptValues {
  fs::path dir;
  std::string dir_origin;
  std::string name, name_origin;
  std::string cwd, cwd_origin;
  std::string gengraph, gengraph_origin;
};

// A Slurm file name pattern for the task's log: the folder's '%' doubled (Slurm reads "%%" as
// '%'), and a folder with a backslash refused (one turns every pattern of the name off, so that
// all tasks would write one file).
std::string log_pattern(const ScriptValues& v, const std::string& extension) {
  const std::string folder = (v.dir / "logs").string();
  if (folder.find('\\') != std::string::npos) {
    throw Error(v.dir_origin + ": expected a folder without a backslash (Slurm's --output and " +
                "--error name each task's log with %a, which a backslash turns off), found " +
                shown(v.dir.string()));
  }
  std::string out;
  for (const char ch : folder) out += ch == '%' ? std::string("%%") : std::string(1, ch);
  return out + "/%a" + extension;
}

// job.sbatch for `tasks`, every value through the one writer.
std::string job_script(const ScriptValues& v, const std::map<std::string, SbatchValue>& options,
                       const std::vector<int64_t>& tasks) {
  BatchScript s;
  check_no_control_characters(v.name, v.name_origin, "the job's name (--job-name)");
  s.comment("Written by gengraph submit: one array task per sweep point of " + v.name + ".",
            v.name_origin);
  s.option("job-name", "gengraph-" + v.name, v.name_origin);
  s.option("array", array_spec(tasks), "the points to run");
  s.option("output", log_pattern(v, ".out"), v.dir_origin);
  s.option("error", log_pattern(v, ".err"), v.dir_origin);
  s.option("chdir", v.cwd, v.cwd_origin);
  for (const auto& [k, o] : options) s.option(k, o.value, o.origin);
  // The tasks load the plug-ins this submission loaded (--plugin, GENGRAPH_PLUGINS).
  std::vector<BatchScript::Word> words{{v.gengraph, v.gengraph_origin}};
  for (const std::string& plugin : loaded_plugins()) {
    words.push_back({"--plugin", ""});
    words.push_back({plugin, "a plug-in loaded by gengraph submit"});
  }
  words.push_back({"task", ""});
  words.push_back({v.dir.string(), v.dir_origin});
  s.exec(words);
  return s.text();
}

// Writes job.sbatch and submits it; returns the job id.
std::string write_and_submit(const fs::path& dir, const std::string& script) {
  write_file_atomically(dir / "job.sbatch", script, "the job script");
  const CapturedCommand r = run_captured({"sbatch", "--parsable", (dir / "job.sbatch").string()});
  if (!r.found) {
    throw Error(
        "sbatch is not on PATH: gengraph submit needs Slurm's client tools (Debian: slurm-client) "
        "on a machine that can submit to the cluster");
  }
  std::string id = r.out.substr(0, r.out.find_first_of(";\n"));
  if (r.rc != 0 || id.empty() || id.size() > 20 ||
      id.find_first_not_of("0123456789") != std::string::npos) {
    std::string why = r.err.empty() ? r.out : r.err;
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    throw Error("sbatch refused the job (exit " + std::to_string(r.rc) + "): " + why);
  }
  return id;
}

JobManifest read_manifest(const fs::path& dir) {
  const fs::path file = dir / "job.json";
  if (!fs::is_directory(dir)) throw Error("'" + dir.string() + "' is not a job folder");
  if (!fs::exists(fs::symlink_status(file))) {
    throw Error("'" + dir.string() + "' has no job.json: not a folder made by gengraph submit");
  }
  return parse_job_manifest(read_json_file(file), file.string());
}

// Which points have a valid part, and which an error part.
struct PartState {
  std::map<int64_t, Json> done;
  std::map<int64_t, std::string> failed;
};

PartState read_parts(const fs::path& dir, const JobManifest& m) {
  PartState st;
  const auto n = static_cast<int64_t>(m.points.size());
  if (!fs::is_directory(dir / "parts")) return st;
  for (const auto& e : fs::directory_iterator(dir / "parts")) {
    const std::string name = e.path().filename().string();
    if (name.find(".tmp") != std::string::npos) continue;  // a part still being written
    const bool error_part = name.size() > 11 && name.substr(name.size() - 11) == ".error.json";
    const std::string stem = name.substr(0, name.find('.'));
    const std::string file = e.path().string();
    const std::optional<int64_t> index = point_number(stem);
    if (!index || *index >= n || name != stem + (error_part ? ".error.json" : ".json")) {
      throw Error("'" + file + "': not a part of this job: expected INDEX.json or " +
                  "INDEX.error.json with INDEX a point number (" + point_range(n) + "), found " +
                  shown(name));
    }
    const Json part = read_json_file(e.path());
    const JsonAt f(part, file_source(file));
    f.object("a JSON object (a part of gengraph task)");
    const std::string not_ours =
        "' is not a part of this job (made for another experiment or submission; its job id or "
        "index does not match job.json)";
    if (f["schema"].string(std::string("\"") + kPartSchema + "\"") != kPartSchema ||
        f["job"].string("the submission's id") != m.id)
      throw Error("'" + file + not_ours);
    if (f["index"].integer_in(0, kMaxJobPoints) != *index) throw Error("'" + file + not_ours);
    if (error_part) {
      f.only({"schema", "job", "index", "error"});
      st.failed[*index] = f["error"].string("the point's error message");
    } else {
      f.only({"schema", "job", "index", "result"});
      const JsonAt result = f["result"].object("the point's results (an object)");
      // One point's document, as `gengraph run` writes it for an experiment without a sweep:
      // read whole now, so that a damaged one is named here and not once merged and written.
      if (result.has("points")) result["points"].fail("no 'points' (a part holds one point)");
      (void)format_table(result);
      st.done[*index] = result.json();
    }
  }
  for (const auto& [i, doc] : st.done) st.failed.erase(i);  // a rerun succeeded
  return st;
}

std::string point_text(const JobManifest& m, int64_t i) {
  const auto& p = m.points[static_cast<size_t>(i)];
  return "point " + std::to_string(i) + (p.empty() ? "" : " " + point_list(p));
}

// What Slurm says of each task of the last submission, when its clients answer.
std::map<int64_t, std::string> scheduler_states(const JobManifest& m) {
  std::map<int64_t, std::string> out;
  if (m.job_ids.empty()) return out;
  const CapturedCommand r =
      run_captured({"squeue", "-h", "-t", "all", "-j", m.job_ids.back(), "-o", "%K %T"});
  if (!r.found || r.rc != 0) return out;
  std::istringstream lines(r.out);
  for (std::string task, state; lines >> task >> state;) {
    if (const auto i = point_number(task)) out[*i] = state;  // ranges of pending tasks: skipped
  }
  return out;
}

fs::path find_job_dir(const std::string& arg) {
  if (fs::is_directory(arg) || arg.find_first_not_of("0123456789") != std::string::npos)
    return fs::absolute(arg);
  if (fs::is_directory("results")) {
    for (const auto& e : fs::directory_iterator("results")) {
      if (!fs::exists(e.path() / "job.json")) continue;
      try {
        const JobManifest m = read_manifest(e.path());
        for (const auto& id : m.job_ids)
          if (id == arg) return fs::absolute(e.path());
      } catch (const Error&) {
      }
    }
  }
  throw Error("no job folder under results/ records Slurm job " + arg + "; give the folder");
}

}  // namespace

std::string submit_experiment(const std::string& config_path, const std::vector<std::string>& sets,
                              const std::vector<std::string>& slurm_options,
                              const std::string& job_dir, std::ostream& out,
                              const std::string& gengraph) {
  const ExperimentConfig c = load_experiment(config_path, sets);
  check_sweep_size(c);                      // before each point is parsed
  const auto points = check_experiment(c);  // every point checked before anything is submitted
  const auto options = sbatch_options(c, slurm_options);
  const fs::path dir =
      fs::absolute(job_dir.empty() ? fs::path("results") / (c.name + ".slurm") : fs::path(job_dir));
  if (fs::exists(fs::symlink_status(dir))) {
    throw Error("job folder '" + dir.string() +
                "' exists already (an earlier submission?); give another with --job-dir, rerun "
                "its missing points with --rerun, or remove it");
  }
  Json m = {{"schema", kJobSchema},
            {"id", random_id()},
            {"experiment", c.name},
            {"config_file", config_path},  // as given: relative to cwd, as a local run records it
            {"config_text", c.source_text},
            {"overrides", sets},
            {"cwd", fs::current_path().string()},
            {"gengraph", chosen_gengraph(gengraph)},
            {"created", now_iso8601()},
            {"points", Json::array()},
            {"jobs", Json::array()}};
  for (const auto& [overrides, pc] : points) m["points"].push_back(overrides);
  std::vector<int64_t> tasks;
  for (size_t i = 0; i < points.size(); ++i) tasks.push_back(static_cast<int64_t>(i));
  // Everything is checked before the folder is made: the manifest as a later task will read it,
  // and the script.
  const std::string manifest_file = (dir / "job.json").string();
  std::string text = manifest_text(m, manifest_file);
  check_job_manifest(m, manifest_file);
  const std::string script = job_script(
      {dir, "the job folder (--job-dir, else results/NAME.slurm)", c.name,
       c.file + ": the experiment's name", m["cwd"].get<std::string>(), "the working folder",
       m["gengraph"].get<std::string>(), gengraph.empty() ? "gengraph's own path" : "--gengraph"},
      options, tasks);
  fs::create_directories(dir / "logs");
  fs::create_directories(dir / "parts");
  try {
    write_file_atomically(dir / "job.json", text, "the job manifest");
    const std::string id = write_and_submit(dir, script);
    m["jobs"].push_back({{"job_id", id}, {"tasks", tasks}, {"submitted", now_iso8601()}});
    write_file_atomically(dir / "job.json", manifest_text(m, manifest_file), "the job manifest");
    out << "submitted Slurm job " << id << ": " << tasks.size() << " array task(s), one per point\n"
        << "job folder: " << dir.string() << "\n"
        << "when it is done: gengraph collect " << dir.string() << "\n";
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(dir, ignored);  // nothing half-made is left behind
    throw;
  }
  return dir.string();
}

int resubmit_missing(const std::string& job_dir, const std::vector<std::string>& slurm_options,
                     std::ostream& out, const std::string& gengraph) {
  const fs::path dir = fs::absolute(job_dir);
  JobManifest m = read_manifest(dir);
  const PartState st = read_parts(dir, m);
  std::vector<int64_t> tasks;
  for (int64_t i = 0; i < static_cast<int64_t>(m.points.size()); ++i)
    if (!st.done.count(i)) tasks.push_back(i);
  if (tasks.empty()) {
    out << "every point of " << dir.string() << " has a result; nothing to rerun\n";
    return 0;
  }
  check_experiment(m.config);
  // The tasks run in job.json's cwd, which must still be a folder.
  std::error_code ec;
  const auto cwd = fs::status(m.cwd, ec);
  if (!fs::is_directory(cwd)) {
    throw Error(file_source(m.file) + ": key 'cwd': expected the folder the tasks run in (" +
                "an existing folder), found " + shown(m.cwd) + ", " +
                (fs::exists(cwd) ? "which is not a folder" : "which does not exist here"));
  }
  // The tasks run job.json's gengraph only when it is this very binary; any other only when
  // named on the command line: an edited job.json never chooses what the tasks execute.
  std::string binary = m.gengraph, binary_origin = file_source(m.file) + ": key 'gengraph'";
  if (!gengraph.empty()) {
    binary = chosen_gengraph(gengraph);
    binary_origin = "--gengraph";
  } else if (!is_this_gengraph(m.gengraph)) {
    std::error_code ignored;
    const bool runnable =
        fs::is_regular_file(m.gengraph, ignored) && ::access(m.gengraph.c_str(), X_OK) == 0;
    throw Error(file_source(m.file) +
                ": key 'gengraph': expected the path of the gengraph binary the tasks run, this "
                "one (" +
                shown(self_executable()) + "), found " + shown(m.gengraph) + ", " +
                (runnable ? "another file" : what_is_there(m.gengraph)) +
                "; to run another gengraph, name it: gengraph submit --rerun DIR --gengraph PATH");
  }
  const std::string script =
      job_script({dir, "the job folder", m.experiment, file_source(m.file) + ": key 'experiment'",
                  m.cwd, file_source(m.file) + ": key 'cwd'", binary, binary_origin},
                 sbatch_options(m.config, slurm_options), tasks);
  for (const int64_t i : tasks) {  // the old error parts go; the rerun writes new ones
    std::error_code ignored;
    fs::remove(dir / "parts" / (std::to_string(i) + ".error.json"), ignored);
  }
  const std::string id = write_and_submit(dir, script);
  m.doc["jobs"].push_back({{"job_id", id}, {"tasks", tasks}, {"submitted", now_iso8601()}});
  m.doc["gengraph"] = binary;  // what the tasks now run
  write_file_atomically(dir / "job.json", manifest_text(m.doc, m.file), "the job manifest");
  out << "submitted Slurm job " << id << ": " << tasks.size()
      << " point(s) without a result: " << array_spec(tasks) << "\n";
  return static_cast<int>(tasks.size());
}

int run_task(const std::string& job_dir, std::optional<int64_t> index, std::ostream& log) {
  const fs::path dir = fs::absolute(job_dir);
  const JobManifest m = read_manifest(dir);
  const auto n = static_cast<int64_t>(m.points.size());
  if (!index) {
    const char* env = std::getenv("SLURM_ARRAY_TASK_ID");
    if (!env || !*env) {
      throw Error(
          "gengraph task: give the point's INDEX, or run it as a Slurm array task "
          "(SLURM_ARRAY_TASK_ID)");
    }
    index = point_number(env);
    if (!index) {
      throw Error("gengraph task: SLURM_ARRAY_TASK_ID: expected a point number of " + dir.string() +
                  " (" + point_range(n) + "), found " + shown(env));
    }
  }
  if (*index < 0 || *index >= n) {
    throw Error("gengraph task: point " + std::to_string(*index) + " is not in " + dir.string() +
                " (it has points " + point_range(n) + ")");
  }
  const fs::path part = dir / "parts" / (std::to_string(*index) + ".json");
  const fs::path error_part = dir / "parts" / (std::to_string(*index) + ".error.json");
  Json header = {{"schema", kPartSchema}, {"job", m.id}, {"index", *index}};
  check_output_path(part, "the result part");  // before the point's work, not after it
  try {
    // The manifest's points are the sweep's own (checked when it was read): parse only this one.
    const ExperimentConfig pc = point_config(m.config, m.points[static_cast<size_t>(*index)]);
    log << "gengraph task: " << point_text(m, *index) << " of " << shown(m.experiment) << "\n";
    Json result = run_point(pc, log);
    header["result"] = std::move(result);
    write_file_atomically(part, header.dump() + "\n", "the result part");
    return 0;
  } catch (const Interrupted&) {
    throw;
  } catch (const std::exception& e) {
    header["error"] = e.what();
    write_file_atomically(error_part,
                          header.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n",
                          "the error part");
    log << "error: " << e.what() << "\n";
    return 1;
  }
}

int collect_job(const std::string& job_dir_or_id, const std::string& output, std::ostream& out,
                std::ostream& err) {
  const fs::path dir = find_job_dir(job_dir_or_id);
  const JobManifest m = read_manifest(dir);
  const PartState st = read_parts(dir, m);
  const ExperimentConfig& c = m.config;
  const auto n = static_cast<int64_t>(m.points.size());
  std::map<int64_t, std::string> states;
  if (static_cast<int64_t>(st.done.size()) < n) states = scheduler_states(m);

  // The document `gengraph run` writes for the same file: a point's own document without a
  // sweep, else the header, the sweep and the points in order.
  Json doc;
  if (c.sweep.empty()) {
    doc = st.done.count(0) ? st.done.at(0) : results_header(c);
    if (!st.done.count(0)) doc["runs"] = Json::array();
  } else {
    doc = results_header(c);
    doc["sweep"] = Json::object();
    for (const auto& [key, values] : c.sweep) doc["sweep"][key] = values;
    doc["points"] = Json::array();
    for (const auto& [i, point] : st.done) {
      Json p = point;
      p["point"] = m.points[static_cast<size_t>(i)];
      doc["points"].push_back(p);
    }
  }
  doc["baseline"] = c.baseline;
  Json missing = Json::array();
  for (int64_t i = 0; i < n; ++i) {
    if (st.done.count(i)) continue;
    std::string why;
    if (st.failed.count(i)) {
      why = "failed: " + st.failed.at(i);
    } else if (states.count(i)) {
      why = "no result; Slurm says " + states.at(i) + " (see " +
            (dir / "logs" / (std::to_string(i) + ".err")).string() + ")";
    } else {
      why = "no result (still queued or running, or it never ran; see " +
            (dir / "logs" / (std::to_string(i) + ".err")).string() + ")";
    }
    missing.push_back({{"index", i}, {"point", m.points[static_cast<size_t>(i)]}, {"status", why}});
  }
  if (!missing.empty()) doc["missing_points"] = missing;
  const std::string path = !output.empty()     ? output
                           : !c.output.empty() ? c.output
                                               : "results/" + c.name + ".json";
  if (st.done.empty()) {
    for (const auto& p : missing)
      err << "error: " << point_text(m, p["index"].get<int64_t>()) << ": "
          << p["status"].get<std::string>() << "\n";
    throw Error("no point of " + dir.string() + " has a result yet; nothing written");
  }
  check_output_path(path, "results");
  write_outputs(doc, path, c.plot);
  out << format_table(doc) << "results: " << path << "\n";
  if (!c.plot.empty()) out << "plot: " << c.plot << "\n";
  for (const auto& p : missing)
    err << "error: " << point_text(m, p["index"].get<int64_t>()) << ": "
        << p["status"].get<std::string>() << "\n";
  if (!missing.empty()) {
    err << "error: " << missing.size() << " of " << n
        << " point(s) have no result; rerun them with: "
        << "gengraph submit --rerun " << dir.string() << "\n";
    return 3;
  }
  return 0;
}

}  // namespace gengraph

#include "experiments/slurm.h"

#include <unistd.h>

#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "experiments/experiment_config.h"
#include "experiments/process.h"
#include "experiments/results.h"
#include "experiments/runner.h"
#include "experiments/table.h"
#include "framework/model/model_config.h"
#include "framework/util/error.h"

namespace gengraph {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr const char* kJobSchema = "gengraph-slurm-job-1";
constexpr const char* kPartSchema = "gengraph-slurm-part-1";

std::string random_id() {
  std::random_device rd;
  std::ostringstream s;
  s << std::hex << rd() << rd();
  return s.str();
}

// Text that goes into the job script: an #SBATCH line or a double-quoted shell word.
void check_script_text(const std::string& what, const std::string& v) {
  for (const char ch : v) {
    if (static_cast<unsigned char>(ch) < 0x20 || ch == ' ' || ch == '"' || ch == '\'' ||
        ch == '\\' || ch == '`' || ch == '$') {
      throw Error(what + " '" + v +
                  "': Slurm job scripts cannot hold spaces, quotes, '$', '`' or control "
                  "characters in it; use another folder");
    }
  }
}

// sbatch options from the experiment's cluster block, then --slurm-option overrides.
std::map<std::string, std::string> sbatch_options(const ClusterSpec& c,
                                                  const std::vector<std::string>& overrides) {
  std::map<std::string, std::string> o;
  if (!c.partition.empty()) o["partition"] = c.partition;
  if (!c.time.empty()) o["time"] = c.time;
  if (c.gpus > 0) o["gres"] = "gpu:" + std::to_string(c.gpus);
  if (c.cpus > 0) o["cpus-per-task"] = std::to_string(c.cpus);
  if (!c.memory.empty()) o["mem"] = c.memory;
  for (const auto& [k, v] : c.options) o[k] = v;
  for (const auto& spec : overrides) {
    const auto eq = spec.find('=');
    const std::string k = spec.substr(0, eq),
                      v = eq == std::string::npos ? "" : spec.substr(eq + 1);
    if (!sbatch_option_name(k)) {
      throw Error("--slurm-option '" + spec +
                  "': expected an sbatch long option without '--', as KEY=VALUE or KEY, e.g. "
                  "partition=gpu");
    }
    if (sbatch_option_set_by_gengraph(k))
      throw Error("--slurm-option '" + spec + "': gengraph sets --" + k);
    check_script_text("--slurm-option", v);
    o[k] = v;
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
  return p.string();
}

Json read_manifest(const fs::path& dir) {
  const fs::path file = dir / "job.json";
  if (!fs::is_directory(dir)) throw Error("'" + dir.string() + "' is not a job folder");
  if (!fs::exists(file)) {
    throw Error("'" + dir.string() + "' has no job.json: not a folder made by gengraph submit");
  }
  Json m = read_json_file(file);
  if (!m.is_object() || m.value("schema", "") != kJobSchema || !m.contains("points") ||
      !m["points"].is_array() || !m.contains("id") || !m.contains("config_text")) {
    throw Error("'" + file.string() + "' is not a gengraph job manifest (expected schema " +
                kJobSchema + ")");
  }
  return m;
}

// The experiment exactly as submitted: its text, its file name (for messages) and overrides.
ExperimentConfig manifest_config(const Json& m) {
  return parse_experiment(m["config_text"].get<std::string>(), m["config_file"].get<std::string>(),
                          m["overrides"].get<std::vector<std::string>>());
}

// Writes job.sbatch for `tasks` and submits it; returns the job id.
std::string write_and_submit(const fs::path& dir, const Json& m,
                             const std::map<std::string, std::string>& options,
                             const std::vector<int64_t>& tasks) {
  std::ostringstream s;
  s << "#!/bin/bash\n"
    << "# Written by gengraph submit: one array task per sweep point of " << m["experiment"]
    << ".\n"
    << "#SBATCH --job-name=gengraph-" << m["experiment"].get<std::string>() << "\n"
    << "#SBATCH --array=" << array_spec(tasks) << "\n"
    << "#SBATCH --output=" << (dir / "logs" / "%a.out").string() << "\n"
    << "#SBATCH --error=" << (dir / "logs" / "%a.err").string() << "\n"
    << "#SBATCH --chdir=" << m["cwd"].get<std::string>() << "\n";
  for (const auto& [k, v] : options) s << "#SBATCH --" << k << (v.empty() ? "" : "=" + v) << "\n";
  s << "exec \"" << m["gengraph"].get<std::string>() << "\" task \"" << dir.string() << "\"\n";
  write_file_atomically(dir / "job.sbatch", s.str(), "the job script");
  const CapturedCommand r = run_captured({"sbatch", "--parsable", (dir / "job.sbatch").string()});
  if (!r.found) {
    throw Error(
        "sbatch is not on PATH: gengraph submit needs Slurm's client tools (Debian: slurm-client) "
        "on a machine that can submit to the cluster");
  }
  std::string id = r.out.substr(0, r.out.find_first_of(";\n"));
  if (r.rc != 0 || id.empty() || id.find_first_not_of("0123456789") != std::string::npos) {
    std::string why = r.err.empty() ? r.out : r.err;
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    throw Error("sbatch refused the job (exit " + std::to_string(r.rc) + "): " + why);
  }
  return id;
}

// Which points have a valid part, and which an error part.
struct PartState {
  std::map<int64_t, Json> done;
  std::map<int64_t, std::string> failed;
};

PartState read_parts(const fs::path& dir, const Json& m) {
  PartState st;
  const int64_t n = static_cast<int64_t>(m["points"].size());
  if (!fs::is_directory(dir / "parts")) return st;
  for (const auto& e : fs::directory_iterator(dir / "parts")) {
    const std::string name = e.path().filename().string();
    if (name.find(".tmp") != std::string::npos) continue;  // a part still being written
    const bool error_part = name.size() > 11 && name.substr(name.size() - 11) == ".error.json";
    const std::string stem = name.substr(0, name.find('.'));
    if (stem.empty() || stem.find_first_not_of("0123456789") != std::string::npos ||
        e.path().extension() != ".json") {
      throw Error("'" + e.path().string() + "': not a part of this job (expected INDEX.json)");
    }
    const int64_t index = std::stoll(stem);
    const Json part = read_json_file(e.path());
    if (!part.is_object() || part.value("schema", "") != kPartSchema ||
        part.value("job", "") != m["id"].get<std::string>() || part.value("index", -1) != index ||
        index >= n) {
      throw Error("'" + e.path().string() + "' is not a part of this job (made for another " +
                  "experiment or submission; its job id or index does not match job.json)");
    }
    if (error_part) {
      st.failed[index] = part.value("error", std::string("failed"));
    } else {
      st.done[index] = part.at("result");
    }
  }
  for (const auto& [i, doc] : st.done) st.failed.erase(i);  // a rerun succeeded
  return st;
}

std::vector<std::string> point_of(const Json& m, int64_t i) {
  return m["points"][static_cast<size_t>(i)].get<std::vector<std::string>>();
}

std::string point_text(const Json& m, int64_t i) {
  const auto p = point_of(m, i);
  return "point " + std::to_string(i) + (p.empty() ? "" : " [" + join(p, ", ") + "]");
}

// What Slurm says of each task of the last submission, when its clients answer.
std::map<int64_t, std::string> scheduler_states(const Json& m) {
  std::map<int64_t, std::string> out;
  if (!m.contains("jobs") || m["jobs"].empty()) return out;
  const std::string id = m["jobs"].back().value("job_id", "");
  const CapturedCommand r = run_captured({"squeue", "-h", "-t", "all", "-j", id, "-o", "%K %T"});
  if (!r.found || r.rc != 0) return out;
  std::istringstream lines(r.out);
  for (std::string task, state; lines >> task >> state;) {
    if (task.find_first_not_of("0123456789") == std::string::npos) out[std::stoll(task)] = state;
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
        const Json m = read_manifest(e.path());
        for (const auto& j : m.value("jobs", Json::array()))
          if (j.value("job_id", "") == arg) return fs::absolute(e.path());
      } catch (const Error&) {
      }
    }
  }
  throw Error("no job folder under results/ records Slurm job " + arg + "; give the folder");
}

}  // namespace

std::string submit_experiment(const std::string& config_path, const std::vector<std::string>& sets,
                              const std::vector<std::string>& slurm_options,
                              const std::string& job_dir, std::ostream& out) {
  const ExperimentConfig c = load_experiment(config_path, sets);
  const auto points = check_experiment(c);  // every point checked before anything is submitted
  const auto options = sbatch_options(c.cluster, slurm_options);
  const fs::path dir =
      fs::absolute(job_dir.empty() ? fs::path("results") / (c.name + ".slurm") : fs::path(job_dir));
  check_script_text("the job folder", dir.string());
  check_script_text("the working folder", fs::current_path().string());
  if (fs::exists(dir)) {
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
            {"gengraph", self_executable()},
            {"created", now_iso8601()},
            {"points", Json::array()},
            {"jobs", Json::array()}};
  for (const auto& [overrides, pc] : points) m["points"].push_back(overrides);
  std::vector<int64_t> tasks;
  for (size_t i = 0; i < points.size(); ++i) tasks.push_back(static_cast<int64_t>(i));
  fs::create_directories(dir / "logs");
  fs::create_directories(dir / "parts");
  try {
    write_file_atomically(dir / "job.json", m.dump(2) + "\n", "the job manifest");
    const std::string id = write_and_submit(dir, m, options, tasks);
    m["jobs"].push_back({{"job_id", id}, {"tasks", tasks}, {"submitted", now_iso8601()}});
    write_file_atomically(dir / "job.json", m.dump(2) + "\n", "the job manifest");
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
                     std::ostream& out) {
  const fs::path dir = fs::absolute(job_dir);
  Json m = read_manifest(dir);
  const PartState st = read_parts(dir, m);
  std::vector<int64_t> tasks;
  for (int64_t i = 0; i < static_cast<int64_t>(m["points"].size()); ++i)
    if (!st.done.count(i)) tasks.push_back(i);
  if (tasks.empty()) {
    out << "every point of " << dir.string() << " has a result; nothing to rerun\n";
    return 0;
  }
  const ExperimentConfig c = manifest_config(m);
  check_experiment(c);
  for (const int64_t i : tasks) {  // the old error parts go; the rerun writes new ones
    std::error_code ignored;
    fs::remove(dir / "parts" / (std::to_string(i) + ".error.json"), ignored);
  }
  const std::string id = write_and_submit(dir, m, sbatch_options(c.cluster, slurm_options), tasks);
  m["jobs"].push_back({{"job_id", id}, {"tasks", tasks}, {"submitted", now_iso8601()}});
  write_file_atomically(dir / "job.json", m.dump(2) + "\n", "the job manifest");
  out << "submitted Slurm job " << id << ": " << tasks.size()
      << " point(s) without a result: " << array_spec(tasks) << "\n";
  return static_cast<int>(tasks.size());
}

int run_task(const std::string& job_dir, std::optional<int64_t> index, std::ostream& log) {
  const fs::path dir = fs::absolute(job_dir);
  const Json m = read_manifest(dir);
  if (!index) {
    const char* env = std::getenv("SLURM_ARRAY_TASK_ID");
    if (!env || !*env || std::string(env).find_first_not_of("0123456789") != std::string::npos) {
      throw Error(
          "gengraph task: give the point's INDEX, or run it as a Slurm array task "
          "(SLURM_ARRAY_TASK_ID)");
    }
    index = std::stoll(env);
  }
  const int64_t n = static_cast<int64_t>(m["points"].size());
  if (*index < 0 || *index >= n) {
    throw Error("gengraph task: point " + std::to_string(*index) + " is not in " + dir.string() +
                " (it has points 0 to " + std::to_string(n - 1) + ")");
  }
  const fs::path part = dir / "parts" / (std::to_string(*index) + ".json");
  const fs::path error_part = dir / "parts" / (std::to_string(*index) + ".error.json");
  Json header = {{"schema", kPartSchema}, {"job", m["id"]}, {"index", *index}};
  try {
    const ExperimentConfig c = manifest_config(m);
    const auto points = expand_sweep(c);
    if (static_cast<int64_t>(points.size()) != n ||
        points[static_cast<size_t>(*index)].first != point_of(m, *index)) {
      throw Error("the experiment no longer expands to the points job.json lists");
    }
    log << "gengraph task: " << point_text(m, *index) << " of " << m["experiment"] << "\n";
    Json result = run_point(points[static_cast<size_t>(*index)].second, log);
    header["result"] = std::move(result);
    write_file_atomically(part, header.dump() + "\n", "the result part");
    return 0;
  } catch (const Interrupted&) {
    throw;
  } catch (const std::exception& e) {
    header["error"] = e.what();
    write_file_atomically(error_part, header.dump() + "\n", "the error part");
    log << "error: " << e.what() << "\n";
    return 1;
  }
}

int collect_job(const std::string& job_dir_or_id, const std::string& output, std::ostream& out,
                std::ostream& err) {
  const fs::path dir = find_job_dir(job_dir_or_id);
  const Json m = read_manifest(dir);
  const PartState st = read_parts(dir, m);
  const ExperimentConfig c = manifest_config(m);
  const int64_t n = static_cast<int64_t>(m["points"].size());
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
      p["point"] = point_of(m, i);
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
    missing.push_back({{"index", i}, {"point", point_of(m, i)}, {"status", why}});
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

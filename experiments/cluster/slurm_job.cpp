#include "experiments/cluster/slurm_job.h"

#include <algorithm>
#include <sstream>

#include "framework/util/error.h"
#include "framework/util/json_at.h"
#include "framework/util/strings.h"

namespace gengraph {
namespace slurm {

// Where the first control character of `v` starts (C0, DEL, or a C1 control U+0080..U+009F in
// UTF-8), or npos.
size_t control_character_at(const std::string& v) {
  for (size_t i = 0; i < v.size(); ++i) {
    const auto b = static_cast<unsigned char>(v[i]);
    if (b < 0x20 || b == 0x7f) return i;
    if (b == 0xc2 && i + 1 < v.size()) {
      const auto next = static_cast<unsigned char>(v[i + 1]);
      if (next >= 0x80 && next <= 0x9f) return i;
    }
  }
  return std::string::npos;
}

// `v` in double quotes for a message, as the JSON readers quote values (control characters,
// quotes and backslashes escaped, cut after 120 bytes).
std::string shown(const std::string& v) { return JsonAt::quoted(v); }

// Refuses control characters in a value bound for the job script.
void check_no_control_characters(const std::string& value, const std::string& origin,
                                 const std::string& place) {
  const size_t at = control_character_at(value);
  if (at == std::string::npos) return;
  throw Error(origin + ": expected text without control characters for " + place +
              " of the Slurm job script (no newline, carriage return, tab, DEL or other control "
              "character: a newline would start a line of its own there), found " +
              shown(value) + " (a control character at byte " + std::to_string(at) + ")");
}

// The point numbers of a job of `n` points, for messages: "0 to 3".
std::string point_range(int64_t n) {
  return n > 0 ? "0 to " + std::to_string(n - 1) : "none: the job has no points";
}

// A point number written in decimal digits (no sign, no leading zeros), or nullopt.
std::optional<int64_t> point_number(const std::string& text) {
  if (text.empty() || text.size() > 18 || text.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  if (text.size() > 1 && text[0] == '0') return std::nullopt;
  return std::stoll(text);  // at most 18 digits: within int64_t
}

// The number of points of the experiment's sweep, or kMaxJobPoints + 1 when there are more.
int64_t sweep_size(const ExperimentConfig& c) {
  int64_t n = 1;
  for (const auto& [key, values] : c.sweep) {
    n *= static_cast<int64_t>(values.size());
    if (n > kMaxJobPoints) return kMaxJobPoints + 1;
  }
  return n;
}

// Refuses a sweep of more points than one job holds, before any point is parsed.
void check_sweep_size(const ExperimentConfig& c) {
  if (sweep_size(c) > kMaxJobPoints) {
    throw Error(c.file + ": sweep: expands to more than " + std::to_string(kMaxJobPoints) +
                " points, more than one Slurm job of gengraph holds; split it into smaller "
                "sweeps");
  }
}

// The configuration of one point: the experiment with the point's overrides after its own, as
// expand_sweep parses each point.
ExperimentConfig point_config(const ExperimentConfig& c, const std::vector<std::string>& point) {
  if (c.sweep.empty()) return c;
  std::vector<std::string> all = c.overrides;
  all.insert(all.end(), point.begin(), point.end());
  try {
    return parse_experiment(c.source_text, c.file, all);
  } catch (const Error& e) {
    throw Error("sweep point " + join(point, ", ") + ": " + e.what());
  }
}

// A point for messages: "[key=value, ...]", a value with a control character escaped.
std::string point_list(const std::vector<std::string>& p) {
  std::vector<std::string> shown_p;
  for (const auto& v : p)
    shown_p.push_back(control_character_at(v) == std::string::npos ? v : shown(v));
  return "[" + join(shown_p, ", ") + "]";
}

// How errors about the JSON file `file` begin: its name in quotes.
std::string file_source(const std::string& file) { return "'" + file + "'"; }

JobManifest parse_job_manifest(const Json& m, const std::string& file) {
  const JsonAt f(m, file_source(file));
  const std::string schema_text = std::string("\"") + kJobSchema + "\"";
  f.object("a gengraph job manifest (a JSON object with \"schema\": " + schema_text + ")");
  const std::string schema_expected = schema_text + " (a job folder of gengraph submit)";
  if (f["schema"].string(schema_expected) != kJobSchema) f["schema"].fail(schema_expected);
  f.only({"schema", "id", "experiment", "config_file", "config_text", "overrides", "cwd",
          "gengraph", "created", "points", "jobs"});
  JobManifest out;
  out.file = file;
  const std::string id_expected = "the submission's id (1 to 64 hexadecimal digits)";
  out.id = f["id"].string(id_expected);
  if (out.id.empty() || out.id.size() > 64 ||
      out.id.find_first_not_of("0123456789abcdef") != std::string::npos)
    f["id"].fail(id_expected);
  out.experiment = f["experiment"].string("the experiment's name");
  const std::string config_file = f["config_file"].string("the experiment file's path");
  const std::string config_text = f["config_text"].string("the experiment file's text");
  const std::vector<std::string> overrides = f["overrides"].strings(10000);
  auto absolute_path = [&](const std::string& key) {
    const std::string expected = "an absolute path without control characters";
    const std::string v = f[key].string(expected);
    if (v.empty() || v[0] != '/' || control_character_at(v) != std::string::npos)
      f[key].fail(expected);
    return v;
  };
  out.cwd = absolute_path("cwd");
  out.gengraph = absolute_path("gengraph");
  f["created"].string("the submission's time (a string)");
  const std::vector<JsonAt> points =
      f["points"].items(kMaxJobPoints, "an array of points (arrays of strings)");
  out.points.reserve(points.size());
  for (const JsonAt& p : points) out.points.push_back(p.strings());
  const auto n = static_cast<int64_t>(out.points.size());
  for (const JsonAt& job : f["jobs"].items(kMaxJobPoints, "an array of submissions")) {
    job.object("a submission (an object with job_id, tasks and submitted)");
    job.only({"job_id", "tasks", "submitted"});
    const std::string job_id_expected = "a Slurm job id (a string of 1 to 20 digits)";
    const std::string id = job["job_id"].string(job_id_expected);
    if (id.empty() || id.size() > 20 || id.find_first_not_of("0123456789") != std::string::npos)
      job["job_id"].fail(job_id_expected);
    out.job_ids.push_back(id);
    job["submitted"].string("the submission's time (a string)");
    const std::string expected =
        "the point numbers submitted (" + point_range(n) + "), each once, in increasing order";
    const std::vector<JsonAt> tasks = job["tasks"].items(static_cast<size_t>(n), expected);
    if (tasks.empty()) job["tasks"].fail(expected);
    int64_t last = -1;
    for (const JsonAt& t : tasks) {
      const int64_t task = t.integer_in(0, n - 1);
      if (task <= last) t.fail(expected);
      last = task;
    }
  }
  // The experiment as submitted must still be one, of this name, whose sweep gives these points.
  try {
    out.config = parse_experiment(config_text, config_file, overrides);
  } catch (const Error& e) {
    throw Error(file_source(file) +
                ": key 'config_text': expected the experiment as submitted (read with "
                "config_file's name and the overrides), found text that is not one: " +
                e.what());
  }
  if (out.config.name != out.experiment) {
    f["experiment"].fail("the name of the experiment in config_text, " +
                         JsonAt::quoted(out.config.name));
  }
  if (sweep_size(out.config) != n) {
    const int64_t size = sweep_size(out.config);
    f["points"].fail("the " +
                     (size > kMaxJobPoints ? "more than " + std::to_string(kMaxJobPoints)
                                           : std::to_string(size)) +
                     " point(s) the sweep of config_text expands to, in order");
  }
  SweepWalk walk(out.config);  // point by point: the work is bounded by the file's own points
  for (size_t i = 0; i < out.points.size(); ++i, walk.next()) {
    const std::vector<std::string> expected = walk.point();
    if (out.points[i] != expected) {
      throw Error(file_source(file) + ": key 'points[" + std::to_string(i) + "]': expected " +
                  point_list(expected) + " (point " + std::to_string(i) +
                  " of the sweep of config_text), found " + point_list(out.points[i]));
    }
  }
  out.doc = m;
  return out;
}

// The manifest's text; refused (naming the key) when a string in it is not UTF-8, which JSON
// cannot hold.
std::string manifest_text(const Json& m, const std::string& file) {
  for (const auto& [key, value] : m.items()) {
    try {
      (void)value.dump();
    } catch (const Json::exception&) {
      throw Error("cannot write the job manifest '" + file + "': its key '" + key +
                  "' holds text that is not UTF-8, which JSON cannot record (the experiment's "
                  "text, name or overrides, or the path of the working folder or of gengraph); "
                  "use UTF-8 names");
    }
  }
  return m.dump(2) + "\n";
}

}  // namespace slurm

using namespace slurm;  // NOLINT: the job's own parts (slurm_job.h)

void BatchScript::comment(const std::string& text, const std::string& origin) {
  check_no_control_characters(text, origin, "a comment");
  header_.push_back("# " + text);
}

void BatchScript::option(const std::string& key, const std::string& value,
                         const std::string& origin) {
  if (!sbatch_option_name(key)) {
    throw Error(origin + ": expected an sbatch long option's name (lowercase letters, digits, " +
                "'-'), found " + shown(key));
  }
  check_no_control_characters(value, origin, "its #SBATCH --" + key + " line");
  std::string line = "#SBATCH --" + key;
  if (!value.empty()) {
    line += "=";
    if (value.find_first_of(" \"'\\#") == std::string::npos) {
      line += value;
    } else {
      line += '"';
      for (const char ch : value) {
        if (ch == '"' || ch == '\'' || ch == '\\' || ch == '#') line += '\\';
        line += ch;
      }
      line += '"';
    }
  }
  header_.push_back(line);
}

void BatchScript::exec(const std::vector<Word>& words) {
  std::string line = "exec";
  for (const Word& w : words) {
    line += ' ';
    if (w.origin.empty()) {  // a fixed word of gengraph's own
      if (w.text.empty() ||
          w.text.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                   "0123456789-_./") != std::string::npos)
        throw Error("internal error: the job script's fixed word " + shown(w.text) +
                    " needs quoting; give it an origin");
      line += w.text;
      continue;
    }
    check_no_control_characters(w.text, w.origin, "its command line");
    line += '"';
    for (const char ch : w.text) {
      if (ch == '"' || ch == '\\' || ch == '$' || ch == '`') line += '\\';
      line += ch;
    }
    line += '"';
  }
  command_ = line;
}

std::string BatchScript::text() const {
  if (command_.empty()) throw Error("internal error: a job script without its command");
  std::string out = "#!/bin/bash\n";
  for (const auto& line : header_) out += line + "\n";
  return out + command_ + "\n";
}

void check_job_manifest(const nlohmann::json& manifest, const std::string& file) {
  (void)parse_job_manifest(manifest, file);
}

}  // namespace gengraph

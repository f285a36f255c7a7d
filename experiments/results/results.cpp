#include "experiments/results/results.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>

#include "experiments/tools/process.h"
#include "framework/decoding/generator.h"
#include "framework/util/files.h"
#include "framework/util/path_errors.h"
#include "framework/util/strings.h"

namespace gengraph {

std::string now_iso8601() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

nlohmann::json results_header(const ExperimentConfig& c) {
  return {{"schema_version", 1},
          {"experiment", c.name},
          {"config_file", c.file},
          // The experiment as written and the overrides applied to it: enough to run it again.
          {"config", {{"text", c.source_text}, {"overrides", c.overrides}}},
          {"created", now_iso8601()}};
}

nlohmann::json outputs_json(const Generation& r, const std::vector<std::vector<int64_t>>& prompts) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < r.outputs.size(); ++i) {
    nlohmann::json seqs = nlohmann::json::array();
    for (const auto& h : r.outputs[i]) {
      nlohmann::json s{{"tokens", h.tokens}};
      if (h.score) s["score"] = *h.score;
      if (!h.token_scores.empty()) s["token_scores"] = h.token_scores;  // output_scores
      seqs.push_back(s);
    }
    out.push_back({{"input", i}, {"prompt_length", prompts[i].size()}, {"sequences", seqs}});
  }
  return out;
}

OutputComparison compare_outputs(const nlohmann::json& a, const nlohmann::json& b) {
  OutputComparison c;
  if (!a.is_array() || !b.is_array() || a.size() != b.size()) return c;
  double max_diff = 0;
  bool scored = true;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].is_object() || !b[i].is_object()) return c;
    const auto sa = a[i].value("sequences", nlohmann::json());
    const auto sb = b[i].value("sequences", nlohmann::json());
    if (!sa.is_array() || !sb.is_array() || sa.size() != sb.size()) return c;
    for (size_t k = 0; k < sa.size(); ++k) {
      if (!sa[k].is_object() || !sb[k].is_object() || !sa[k].contains("tokens") ||
          sa[k]["tokens"] != sb[k].value("tokens", nlohmann::json())) {
        return c;
      }
      const auto x = sa[k].value("score", nlohmann::json()),
                 y = sb[k].value("score", nlohmann::json());
      if (x.is_number() && y.is_number()) {
        max_diff = std::max(max_diff, std::abs(x.get<double>() - y.get<double>()));
      } else {
        scored = false;
      }
    }
  }
  c.same_tokens = true;
  if (scored) c.max_score_difference = max_diff;
  return c;
}

void record_comparison(nlohmann::json& run, const nlohmann::json& first_outputs) {
  const OutputComparison c = compare_outputs(first_outputs, run.value("outputs", nlohmann::json()));
  run["tokens_match_first_row"] = c.same_tokens;
  if (c.max_score_difference) run["max_score_difference_to_first_row"] = *c.max_score_difference;
}

void check_output_path(const std::filesystem::path& path, const std::string& what) {
  namespace fs = std::filesystem;
  // A link loop at the end or on the way, a folder that cannot be searched: named as such.
  checked_status(path, what);
  std::error_code ec;
  // The nearest folder that exists: the output is made there (its missing folders too, as
  // write_outputs makes them), so it must be a folder this process may write into.
  fs::path existing = ".";
  for (fs::path p = path.parent_path(); !p.empty(); p = p.parent_path()) {
    const auto st = fs::status(p, ec);
    if (fs::exists(st)) {
      if (!fs::is_directory(st)) {
        throw Error(what + " '" + path.string() + "': '" + p.string() + "' is not a folder");
      }
      existing = p;
      break;
    }
    if (p == p.parent_path()) break;
  }
  if (fs::is_directory(path, ec))
    throw Error(what + " '" + path.string() + "' is a folder, expected a file");
  // A device, pipe or link (/dev/stdout) is written through: it must take writes itself; a link
  // to a file still to be made, the folder the file is made in.
  fs::path target = existing;
  std::string named = existing == "." ? "the working folder '" + fs::current_path(ec).string() + "'"
                                      : "the folder '" + existing.string() + "'";
  int mode = W_OK | X_OK;
  const auto st = fs::symlink_status(path, ec);
  if (fs::exists(st) && !fs::is_regular_file(st)) {
    if (fs::exists(fs::status(path, ec))) {
      target = path, named = "it", mode = W_OK;
    } else {
      target = fs::weakly_canonical(path, ec).parent_path();
      named = "the folder '" + target.string() + "' of the file its link names";
    }
  }
  if (::access(target.c_str(), mode) != 0) {
    const int err = errno;
    throw Error(what + " '" + path.string() + "' cannot be written: " + named +
                " refuses writes (" + std::strerror(err) + ")");
  }
}

void write_outputs(const nlohmann::json& doc, const std::filesystem::path& path,
                   const std::filesystem::path& plot) {
  const InterruptGuard guard;
  std::string text;
  try {
    text = doc.dump(2) + "\n";
  } catch (const nlohmann::json::exception& e) {
    throw Error("cannot write results to '" + path.string() +
                "': they hold text that is not valid UTF-8 (the experiment's name, a label, or a "
                "file name?): " +
                e.what());
  }
  check_output_path(path, "results");
  if (!plot.empty()) check_output_path(plot, "plot");
  // A device, pipe or symlink (/dev/stdout, /dev/null, a link to a file) is written through, never
  // renamed over; the plot then reads a private copy. symlink_status: /dev/stdout is a link whose
  // target may be a regular file when stdout is redirected to one.
  const auto st = std::filesystem::symlink_status(path);
  const bool device = std::filesystem::exists(st) && !std::filesystem::is_regular_file(st);
  const std::filesystem::path tmp =
      device ? std::filesystem::temp_directory_path() /
                   ("gengraph-results-" + std::to_string(::getpid()) + ".json")
             : std::filesystem::path(path.string() + ".tmp");
  const std::filesystem::path plot_tmp =
      plot.empty()
          ? plot
          : plot.parent_path() / (plot.stem().string() + ".tmp" + plot.extension().string());
  auto clean = [&] {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    if (!plot_tmp.empty()) std::filesystem::remove(plot_tmp, ignored);
  };
  try {
    if (!device && path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
    write_file_or_throw(tmp, text, "results");
    if (!plot.empty()) {
      if (plot.has_parent_path()) std::filesystem::create_directories(plot.parent_path());
      // Results under load (kind: load) have their own chart: latency against throughput.
      const std::string script =
          doc.value("kind", "") == "load" ? "plot_load.py" : "plot_results.py";
      const std::vector<std::string> argv = {python_for_tools().string(),
                                             (source_root() / "tools" / script).string(),
                                             tmp.string(), plot_tmp.string()};
      const int rc = run_command(argv);
      if (rc != 0 || !std::filesystem::exists(plot_tmp)) {
        throw Error("plot: tools/" + script + " failed for '" + plot.string() + "' (exit " +
                    std::to_string(rc) +
                    "; any message it printed is above); no results were written");
      }
    }
    if (device) {
      write_file_or_throw(path, text, "results");
      std::filesystem::remove(tmp);
    } else {
      std::filesystem::rename(tmp, path);
    }
    if (!plot.empty()) std::filesystem::rename(plot_tmp, plot);
    throw_if_interrupted();
  } catch (const std::filesystem::filesystem_error& e) {
    clean();
    throw Error("writing results to '" + path.string() + "'" +
                (plot.empty() ? "" : " and the plot '" + plot.string() + "'") +
                " failed: " + e.code().message() + " ('" + e.path1().string() + "')");
  } catch (...) {
    clean();
    throw;
  }
}

std::vector<std::string> failed_runs(const nlohmann::json& doc) {
  std::vector<std::string> out;
  const JsonAt d(doc, "the results");
  auto scan = [&](const JsonAt& point, const std::string& where) {
    for (const auto& r : point["runs"].items()) {
      if (r.has("error")) out.push_back(r["label"].string() + where);
    }
  };
  if (d.has("points")) {
    for (const auto& p : d["points"].items()) scan(p, " [" + point_label(p) + "]");
  } else {
    scan(d, "");
  }
  return out;
}

std::string results_source(const std::string& path) {
  return path.empty() ? "the results" : "'" + path + "' is not a gengraph results file";
}

std::string point_label(const JsonAt& point) { return join(point["point"].strings(), ", "); }

TimingSummary read_timing(const JsonAt& summary) {
  // No measurement is 0 or negative, and none is near 1e12: 31 years in ms, a trillion tokens/s.
  // JSON has no NaN or infinity (gengraph would have written null); 1e308 is a number, refused
  // here.
  constexpr double kMax = 1e12;
  const std::string measured = "a measured value > 0 and at most 1e12";
  auto positive = [&](const JsonAt& v) {
    const double x = v.number_in(0, kMax, measured);
    if (x == 0) v.fail(measured);
    return x;
  };
  auto num = [](double x) { return nlohmann::json(x).dump(); };
  TimingSummary t;
  if (const auto v = summary.find("median")) t.median = positive(*v);
  if (const auto v = summary.find("min")) t.min = positive(*v);
  if (const auto v = summary.find("max")) t.max = positive(*v);
  if (const auto v = summary.find("stdev")) v->number_in(0, kMax, "a value >= 0 and at most 1e12");
  if (const auto v = summary.find("values")) {
    for (const auto& x : v->items()) t.values.push_back(positive(x));
  }
  std::optional<double> mean;
  if (const auto v = summary.find("mean")) mean = positive(*v);
  if (t.min && t.max) {
    if (*t.min > *t.max) summary["max"].fail("a value >= min (" + num(*t.min) + ")");
    // The mean is computed, so it may stray from [min, max] by rounding; the others are copies.
    const double slack = 1e-9 * *t.max;
    const std::string range =
        "a value within [min, max] = [" + num(*t.min) + ", " + num(*t.max) + "]";
    if (t.median && (*t.median < *t.min || *t.median > *t.max)) summary["median"].fail(range);
    if (mean && (*mean < *t.min - slack || *mean > *t.max + slack)) summary["mean"].fail(range);
    const auto values = summary.find("values");
    for (size_t i = 0; i < t.values.size(); ++i) {
      if (t.values[i] < *t.min || t.values[i] > *t.max) values->items()[i].fail(range);
    }
  }
  return t;
}

TimingSummary row_timing(const JsonAt& run, const std::string& metric) {
  const JsonAt timings = run["timings"];
  const auto summary = timings.find(metric);
  // gengraph writes null for a metric with no values (decode_ms_per_token of a single step).
  if (!summary || summary->json().is_null()) return {};
  return read_timing(*summary);
}

bool same_file(const std::filesystem::path& a, const std::filesystem::path& b) {
  std::error_code ec;
  if (std::filesystem::exists(a, ec) && std::filesystem::exists(b, ec)) {
    const bool same = std::filesystem::equivalent(a, b, ec);
    if (!ec) return same;
  }
  auto normal = [](const std::filesystem::path& p) {
    std::error_code e;
    std::filesystem::path c = std::filesystem::weakly_canonical(p, e);
    if (e) c = std::filesystem::absolute(p, e).lexically_normal();
    return c;
  };
  return normal(a) == normal(b);
}

nlohmann::json read_results(const std::string& path) {
  nlohmann::json doc = read_json_file(path);
  const JsonAt d(doc, results_source(path));
  d.object("a JSON object");
  d["schema_version"].integer_in(1, 1, "1 (the results schema this gengraph reads)");
  const bool sweep = d.has("points");
  const JsonAt rows = d[sweep ? "points" : "runs"];
  if (!rows.exists() || !rows.json().is_array()) {
    rows.fail(sweep ? "an array of points, each with 'runs'"
                    : "an array of runs (or 'points', each with 'runs')");
  }
  return doc;
}

}  // namespace gengraph

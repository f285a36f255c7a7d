#include "experiments/results.h"

#include <unistd.h>

#include <cmath>
#include <ctime>
#include <fstream>

#include "experiments/process.h"
#include "framework/decoding/generator.h"

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

nlohmann::json outputs_json(const GenerationResult& r,
                            const std::vector<std::vector<int64_t>>& prompts) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < r.outputs.size(); ++i) {
    nlohmann::json seqs = nlohmann::json::array();
    for (const auto& h : r.outputs[i]) {
      nlohmann::json s{{"tokens", h.tokens}};
      if (h.score) s["score"] = *h.score;
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
  for (std::filesystem::path p = path.parent_path(); !p.empty(); p = p.parent_path()) {
    std::error_code ec;
    const auto st = std::filesystem::status(p, ec);
    if (std::filesystem::exists(st)) {
      if (!std::filesystem::is_directory(st)) {
        throw Error(what + " '" + path.string() + "': '" + p.string() + "' is not a folder");
      }
      break;
    }
    if (p == p.parent_path()) break;
  }
  if (std::filesystem::is_directory(path))
    throw Error(what + " '" + path.string() + "' is a folder, expected a file");
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
      const std::vector<std::string> argv = {python_for_tools().string(),
                                             (source_root() / "tools" / "plot_results.py").string(),
                                             tmp.string(), plot_tmp.string()};
      const int rc = run_command(argv);
      if (rc != 0 || !std::filesystem::exists(plot_tmp)) {
        throw Error("plot: tools/plot_results.py failed for '" + plot.string() + "' (exit " +
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
  auto scan = [&](const nlohmann::json& point, const std::string& where) {
    for (const auto& r : point.at("runs")) {
      if (r.contains("error")) out.push_back(r.at("label").get<std::string>() + where);
    }
  };
  if (doc.contains("points")) {
    for (const auto& p : doc.at("points"))
      scan(p, " [" + join(p.at("point").get<std::vector<std::string>>(), ", ") + "]");
  } else {
    scan(doc, "");
  }
  return out;
}

nlohmann::json read_results(const std::string& path) {
  nlohmann::json doc = read_json_file(path);
  const std::string what = "'" + path + "' is not a gengraph results file: ";
  if (!doc.is_object()) throw Error(what + "expected a JSON object");
  if (doc.value("schema_version", 0) != 1) {
    throw Error(
        what + "expected schema_version 1, found " +
        (doc.contains("schema_version") ? doc["schema_version"].dump() : std::string("none")));
  }
  const bool sweep = doc.contains("points");
  if (!(sweep ? doc["points"].is_array() : doc.contains("runs") && doc["runs"].is_array())) {
    throw Error(what + "expected a 'runs' list (or 'points', each with 'runs')");
  }
  return doc;
}

}  // namespace gengraph

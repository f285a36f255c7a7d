#include "experiments/results/compare.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include "experiments/results/load_table.h"
#include "experiments/results/results.h"
#include "experiments/results/table.h"
#include "framework/util/error.h"
#include "framework/util/strings.h"

namespace gengraph {

const std::vector<std::string> kCompareMetrics = {"total_ms", "decode_ms_per_token",
                                                  "time_to_first_token_ms", "tokens_per_second"};

namespace {

using Json = nlohmann::json;

struct Point {
  std::string name;  // "" for a file without a sweep
  JsonAt doc;
};

// Each point of a results file; the file itself as one unnamed point when it has no sweep. Every
// point must have its 'runs' list.
std::vector<Point> points_of(const JsonAt& doc) {
  std::vector<Point> out;
  if (!doc.has("points")) {
    doc["runs"].items();
    out.push_back({"", doc});
    return out;
  }
  for (const auto& p : doc["points"].items()) {
    p["runs"].items();
    out.push_back({point_label(p), p});
  }
  return out;
}

// The runs of a point with their labels (every run an object with a string label).
std::vector<std::pair<std::string, JsonAt>> labelled_runs(const JsonAt& point) {
  std::vector<std::pair<std::string, JsonAt>> out;
  for (const auto& r : point["runs"].items()) out.emplace_back(r["label"].string(), r);
  return out;
}

std::string fmt(double x) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(x >= 1000 ? 0 : 2) << x;
  return s.str();
}

std::string spread(const std::vector<double>& v) {
  if (v.empty()) return "-";
  std::vector<double> s = v;
  std::sort(s.begin(), s.end());
  std::string out = fmt(median_of_sorted(s));
  if (s.size() > 1) out += " [" + fmt(s.front()) + "-" + fmt(s.back()) + "]";
  return out + " (" + std::to_string(s.size()) + ")";
}

// A setting for display ("(none)" when absent): a string as it is, anything else as JSON, cut to
// 90 bytes on a character boundary (the comparison stays valid UTF-8).
std::string field(const JsonAt& doc, const std::string& path) {
  std::optional<JsonAt> j = doc;
  std::stringstream ss(path);
  for (std::string key; std::getline(ss, key, '.');) {
    j = j->find(key);
    if (!j) return "(none)";
  }
  return shorten_utf8(j->text(), 90);
}

// Only the terminal's copy is escaped; the comparison document keeps the text as it was.
std::string shown(const Json& s) { return terminal_text(s.get<std::string>()); }

}  // namespace

Json compare_documents(const Json& before, const std::string& before_name, const Json& after,
                       const std::string& after_name, const std::string& metric) {
  if (std::find(kCompareMetrics.begin(), kCompareMetrics.end(), metric) == kCompareMetrics.end()) {
    throw Error("compare: unknown metric '" + metric + "'; expected one of " +
                join(kCompareMetrics, ", "));
  }
  // Two load experiments compare column by column (load_table.h); one beside the other kind is
  // refused, naming which is which.
  if (is_load_document(before) && is_load_document(after))
    return compare_load_documents(before, before_name, after, after_name);
  if (is_load_document(before) != is_load_document(after)) {
    const std::string& load = is_load_document(before) ? before_name : after_name;
    const std::string& other = is_load_document(before) ? after_name : before_name;
    throw Error("compare: '" + load + "' holds results under load (kind: load) and '" + other +
                "' does not; compare two files of one kind");
  }
  const JsonAt before_doc(before, results_source(before_name)),
      after_doc(after, results_source(after_name));
  const auto bp = points_of(before_doc), ap = points_of(after_doc);
  const bool higher_is_better = metric == "tokens_per_second";
  // The settings are read from the first point (a sweep of no points has none: the file's own).
  const JsonAt& b0 = bp.empty() ? before_doc : bp.front().doc;
  const JsonAt& a0 = ap.empty() ? after_doc : ap.front().doc;
  auto side = [](const JsonAt& doc, const JsonAt& first, const std::string& name) {
    return Json{{"file", name},
                {"experiment", field(doc, "experiment")},
                {"commit", field(first, "environment.gengraph_commit")},
                {"created", field(doc, "created")}};
  };
  Json out = {{"schema", "gengraph-compare-1"},
              {"metric", metric},
              {"higher_is_better", higher_is_better},
              {"before", side(before_doc, b0, before_name)},
              {"after", side(after_doc, a0, after_name)},
              {"settings_that_differ", Json::array()},
              {"points", Json::array()}};
  // Settings that make two files measure different things; listed, not refused: comparing two
  // devices or dtypes can be the point.
  const std::vector<std::string> keys = {"experiment",
                                         "model.source",
                                         "model.parameters",
                                         "environment.device",
                                         "environment.dtype",
                                         "environment.threads",
                                         "environment.torch_version",
                                         "generation",
                                         "inputs",
                                         "run.repeats",
                                         "run.warmup"};
  for (const auto& k : keys) {
    const std::string x = field(k == "experiment" ? before_doc : b0, k),
                      y = field(k == "experiment" ? after_doc : a0, k);
    if (x != y) out["settings_that_differ"].push_back({{"key", k}, {"before", x}, {"after", y}});
  }

  // Points and rows are matched through maps (first occurrence wins), so a file of many rows
  // compares in n log n, not n^2.
  std::vector<std::string> names;
  std::map<std::string, const JsonAt*> b_points, a_points;
  for (const auto& p : bp) {
    if (b_points.emplace(p.name, &p.doc).second) names.push_back(p.name);
  }
  for (const auto& p : ap) {
    if (a_points.emplace(p.name, &p.doc).second && !b_points.count(p.name)) names.push_back(p.name);
  }
  for (const auto& name : names) {
    const JsonAt* b = b_points.count(name) ? b_points[name] : nullptr;
    const JsonAt* a = a_points.count(name) ? a_points[name] : nullptr;
    Json point = {{"point", name}, {"rows", Json::array()}};
    if (!b || !a) {
      point["only_in"] = b ? "before" : "after";
      out["points"].push_back(point);
      continue;
    }
    // Rows in the order of BEFORE, then those only in AFTER; the first of a label counts.
    std::vector<std::string> labels;
    std::map<std::string, JsonAt> b_runs, a_runs;
    for (auto* runs : {&b_runs, &a_runs}) {
      for (const auto& [l, r] : labelled_runs(runs == &b_runs ? *b : *a)) {
        if (runs->emplace(l, r).second && (runs == &b_runs || !b_runs.count(l)))
          labels.push_back(l);
      }
    }
    for (const auto& l : labels) {
      const auto ib = b_runs.find(l), ia = a_runs.find(l);
      const JsonAt* rb = ib == b_runs.end() ? nullptr : &ib->second;
      const JsonAt* ra = ia == a_runs.end() ? nullptr : &ia->second;
      Json row = {{"label", l}};
      if (!rb || !ra) {
        row["status"] = rb ? "only in before" : "only in after";
      } else if (rb->has("error") || ra->has("error")) {
        row["status"] = std::string("failed in ") +
                        (rb->has("error") ? (ra->has("error") ? "both" : "before") : "after");
      } else {
        const auto vb = row_timing(*rb, metric).values, va = row_timing(*ra, metric).values;
        row["before"] = vb;
        row["after"] = va;
        if (vb.empty() || va.empty()) {
          row["status"] =
              "no " + metric + " on " +
              (vb.empty() ? (va.empty() ? "either side" : "the before side") : "the after side");
        } else {
          const Speedup sp = higher_is_better ? speedup(va, vb) : speedup(vb, va);
          row["status"] = "compared";
          row["speedup"] = sp.estimate;
          if (sp.has_interval) {
            row["low"] = sp.low;
            row["high"] = sp.high;
            row["confidence"] = sp.confidence;
          }
          row["verdict"] = !sp.has_interval ? "too few repeats for an interval"
                           : sp.low > 1     ? "faster"
                           : sp.high < 1    ? "slower"
                                            : "no clear change";
        }
      }
      point["rows"].push_back(row);
    }
    out["points"].push_back(point);
  }
  return out;
}

std::string format_comparison(const Json& c) {
  if (c.value("schema", "") == "gengraph-load-compare-1") return format_load_comparison(c);
  std::ostringstream o;
  for (const char* side : {"before", "after"}) {
    const Json& s = c.at(side);
    o << std::left << std::setw(8) << std::string(side) + ":" << shown(s.at("file"))
      << " (experiment " << shown(s.at("experiment")) << ", commit " << shown(s.at("commit"))
      << ", " << shown(s.at("created")) << ")\n";
  }
  if (!c.at("settings_that_differ").empty()) {
    o << "settings that differ (the rows may not measure the same thing):\n";
    for (const auto& d : c.at("settings_that_differ")) {
      o << "  " << shown(d.at("key")) << ": " << shown(d.at("before")) << "  ->  "
        << shown(d.at("after")) << "\n";
    }
  }
  const std::string metric = c.at("metric").get<std::string>();
  o << "'speed-up' = before / after of " << metric
    << (c.at("higher_is_better").get<bool>() ? " inverted (after / before: higher is better)" : "")
    << ", > 1: after is faster. Hodges-Lehmann estimate over all before x after pairs of repeats, "
       "with the"
       " distribution-free (Moses) interval; 'faster'/'slower' when the interval excludes 1. The "
       "interval"
       " covers the spread of repeats within each file, not drift of the machine between the two "
       "runs: a row"
       " whose code did not change (a transformers peer, say) shows that drift.\n";
  if (c.at("points").empty()) o << "\nno sweep point in either file: nothing to compare\n";
  for (const auto& p : c.at("points")) {
    const std::string name = shown(p.at("point"));
    if (!name.empty()) o << "\n[" << name << "]\n";
    if (p.contains("only_in")) {
      o << (name.empty() ? "\n[the file without a sweep]\n" : "") << "  only in "
        << p.at("only_in").get<std::string>() << "\n";
      continue;
    }
    o << std::left << std::setw(20) << "row" << std::setw(30) << "before " + metric << std::setw(30)
      << "after " + metric << std::setw(22) << "speed-up" << std::setw(12) << "confidence"
      << "verdict\n";
    for (const auto& r : p.at("rows")) {
      o << std::left << std::setw(20) << shown(r.at("label"));
      const std::string status = r.at("status").get<std::string>();
      if (!r.contains("before")) {
        o << status << "\n";
        continue;
      }
      const auto vb = r.at("before").get<std::vector<double>>(),
                 va = r.at("after").get<std::vector<double>>();
      o << std::setw(30) << spread(vb) << std::setw(30) << spread(va);
      if (status != "compared") {
        o << status << "\n";
        continue;
      }
      std::ostringstream cellv, conf;
      cellv << std::fixed << std::setprecision(2) << r.at("speedup").get<double>() << "x";
      if (r.contains("low")) {
        cellv << " [" << r.at("low").get<double>() << "-" << r.at("high").get<double>() << "]";
        conf << std::fixed << std::setprecision(1) << 100 * r.at("confidence").get<double>() << "%";
      } else {
        conf << "-";
      }
      o << std::setw(22) << cellv.str() << std::setw(12) << conf.str()
        << r.at("verdict").get<std::string>() << "\n";
    }
  }
  return o.str();
}

std::string compare_results(const Json& before, const std::string& before_name, const Json& after,
                            const std::string& after_name, const std::string& metric) {
  return format_comparison(compare_documents(before, before_name, after, after_name, metric));
}

}  // namespace gengraph

#include "experiments/compare.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "framework/util/error.h"

namespace gengraph {

const std::vector<std::string> kCompareMetrics = {"total_ms", "decode_ms_per_token",
                                                  "time_to_first_token_ms", "tokens_per_second"};

namespace {

using Json = nlohmann::json;

// (point name, point document) for each point; one unnamed point for a file without a sweep.
std::vector<std::pair<std::string, const Json*>> points_of(const Json& doc,
                                                           const std::string& name) {
  const std::string what = "'" + name + "' is not a gengraph results file: ";
  if (!doc.is_object()) throw Error(what + "expected a JSON object");
  std::vector<std::pair<std::string, const Json*>> out;
  if (!doc.contains("points")) {
    if (!doc.contains("runs") || !doc["runs"].is_array())
      throw Error(what + "expected a 'runs' list (or 'points')");
    out.emplace_back("", &doc);
    return out;
  }
  if (!doc["points"].is_array()) throw Error(what + "expected 'points' to be a list");
  for (size_t i = 0; i < doc["points"].size(); ++i) {
    const Json& p = doc["points"][i];
    if (!p.is_object() || !p.contains("runs") || !p["runs"].is_array()) {
      throw Error(what + "points[" + std::to_string(i) + "] has no 'runs' list");
    }
    std::string label;
    if (p.contains("point") && p["point"].is_array()) {
      for (const auto& part : p["point"])
        label += (label.empty() ? "" : ", ") +
                 (part.is_string() ? part.get<std::string>() : part.dump());
    }
    out.emplace_back(label, &p);
  }
  return out;
}

// Each label's first run in a point.
std::map<std::string, const Json*> runs_by_label(const Json& point) {
  std::map<std::string, const Json*> out;
  for (const auto& r : point["runs"]) {
    if (r.is_object()) out.emplace(r.value("label", std::string()), &r);
  }
  return out;
}

std::vector<double> values_of(const Json& run, const std::string& metric) {
  const Json t = run.value("timings", Json::object());
  if (!t.is_object() || !t.contains(metric) || !t[metric].is_object() ||
      !t[metric].contains("values"))
    return {};
  std::vector<double> v;
  for (const auto& x : t[metric]["values"]) {
    if (x.is_number()) v.push_back(x.get<double>());
  }
  return v;
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

std::string field(const Json& doc, const std::string& path) {
  const Json* j = &doc;
  std::stringstream ss(path);
  for (std::string key; std::getline(ss, key, '.');) {
    if (!j->is_object() || !j->contains(key)) return "(none)";
    j = &(*j)[key];
  }
  std::string s = j->is_string() ? j->get<std::string>() : j->dump();
  if (s.size() > 90) s = s.substr(0, 87) + "...";
  return s;
}

}  // namespace

Json compare_documents(const Json& before, const std::string& before_name, const Json& after,
                       const std::string& after_name, const std::string& metric) {
  if (std::find(kCompareMetrics.begin(), kCompareMetrics.end(), metric) == kCompareMetrics.end()) {
    throw Error("compare: unknown metric '" + metric + "'; expected one of " +
                join(kCompareMetrics, ", "));
  }
  const auto bp = points_of(before, before_name), ap = points_of(after, after_name);
  const bool higher_is_better = metric == "tokens_per_second";
  const Json& b0 = *bp.front().second;
  const Json& a0 = *ap.front().second;
  auto side = [](const Json& doc, const Json& first, const std::string& name) {
    return Json{{"file", name},
                {"experiment", field(doc, "experiment")},
                {"commit", field(first, "environment.gengraph_commit")},
                {"created", field(doc, "created")}};
  };
  Json out = {{"schema", "gengraph-compare-1"},
              {"metric", metric},
              {"higher_is_better", higher_is_better},
              {"before", side(before, b0, before_name)},
              {"after", side(after, a0, after_name)},
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
    const std::string x = field(k == "experiment" ? before : b0, k),
                      y = field(k == "experiment" ? after : a0, k);
    if (x != y) out["settings_that_differ"].push_back({{"key", k}, {"before", x}, {"after", y}});
  }

  // Points and rows are matched through maps (first occurrence wins), so a file of many rows
  // compares in n log n, not n^2.
  std::vector<std::string> names;
  std::map<std::string, const Json*> b_points, a_points;
  for (const auto& p : bp) {
    if (b_points.emplace(p.first, p.second).second) names.push_back(p.first);
  }
  for (const auto& p : ap) {
    if (a_points.emplace(p.first, p.second).second && !b_points.count(p.first))
      names.push_back(p.first);
  }
  for (const auto& name : names) {
    const Json* b = b_points.count(name) ? b_points[name] : nullptr;
    const Json* a = a_points.count(name) ? a_points[name] : nullptr;
    Json point = {{"point", name}, {"rows", Json::array()}};
    if (!b || !a) {
      point["only_in"] = b ? "before" : "after";
      out["points"].push_back(point);
      continue;
    }
    std::vector<std::string> labels;
    std::map<std::string, const Json*> b_runs = runs_by_label(*b), a_runs = runs_by_label(*a);
    for (const auto* doc : {b, a}) {
      std::set<std::string> listed(labels.begin(), labels.end());
      for (const auto& r : (*doc)["runs"]) {
        const std::string l = r.is_object() ? r.value("label", std::string()) : std::string();
        if (!l.empty() && listed.insert(l).second) labels.push_back(l);
      }
    }
    for (const auto& l : labels) {
      const Json* rb = b_runs.count(l) ? b_runs[l] : nullptr;
      const Json* ra = a_runs.count(l) ? a_runs[l] : nullptr;
      Json row = {{"label", l}};
      if (!rb || !ra) {
        row["status"] = rb ? "only in before" : "only in after";
      } else if (rb->contains("error") || ra->contains("error")) {
        row["status"] =
            std::string("failed in ") +
            (rb->contains("error") ? (ra->contains("error") ? "both" : "before") : "after");
      } else {
        const auto vb = values_of(*rb, metric), va = values_of(*ra, metric);
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
  std::ostringstream o;
  for (const char* side : {"before", "after"}) {
    const Json& s = c.at(side);
    o << std::left << std::setw(8) << std::string(side) + ":" << s.at("file").get<std::string>()
      << " (experiment " << s.at("experiment").get<std::string>() << ", commit "
      << s.at("commit").get<std::string>() << ", " << s.at("created").get<std::string>() << ")\n";
  }
  if (!c.at("settings_that_differ").empty()) {
    o << "settings that differ (the rows may not measure the same thing):\n";
    for (const auto& d : c.at("settings_that_differ")) {
      o << "  " << d.at("key").get<std::string>() << ": " << d.at("before").get<std::string>()
        << "  ->  " << d.at("after").get<std::string>() << "\n";
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
  for (const auto& p : c.at("points")) {
    const std::string name = p.at("point").get<std::string>();
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
      o << std::left << std::setw(20) << r.at("label").get<std::string>();
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

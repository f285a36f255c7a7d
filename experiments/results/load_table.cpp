#include "experiments/results/load_table.h"

#include <algorithm>
#include <iomanip>
#include <map>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "experiments/results/results.h"
#include "experiments/results/terminal_text.h"
#include "framework/util/error.h"

namespace gengraph {
namespace {

using Json = nlohmann::json;

// A column of the table: its heading, where a row holds it, and for the comparison whether a
// larger value is better (throughput) or worse (latency); `compared` columns get ratios.
struct Column {
  const char* heading;
  const char* path;  // dotted, inside a row
  int width;
  int precision;
  bool higher_is_better;
  const char* compared;  // its heading in the comparison; null: not compared
};

const std::vector<Column>& columns() {
  static const std::vector<Column> kColumns = {
      {"done", "completed", 6, 0, true, nullptr},
      {"wall s", "wall_s", 9, 2, false, nullptr},
      {"req/s", "requests_per_s", 9, 2, true, "req/s"},
      {"tok/s", "output_tokens_per_s", 10, 1, true, "tok/s"},
      {"TTFT p50", "ttft_ms.p50", 10, 1, false, "TTFT p50"},
      {"p90", "ttft_ms.p90", 9, 1, false, nullptr},
      {"p99", "ttft_ms.p99", 9, 1, false, "TTFT p99"},
      {"TPOT p50", "tpot_ms.p50", 10, 2, false, "TPOT p50"},
      {"p90", "tpot_ms.p90", 9, 2, false, nullptr},
      {"p99", "tpot_ms.p99", 9, 2, false, "TPOT p99"},
      {"queue p50", "queue_ms.p50", 11, 1, false, "queue p50"},
      {"p99", "queue_ms.p99", 9, 1, false, nullptr},
      {"blocks mean", "kv_blocks.mean_in_use", 13, 1, false, nullptr},
      {"peak", "kv_blocks.peak_in_use", 7, 0, false, nullptr},
      {"prefix hits", "prefix_hits", 13, 0, true, nullptr},
      {"reused", "reused_tokens", 9, 0, true, nullptr},
      {"preempt", "preemptions", 8, 0, false, nullptr}};
  return kColumns;
}

// The number at a dotted path of a row; none when a part is missing or null (a latency of a row
// where nothing completed, the blocks of an Engine-driven system).
std::optional<double> value_at(const JsonAt& row, const std::string& path) {
  std::optional<JsonAt> j = row;
  std::stringstream ss(path);
  for (std::string key; std::getline(ss, key, '.');) {
    if (!j->json().is_object()) return std::nullopt;
    j = j->find(key);
    if (!j || j->json().is_null()) return std::nullopt;
  }
  return j->number_in(0, 1e300, "a number >= 0");
}

std::string fixed(double x, int precision) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(precision) << x;
  return s.str();
}

// A rate as the file writes it: a number (requests per second) or "all_at_once".
std::string rate_text(const JsonAt& row) {
  const JsonAt rate = row["rate"];
  if (rate.json().is_string())
    return rate.string() == "all_at_once" ? "all" : terminal_text(rate.string());
  std::ostringstream s;
  s << rate.number_in(0, 1e12, "requests per second or \"all_at_once\"") << "/s";
  return s.str();
}

int label_width(const std::vector<JsonAt>& rows) {
  int w = 16;
  for (const auto& r : rows)
    w = std::max(w, static_cast<int>(terminal_text(r["label"].string()).size()) + 2);
  return w;
}

Json side(const JsonAt& doc, const std::string& name) {
  auto text = [&](const JsonAt& d, const char* key) {
    const auto v = d.find(key);
    return v ? shorten_utf8(v->text(), 90) : std::string("(none)");
  };
  const auto env = doc.find("environment");
  return {{"file", name},
          {"experiment", text(doc, "experiment")},
          {"commit", env ? text(*env, "gengraph_commit") : "(none)"},
          {"created", text(doc, "created")}};
}

}  // namespace

bool is_load_document(const Json& doc) {
  if (!doc.is_object()) return false;
  const auto it = doc.find("kind");
  return it != doc.end() && it->is_string() && it->get<std::string>() == "load";
}

std::string format_load_table(const JsonAt& doc) {
  std::ostringstream o;
  o << "experiment " << terminal_text(doc["experiment"].string()) << " (under load)\n";
  if (const auto model = doc.find("model"))
    o << "model " << terminal_text(model->string_or("source", "?"));
  if (const auto env = doc.find("environment")) {
    o << " on " << terminal_text(env->string_or("device", "?")) << ", "
      << terminal_text(env->string_or("dtype", "?")) << ", " << env->integer_or("threads", 0)
      << " threads, host " << terminal_text(env->string_or("hostname", "?"));
  }
  o << "\n";
  if (const auto load = doc.find("load")) {
    o << "arrival " << terminal_text(load->string_or("arrival", "?")) << ", "
      << load->integer_or("requests", 0) << " requests";
    if (const auto lengths = load->find("output_lengths"); lengths && lengths->json().is_object()) {
      o << ", " << lengths->integer_or("min", 0) << "-" << lengths->integer_or("max", 0)
        << " new tokens each";
    }
    if (const auto sp = load->find("shared_prefix"); sp && sp->integer_or("length", 0) > 0) {
      o << ", shared prefix " << sp->integer_or("length", 0) << " tokens on "
        << sp->integer_or("requests", 0) << " of them";
    }
    o << "\n";
  }
  o << "times in ms: TTFT from arrival to the first token, TPOT per output token after the first,"
       " queue from arrival to the start of its prefill\n";
  const std::vector<JsonAt> rows = doc["runs"].items();
  const int lw = label_width(rows);
  o << std::left << std::setw(lw) << "system" << std::setw(9) << "rate";
  for (const auto& c : columns()) o << std::right << std::setw(c.width) << c.heading;
  o << "\n";
  for (const auto& r : rows) {
    o << std::left << std::setw(lw) << terminal_text(r["label"].string()) << std::setw(9)
      << rate_text(r);
    if (r.has("error")) {
      o << "FAILED: " << terminal_text(r["error"].text()) << "\n";
      continue;
    }
    for (const auto& c : columns()) {
      const std::optional<double> v = value_at(r, c.path);
      o << std::right << std::setw(c.width) << (v ? fixed(*v, c.precision) : "-");
    }
    const int64_t cancelled = r.integer_or("cancelled", 0), failed = r.integer_or("failed", 0);
    if (cancelled > 0) o << "  " << cancelled << " cancelled at the time limit";
    if (failed > 0) o << "  " << failed << " failed";
    o << "\n";
  }
  return o.str();
}

Json compare_load_documents(const Json& before, const std::string& before_name, const Json& after,
                            const std::string& after_name) {
  const JsonAt b(before, results_source(before_name)), a(after, results_source(after_name));
  Json out = {{"schema", "gengraph-load-compare-1"},
              {"before", side(b, before_name)},
              {"after", side(a, after_name)},
              {"settings_that_differ", Json::array()},
              {"rows", Json::array()}};
  // Per key of each section (model.parameters, load.requests, ...), leaving out what differs
  // between two runs of one experiment by nature, not by setting.
  for (const char* section : {"model", "environment", "backend", "generation", "load"}) {
    const auto sb = b.find(section), sa = a.find(section);
    const Json jb = sb ? sb->json() : Json(), ja = sa ? sa->json() : Json();
    std::vector<std::pair<std::string, std::pair<Json, Json>>> diffs;
    if (jb.is_object() && ja.is_object()) {
      Json keys = jb;
      keys.update(ja);
      for (auto it = keys.begin(); it != keys.end(); ++it) {
        const std::string k = it.key();
        if (k == "load_seconds" || k == "gengraph_commit" || k == "hostname") continue;
        const Json x = jb.contains(k) ? jb.at(k) : Json(), y = ja.contains(k) ? ja.at(k) : Json();
        if (x != y) diffs.push_back({std::string(section) + "." + k, {x, y}});
      }
    } else if (jb != ja) {
      diffs.push_back({section, {jb, ja}});
    }
    for (const auto& [key, values] : diffs) {
      auto text = [](const Json& j) {
        return j.is_null() ? std::string("(none)") : shorten_utf8(j.dump(), 120);
      };
      out["settings_that_differ"].push_back(
          {{"key", key}, {"before", text(values.first)}, {"after", text(values.second)}});
    }
  }
  // Rows matched by label and rate, in the order of BEFORE, then those only in AFTER.
  auto key_of = [](const JsonAt& r) { return r["label"].string() + "\x1f" + r["rate"].text(); };
  std::vector<std::pair<std::string, JsonAt>> order;
  std::map<std::string, JsonAt> b_rows, a_rows;
  for (const auto& r : b["runs"].items()) {
    if (b_rows.emplace(key_of(r), r).second) order.emplace_back(key_of(r), r);
  }
  for (const auto& r : a["runs"].items()) {
    if (a_rows.emplace(key_of(r), r).second && !b_rows.count(key_of(r)))
      order.emplace_back(key_of(r), r);
  }
  for (const auto& [key, any] : order) {
    Json row = {{"label", any["label"].string()}, {"rate", rate_text(any)}};
    const auto ib = b_rows.find(key), ia = a_rows.find(key);
    if (ib == b_rows.end() || ia == a_rows.end()) {
      row["status"] = ib == b_rows.end() ? "only in after" : "only in before";
    } else if (ib->second.has("error") || ia->second.has("error")) {
      row["status"] = ib->second.has("error") ? "failed in before" : "failed in after";
    } else {
      row["status"] = "compared";
      row["columns"] = Json::array();
      for (const auto& c : columns()) {
        if (!c.compared) continue;
        const auto vb = value_at(ib->second, c.path), va = value_at(ia->second, c.path);
        Json col = {{"column", c.path}, {"higher_is_better", c.higher_is_better}};
        col["before"] = vb ? Json(*vb) : Json(nullptr);
        col["after"] = va ? Json(*va) : Json(nullptr);
        col["ratio"] = vb && va && *vb > 0 ? Json(*va / *vb) : Json(nullptr);
        row["columns"].push_back(col);
      }
    }
    out["rows"].push_back(row);
  }
  return out;
}

std::string format_load_comparison(const Json& c) {
  std::ostringstream o;
  for (const char* s : {"before", "after"}) {
    const Json& d = c.at(s);
    o << std::left << std::setw(8) << std::string(s) + ":"
      << terminal_text(d.at("file").get<std::string>()) << " (experiment "
      << terminal_text(d.at("experiment").get<std::string>()) << ", commit "
      << terminal_text(d.at("commit").get<std::string>()) << ", "
      << terminal_text(d.at("created").get<std::string>()) << ")\n";
  }
  if (!c.at("settings_that_differ").empty()) {
    o << "settings that differ (the rows may not measure the same thing):\n";
    for (const auto& d : c.at("settings_that_differ")) {
      o << "  " << terminal_text(d.at("key").get<std::string>()) << ": "
        << terminal_text(d.at("before").get<std::string>()) << "  ->  "
        << terminal_text(d.at("after").get<std::string>()) << "\n";
    }
  }
  o << "load results: each column after / before (rows by system label and rate); req/s and "
       "tok/s: > 1 is more throughput; latencies: < 1 is faster. One replay per file: no "
       "interval.\n";
  int lw = 16;
  for (const auto& r : c.at("rows"))
    lw = std::max(lw, static_cast<int>(terminal_text(r.at("label").get<std::string>()).size()) + 2);
  o << std::left << std::setw(lw) << "system" << std::setw(9) << "rate";
  for (const auto& col : columns()) {
    if (!col.compared) continue;
    o << std::right << std::setw(12) << col.compared;
  }
  o << "\n";
  for (const auto& r : c.at("rows")) {
    o << std::left << std::setw(lw) << terminal_text(r.at("label").get<std::string>())
      << std::setw(9) << terminal_text(r.at("rate").get<std::string>());
    if (!r.contains("columns")) {
      o << r.at("status").get<std::string>() << "\n";
      continue;
    }
    for (const auto& col : r.at("columns")) {
      const Json& ratio = col.at("ratio");
      o << std::right << std::setw(12)
        << (ratio.is_number() ? fixed(ratio.get<double>(), 2) + "x" : std::string("-"));
    }
    o << "\n";
  }
  return o.str();
}

}  // namespace gengraph

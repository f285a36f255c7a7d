#include "experiments/table.h"

#include <iomanip>
#include <sstream>

#include "experiments/results.h"
#include "experiments/statistics.h"
#include "framework/util/error.h"

namespace gengraph {
namespace {

std::string cell(const nlohmann::json& t, const char* key) {
  if (!t.contains(key) || !t.at(key).contains("median")) return "-";
  std::ostringstream s;
  const double m = t.at(key).at("median").get<double>();
  s << std::fixed << std::setprecision(m >= 1000 ? 0 : 2) << m;
  if (t.at(key).at("values").size() > 1) {
    s << " [" << t.at(key).at("min").get<double>() << "-" << t.at(key).at("max").get<double>()
      << "]";
  }
  return s.str();
}

// The "same tokens" cell: from the outputs both rows recorded (so files written when the flag
// still compared scores too read right), else the recorded flag; a score difference is shown.
std::string same_tokens_cell(const nlohmann::json& r, const nlohmann::json& first) {
  if (!r.contains("outputs") || !first.contains("outputs"))
    return r.value("tokens_match_first_row", true) ? "yes" : "NO";
  const OutputComparison c = compare_outputs(first.at("outputs"), r.at("outputs"));
  if (!c.same_tokens) return "NO";
  if (!c.max_score_difference || *c.max_score_difference == 0) return "yes";
  std::ostringstream s;
  s << "yes (scores +-" << std::scientific << std::setprecision(1) << *c.max_score_difference
    << ")";
  return s.str();
}

void point_table(std::ostringstream& o, const nlohmann::json& doc,
                 const std::string& baseline_label) {
  const auto& runs = doc.at("runs");
  if (runs.empty()) return;
  const nlohmann::json* base = &runs.at(0);
  for (const auto& r : runs) {
    if (r.at("label") == baseline_label && !r.contains("error"))
      base = &r;  // a failed peer divides nothing
  }
  o << std::left << std::setw(20) << "row" << std::setw(24) << "first token ms" << std::setw(24)
    << "decode ms/token" << std::setw(24) << "total ms" << std::setw(24) << "tokens/s"
    << std::setw(22) << "vs " + (*base).at("label").get<std::string>() << "same tokens\n";
  for (const auto& r : runs) {
    if (r.contains("error")) {
      o << std::left << std::setw(20) << r.at("label").get<std::string>()
        << "FAILED: " << r.at("error").get<std::string>() << "\n";
      continue;
    }
    // Recomputed from the values, so results files written before vs_baseline existed show it too.
    const nlohmann::json v =
        base->contains("error") ? nlohmann::json::object() : ratio_to_baseline(r, *base);
    std::ostringstream ratio;
    ratio << std::fixed << std::setprecision(2) << v.value("median", 0.0) << "x";
    if (v.contains("low") && &r != base)
      ratio << " [" << v.at("low").get<double>() << "-" << v.at("high").get<double>() << "]";
    o << std::left << std::setw(20) << r.at("label").get<std::string>() << std::setw(24)
      << cell(r.at("timings"), "time_to_first_token_ms") << std::setw(24)
      << cell(r.at("timings"), "decode_ms_per_token") << std::setw(24)
      << cell(r.at("timings"), "total_ms") << std::setw(24)
      << cell(r.at("timings"), "tokens_per_second") << std::setw(22) << ratio.str()
      << same_tokens_cell(r, runs.at(0)) << "\n";
    if (r.contains("bandwidth")) {
      // Results written before the read measurement existed carry only the copy fraction.
      const auto& bw = r.at("bandwidth");
      o << "    decode reads >= " << std::setprecision(1)
        << bw.at("bytes_per_decode_step").get<double>() / 1e6 << " MB/step: ";
      if (bw.contains("fraction_of_read_bandwidth"))
        o << 100 * bw.at("fraction_of_read_bandwidth").get<double>()
          << "% of the measured read (mv) bandwidth, ";
      o << 100 * bw.at("fraction_of_copy_bandwidth").get<double>() << "% of the copy bandwidth";
      // Files written before the reorder was counted have no bytes_moved_per_step.
      if (bw.contains("bytes_moved_per_step") && bw.at("bytes_moved_per_step").get<double>() >
                                                     bw.at("bytes_per_decode_step").get<double>())
        o << "; moved " << bw.at("bytes_moved_per_step").get<double>() / 1e6
          << " MB/step with the beam reorder";
      o << "\n";
    }
    // An AOTInductor package's cost: what building it took (this run, or as recorded when it was
    // built for an earlier one) and its size.
    if (r.contains("report") && r.at("report").contains("aoti_package_bytes")) {
      const auto& rep = r.at("report");
      auto num = [&](const char* k) { return rep.value(k, 0.0); };
      o << "    aoti package " << std::fixed << std::setprecision(1)
        << num("aoti_package_bytes") / 1e6 << " MB: export " << num("aoti_export_seconds")
        << " s + compile " << num("aoti_compile_seconds") << " s"
        << (num("aoti_built") > 0 ? " (built in this run)" : " (cached)") << ", load "
        << std::setprecision(2) << num("aoti_load_seconds") << " s"
        << (num("aoti_freezing") > 0 ? ", freezing" : "") << "\n";
    }
    // The decoding loop: the whole step on the device (framework/decoding/whole_step.h) or the
    // host loop, and why when a row asked for the whole step and did not get it.
    if (r.contains("loop") && r.at("loop").value("whole_step", "off") != "off") {
      const auto& l = r.at("loop");
      if (l.value("ran_whole_step", false)) {
        o << "    whole step on the device, "
          << (l.value("captured", false) ? "one CUDA graph" : "uncaptured") << ", done flag read "
          << l.value("flag_reads", int64_t{0}) << " times over " << l.value("steps_run", int64_t{0})
          << " steps\n";
      } else {
        o << "    host loop (whole step not possible: " << l.value("fallback", std::string())
          << ")\n";
      }
    }
    // The attention kernel LibTorch picks for gengraph's own decode step (at::SDPBackend).
    if (r.contains("report") && r.at("report").contains("sdpa_kernel")) {
      static const char* kNames[] = {"math", "flash", "memory-efficient", "cuDNN", "overrideable"};
      const double k = r.at("report").at("sdpa_kernel").get<double>();
      if (k >= 0 && k < 5) o << "    attention kernel: " << kNames[static_cast<int>(k)] << "\n";
    }
  }
}

void point_header(std::ostringstream& o, const nlohmann::json& doc) {
  o << "model " << doc.at("model").at("source").get<std::string>() << " ("
    << doc.at("model").at("model_type").get<std::string>() << ", "
    << doc.at("model").at("parameters").get<int64_t>() << " parameters), "
    << doc.at("environment").at("device").get<std::string>() << ", "
    << doc.at("environment").at("dtype").get<std::string>() << ", batch "
    << doc.at("inputs").at("batch_size").get<int64_t>() << ", "
    << doc.at("run").at("repeats").get<int64_t>() << " repeats (median [min-max])\n"
    << "'vs' = baseline total time / row total time: for rows timed in the same interleaved "
       "repeats, the median"
    << " of per-repeat ratios [its order-statistic interval, "
    << ratio_confidence_text(doc.at("run").at("repeats").get<int64_t>())
    << "]; for peers, the ratio of medians\n";
  if (doc.contains("bandwidth")) {
    const auto& bw = doc.at("bandwidth");
    o << "measured bandwidth: " << std::fixed << std::setprecision(1);
    if (bw.contains("read_bytes_per_second"))
      o << "read (mv) " << bw.at("read_bytes_per_second").get<double>() / 1e9 << " GB/s, ";
    o << "copy " << bw.at("copy_bytes_per_second").get<double>() / 1e9 << " GB/s\n";
  }
}

}  // namespace

std::string format_table(const nlohmann::json& doc) {
  std::ostringstream o;
  const std::string baseline = doc.value("baseline", "");
  o << "experiment " << doc.at("experiment").get<std::string>() << "\n";
  if (doc.contains("points")) {
    for (const auto& p : doc.at("points")) {
      o << "\n[" << join(p.at("point").get<std::vector<std::string>>(), ", ") << "] ";
      point_header(o, p);
      point_table(o, p, baseline);
    }
    if (doc.contains("missing_points")) {
      for (const auto& p : doc.at("missing_points")) {
        o << "\n[" << join(p.at("point").get<std::vector<std::string>>(), ", ")
          << "] NO RESULT: " << p.at("status").get<std::string>() << "\n";
      }
    }
    return o.str();
  }
  point_header(o, doc);
  point_table(o, doc, baseline);
  if (!doc.at("runs").empty()) {
    o << "generated tokens (" << doc.at("runs").at(0).at("label").get<std::string>() << "):\n";
    int shown = 0;
    for (const auto& in : doc.at("runs").at(0).at("outputs")) {
      if (++shown > 4) {
        o << "  ...\n";
        break;
      }
      for (const auto& s : in.at("sequences")) {
        o << "  input " << in.at("input").get<int64_t>() << ": " << s.at("tokens").dump();
        if (s.contains("score")) o << "  score " << s.at("score").get<double>();
        o << "\n";
        if (s.contains("text")) o << "    text: " << s.at("text").dump() << "\n";
      }
    }
  }
  return o.str();
}

}  // namespace gengraph

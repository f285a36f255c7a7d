#include "experiments/results/table.h"

#include <algorithm>
#include <cstdint>
#include <iomanip>
#include <optional>
#include <sstream>
#include <vector>

#include "experiments/results/load_table.h"
#include "experiments/results/results.h"
#include "experiments/results/statistics.h"

namespace gengraph {
namespace {

// A text longer than kLongestText characters shows its first kShownCharacters in the table; a
// token list longer than kLongestIds its first kShownIds.
constexpr size_t kLongestText = 80, kShownCharacters = 60, kLongestIds = 32, kShownIds = 16;

// A string field of the file, made safe for the terminal.
std::string shown(const JsonAt& v) { return terminal_text(v.string()); }

std::string cell(const TimingSummary& t) {
  if (!t.median) return "-";
  std::ostringstream s;
  s << std::fixed << std::setprecision(*t.median >= 1000 ? 0 : 2) << *t.median;
  if (t.values.size() > 1 && t.min && t.max) s << " [" << *t.min << "-" << *t.max << "]";
  return s.str();
}

// The "same tokens" cell: from the outputs both rows recorded (so files written when the flag
// still compared scores too read right), else the recorded flag; a score difference is shown.
// compare_outputs reads any shape without fault (another shape does not match).
std::string same_tokens_cell(const JsonAt& r, const JsonAt& first) {
  const auto outputs = r.find("outputs"), first_outputs = first.find("outputs");
  if (!outputs || !first_outputs)
    return r.boolean_or("tokens_match_first_row", true) ? "yes" : "NO";
  const OutputComparison c = compare_outputs(first_outputs->json(), outputs->json());
  if (!c.same_tokens) return "NO";
  if (!c.max_score_difference || *c.max_score_difference == 0) return "yes";
  std::ostringstream s;
  s << "yes (scores +-" << std::scientific << std::setprecision(1) << *c.max_score_difference
    << ")";
  return s.str();
}

// A non-negative number (bytes, fractions, seconds); JSON holds no NaN or infinity.
double amount(const JsonAt& v) { return v.number_in(0, 1e300, "a number >= 0"); }

void point_table(std::ostringstream& o, const JsonAt& doc, const std::string& baseline_label) {
  const std::vector<JsonAt> runs = doc["runs"].items();
  if (runs.empty()) return;
  const JsonAt* base = &runs.front();
  for (const auto& r : runs) {
    if (r["label"].string() == baseline_label && !r.has("error"))
      base = &r;  // a failed peer divides nothing
  }
  const std::vector<double> base_total =
      base->has("error") ? std::vector<double>() : row_timing(*base, "total_ms").values;
  // The label column fits the longest label, with two spaces before the next column.
  int label_w = 20;
  for (const auto& r : runs)
    label_w = std::max(label_w, static_cast<int>(shown(r["label"]).size()) + 2);
  o << std::left << std::setw(label_w) << "row" << std::setw(24) << "first token ms"
    << std::setw(24) << "decode ms/token" << std::setw(24) << "total ms" << std::setw(24)
    << "tokens/s" << std::setw(22) << "vs " + shown((*base)["label"]) << "same tokens\n";
  for (const auto& r : runs) {
    if (r.has("error")) {
      o << std::left << std::setw(label_w) << shown(r["label"])
        << "FAILED: " << terminal_text(r["error"].text()) << "\n";
      continue;
    }
    const TimingSummary total = row_timing(r, "total_ms");
    // Recomputed from the values, so results files written before vs_baseline existed show it too.
    const nlohmann::json v =
        base->has("error") ? nlohmann::json::object()
                           : ratio_to_baseline(total.values, unpaired_peer(r), base_total,
                                               unpaired_peer(*base), (*base)["label"].string());
    std::ostringstream ratio;
    ratio << std::fixed << std::setprecision(2) << v.value("median", 0.0) << "x";
    if (v.contains("low") && &r != base)
      ratio << " [" << v.at("low").get<double>() << "-" << v.at("high").get<double>() << "]";
    o << std::left << std::setw(label_w) << shown(r["label"]) << std::setw(24)
      << cell(row_timing(r, "time_to_first_token_ms")) << std::setw(24)
      << cell(row_timing(r, "decode_ms_per_token")) << std::setw(24) << cell(total) << std::setw(24)
      << cell(row_timing(r, "tokens_per_second")) << std::setw(22) << ratio.str()
      << same_tokens_cell(r, runs.front()) << "\n";
    // A row in a weight format of its own (`model:` in its backend entry).
    if (const auto w = r.find("weights")) {
      const auto model = doc.find("model");
      const auto model_weights = model ? model->find("weights") : std::nullopt;
      if (!model_weights || w->string() != model_weights->string())
        o << "    weights " << shown(*w) << "\n";
    }
    if (const auto bw = r.find("bandwidth")) {
      // Results written before the read measurement existed carry only the copy fraction.
      const double bytes = amount((*bw)["bytes_per_decode_step"]);
      o << "    decode reads >= " << std::setprecision(1) << bytes / 1e6 << " MB/step: ";
      if (const auto read = bw->find("fraction_of_read_bandwidth"))
        o << 100 * amount(*read) << "% of the measured read bandwidth, ";
      o << 100 * amount((*bw)["fraction_of_copy_bandwidth"]) << "% of the copy bandwidth";
      // Files written before the reorder was counted have no bytes_moved_per_step.
      if (const auto moved = bw->find("bytes_moved_per_step")) {
        if (amount(*moved) > bytes)
          o << "; moved " << amount(*moved) / 1e6 << " MB/step with the beam reorder";
      }
      o << "\n";
    }
    const auto report = r.find("report");
    // An AOTInductor package's cost: what building it took (this run, or as recorded when it was
    // built for an earlier one) and its size.
    if (report && report->has("aoti_package_bytes")) {
      auto num = [&](const char* k) {
        const auto x = report->find(k);
        return x ? amount(*x) : 0.0;
      };
      o << "    aoti package " << std::fixed << std::setprecision(1)
        << num("aoti_package_bytes") / 1e6 << " MB: export " << num("aoti_export_seconds")
        << " s + compile " << num("aoti_compile_seconds") << " s"
        << (num("aoti_built") > 0 ? " (built in this run)" : " (cached)") << ", load "
        << std::setprecision(2) << num("aoti_load_seconds") << " s"
        << (num("aoti_freezing") > 0 ? ", freezing" : "") << "\n";
    }
    // The decoding loop: the whole step on the device (framework/decoding/generator.h) or the
    // host loop, and why when a row asked for the whole step and did not get it.
    const auto loop = r.find("loop");
    if (loop && loop->string_or("whole_step", "off") != "off") {
      if (loop->boolean_or("ran_whole_step", false)) {
        o << "    whole step on the device, "
          << (loop->boolean_or("captured", false) ? "one CUDA graph" : "uncaptured")
          << ", done flag read " << loop->integer_or("flag_reads", 0) << " times over "
          << loop->integer_or("steps_run", 0) << " steps\n";
      } else {
        o << "    host loop (whole step not possible: "
          << terminal_text(loop->string_or("fallback", "")) << ")\n";
      }
    }
    // Speculative decoding: how many candidates the verify forwards kept.
    if (const auto spec = r.find("speculation")) {
      o << "    speculative: " << spec->integer_or("candidates_accepted", 0) << " of "
        << spec->integer_or("candidates_proposed", 0) << " candidates kept (" << std::fixed
        << std::setprecision(0) << 100 * amount((*spec)["acceptance_rate"]) << "%), "
        << std::setprecision(2) << amount((*spec)["tokens_per_verify"])
        << " tokens per verify forward over " << spec->integer_or("verify_steps", 0) << "\n";
    }
    // The attention kernel of gengraph's own decode step: LibTorch's (at::SDPBackend's numbers),
    // or 5, gengraph's decode kernel (CausalLM::kGengraphDecodeAttention).
    if (report && report->has("sdpa_kernel")) {
      static const char* kNames[] = {"math",  "flash",        "memory-efficient",
                                     "cuDNN", "overrideable", "gengraph decode"};
      const double k = (*report)["sdpa_kernel"].number();
      if (k >= 0 && k < 6) o << "    attention kernel: " << kNames[static_cast<int>(k)] << "\n";
    }
  }
}

// Whether the point's peers were timed in turn with gengraph's rows (run.peer_order:
// interleaved): their rows say so.
bool peers_interleaved(const JsonAt& doc) {
  const auto runs = doc.find("runs");
  if (!runs) return false;
  for (const auto& r : runs->items()) {
    if (r.string_or("order", "") == "interleaved") return true;
  }
  return false;
}

void point_header(std::ostringstream& o, const JsonAt& doc) {
  const JsonAt model = doc["model"], env = doc["environment"];
  // Read in the order shown, so that the first field missing is the one named.
  const std::string source = shown(model["source"]), type = shown(model["model_type"]);
  const int64_t parameters = model["parameters"].integer_in(0, INT64_MAX);
  const std::string device = shown(env["device"]), dtype = shown(env["dtype"]);
  const int64_t batch = doc["inputs"]["batch_size"].integer_in(1, INT64_MAX);
  // run.repeats as the experiment file allows it: it sizes the interval's computation.
  const int64_t repeats = doc["run"]["repeats"].integer_in(1, 100000);
  o << "model " << source << " (" << type << ", " << parameters << " parameters), " << device
    << ", " << dtype << ", batch " << batch << ", " << repeats << " repeats (median [min-max])\n"
    << "'vs' = baseline total time / row total time: for rows timed in the same interleaved "
       "repeats, the median"
    << " of per-repeat ratios [its order-statistic interval, " << ratio_confidence_text(repeats)
    << (peers_interleaved(doc) ? "]; the same for peers timed in turn with them\n"
                               : "]; for peers, the ratio of medians\n");
  if (const auto bw = doc.find("bandwidth")) {
    o << "measured bandwidth: " << std::fixed << std::setprecision(1);
    if (const auto read = bw->find("read_bytes_per_second"))
      o << "read " << amount(*read) / 1e9 << " GB/s, ";
    o << "copy " << amount((*bw)["copy_bytes_per_second"]) / 1e9 << " GB/s\n";
  }
}

// 6000 -> "6,000".
std::string with_thousands(size_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// A sequence's token ids as the table shows them: a long one cut after its first ids, with its
// length (the results file holds them all).
std::string token_list(const JsonAt& tokens) {
  const std::vector<JsonAt> ids = tokens.items();
  std::string out = "[";
  for (size_t i = 0; i < ids.size() && (ids.size() <= kLongestIds || i < kShownIds); ++i)
    out += (out.size() > 1 ? "," : "") + std::to_string(ids[i].integer());
  if (ids.size() <= kLongestIds) return out + "]";
  return out + ",…] (" + with_thousands(ids.size()) + " tokens)";
}

// A prompt or a generated text as the table shows it: quoted as JSON (control characters
// escaped), and a long one cut after its first characters, with its length in tokens when known
// (else in characters). The results file keeps the texts whole.
// A sequence's generated tokens, when it records them.
std::optional<size_t> new_tokens(const JsonAt& sequence) {
  const auto tokens = sequence.find("tokens");
  if (!tokens) return std::nullopt;
  return tokens->items().size();
}

std::string table_text(const JsonAt& text, std::optional<size_t> tokens) {
  const std::string s = text.string();
  size_t characters = 0, cut = s.size();  // UTF-8: a character per byte that starts one
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) continue;
    if (characters++ == kShownCharacters) cut = i;
  }
  const auto quoted = [](const std::string& v) {
    return terminal_text(
        nlohmann::json(v).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  };
  if (characters <= kLongestText) return quoted(s);
  return quoted(s.substr(0, cut)) + "… (" +
         (tokens ? with_thousands(*tokens) + " tokens"
                 : with_thousands(characters) + " characters") +
         ")";
}

}  // namespace

std::string format_table(const nlohmann::json& json, const std::string& file) {
  return format_table(JsonAt(json, results_source(file)));
}

std::string format_table(const JsonAt& doc) {
  if (is_load_document(doc.json())) return format_load_table(doc);  // one row per system and rate
  std::ostringstream o;
  const std::string baseline = doc.string_or("baseline", "");
  o << "experiment " << shown(doc["experiment"]) << "\n";
  if (doc.has("points")) {
    for (const auto& p : doc["points"].items()) {
      o << "\n[" << terminal_text(point_label(p)) << "] ";
      point_header(o, p);
      point_table(o, p, baseline);
    }
    if (const auto missing = doc.find("missing_points")) {
      for (const auto& p : missing->items()) {
        o << "\n[" << terminal_text(point_label(p)) << "] NO RESULT: " << shown(p["status"])
          << "\n";
      }
    }
    return o.str();
  }
  point_header(o, doc);
  point_table(o, doc, baseline);
  const std::vector<JsonAt> runs = doc["runs"].items();
  // The first row's tokens (a failed first row has none to show).
  const auto outputs = runs.empty() ? std::nullopt : runs.front().find("outputs");
  // Texts in: each prompt's text and what was generated, as quoted JSON strings (control
  // characters escaped), for every input; the ids stay in the results file.
  const auto texts = doc.has("inputs") ? doc["inputs"].find("texts") : std::nullopt;
  if (outputs && texts) {
    const std::vector<JsonAt> prompts = texts->items();
    // Each prompt's length in tokens, as the tokenizer encoded it.
    std::vector<JsonAt> lengths;
    if (const auto l = doc["inputs"].find("prompt_lengths")) lengths = l->items();
    const auto prompt_tokens = [&](size_t i) -> std::optional<size_t> {
      if (i >= lengths.size()) return std::nullopt;
      return static_cast<size_t>(lengths[i].integer());
    };
    o << "generated text (" << shown(runs.front()["label"]) << "; "
      << (doc["inputs"].has("tokenizer") ? shown(doc["inputs"]["tokenizer"])
                                         : std::string("tokenizer"))
      << "):\n";
    for (const auto& in : outputs->items()) {
      const int64_t i = in["input"].integer();
      for (const auto& s : in["sequences"].items()) {
        o << "  [" << i << "] ";
        if (i >= 0 && static_cast<size_t>(i) < prompts.size())
          o << table_text(prompts[static_cast<size_t>(i)], prompt_tokens(static_cast<size_t>(i)))
            << " ->";
        if (const auto text = s.find("text")) o << " " << table_text(*text, new_tokens(s));
        if (const auto score = s.find("score")) o << "  score " << score->number();
        o << "\n";
      }
    }
    return o.str();
  }
  if (outputs) {
    o << "generated tokens (" << shown(runs.front()["label"]) << "):\n";
    int shown_inputs = 0;
    for (const auto& in : outputs->items()) {
      if (++shown_inputs > 4) {
        o << "  ...\n";
        break;
      }
      for (const auto& s : in["sequences"].items()) {
        o << "  input " << in["input"].integer() << ": " << token_list(s["tokens"]);
        if (const auto score = s.find("score")) o << "  score " << score->number();
        o << "\n";
        if (const auto text = s.find("text"))
          o << "    text: " << table_text(*text, new_tokens(s)) << "\n";
      }
    }
  }
  return o.str();
}

}  // namespace gengraph

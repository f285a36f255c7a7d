#include "experiments/tools/python_tools.h"

#include <ATen/Parallel.h>
#include <gengraph/gengraph.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "backends/aoti/aoti_step.h"
#include "experiments/results/results.h"
#include "experiments/results/statistics.h"
#include "experiments/tools/peers.h"
#include "framework/model/loader.h"
#include "framework/util/error.h"
#include "framework/util/files.h"
#include "framework/util/json_at.h"
#include "framework/util/process_checks.h"
#include "framework/util/progress.h"

namespace gengraph {

PeerModelFolder::PeerModelFolder(const ExperimentConfig& c, const Model& model)
    : path_(c.model.path) {
  if (!path_.empty()) return;
  path_ = std::filesystem::temp_directory_path() /
          ("gengraph-peer-model-" + std::to_string(::getpid()));
  temporary_ = true;
  try {
    model.save(path_.string());
    throw_if_interrupted();
  } catch (...) {
    remove();
    throw;
  }
}

PeerModelFolder::~PeerModelFolder() { remove(); }

void PeerModelFolder::remove() {
  std::error_code ignored;
  if (temporary_) std::filesystem::remove_all(path_, ignored);
}

namespace {

// The metrics of a row's timings that show and compare read.
const char* const kTimingMetrics[] = {"time_to_first_token_ms", "decode_ms_per_token", "total_ms",
                                      "tokens_per_second"};

// The peer's row as its tool (tools/hf_peer.py or tools/engine_peer.py) wrote it, checked for what
// the runner, `show` and `compare` read from it, so that a damaged row fails the peer (naming the
// key) instead of the results.
void check_peer_row(const nlohmann::json& row, const PeerSpec& peer, size_t inputs) {
  const JsonAt r(row, "peer '" + peer.label + "': the output of tools/" + peer_tool(peer.name));
  r.object("a results row (an object)");
  if (r["label"].string() != peer.label)
    r["label"].fail("the peer's label, " + JsonAt::quoted(peer.label));
  r["backend"].string();
  const auto outputs = r["outputs"].items();
  if (outputs.size() != inputs)
    r["outputs"].fail("one entry per input (" + std::to_string(inputs) + ")");
  for (const auto& in : outputs) {
    in["input"].integer();
    in["prompt_length"].integer();
    for (const auto& s : in["sequences"].items()) {
      for (const auto& t : s["tokens"].items()) t.integer();
      if (const auto score = s.find("score")) score->number();
    }
  }
  for (const char* metric : kTimingMetrics) row_timing(r, metric);
}

}  // namespace

nlohmann::json run_peer(const PeerSpec& peer, const ExperimentConfig& c,
                        const std::filesystem::path& folder, const nlohmann::json& generation,
                        const std::vector<std::vector<int64_t>>& prompts, std::ostream& log) {
  const nlohmann::json request = {
      {"peer", peer.name},         {"label", peer.label},      {"model", folder.string()},
      {"dtype", c.model.dtype},    {"device", c.model.device}, {"prompts", prompts},
      {"generation", generation},  {"warmup", c.run.warmup},   {"repeats", c.run.repeats},
      {"order", c.run.peer_order}, {"seed", c.run.seed},       {"threads", at::get_num_threads()}};
  log << "peer " << peer.label << "\n";
  const std::string tool = peer_tool(peer.name);
  ToolResult r = run_tool(tool, request, c.run.peer_timeout_s, log);
  if (!r.out) {
    if (c.run.peer_timeout_s > 0 && (r.rc == 124 || r.rc == 137)) {
      throw Error("peer '" + peer.label + "': stopped after run.peer_timeout_s = " +
                  std::to_string(c.run.peer_timeout_s) + " s");
    }
    throw Error("peer '" + peer.label + "': tools/" + tool + " failed (exit " +
                std::to_string(r.rc) + "; any message it printed is above)");
  }
  // A reason the tool gave instead of a row (tools/engine_peer.py: an engine it could not install
  // or convert the model for, a setting the engine cannot honour).
  if (r.out->is_object() && r.out->contains("error") && !r.out->contains("outputs")) {
    const JsonAt e(*r.out, "peer '" + peer.label + "': the output of tools/" + tool);
    throw Error("peer '" + peer.label + "': " + e["error"].string());
  }
  check_peer_row(*r.out, peer, prompts.size());
  return *r.out;
}

nlohmann::json merge_peer_repeats(const std::vector<nlohmann::json>& repeats) {
  if (repeats.empty()) throw Error("merge_peer_repeats: no repeats");
  // check_peer_row checked the label, outputs and timings; the rest is read without trusting it.
  auto member = [](const nlohmann::json& j, const char* key) -> const nlohmann::json* {
    if (!j.is_object()) return nullptr;
    const auto it = j.find(key);
    return it == j.end() ? nullptr : &*it;
  };
  nlohmann::json row = repeats.front();
  bool same = true;
  double peak_rss = 0;
  for (const auto& r : repeats) {
    const auto* det = member(r, "deterministic_across_repeats");
    same = same && det && det->is_boolean() && det->get<bool>() &&
           r.at("outputs") == row.at("outputs");
    const auto* rss =
        member(r, "memory") ? member(*member(r, "memory"), "peak_rss_bytes") : nullptr;
    if (rss && rss->is_number()) peak_rss = std::max(peak_rss, rss->get<double>());
  }
  for (const char* metric : kTimingMetrics) {
    std::vector<double> values;
    for (const auto& r : repeats) {
      const auto* t = member(r, "timings");
      const auto* m = t ? member(*t, metric) : nullptr;
      const auto* v = m ? member(*m, "values") : nullptr;
      if (!v || !v->is_array()) continue;
      for (const auto& x : *v) {
        if (x.is_number()) values.push_back(x.get<double>());
      }
    }
    if (!values.empty()) row["timings"][metric] = summary(values);  // else the first's (null)
  }
  row["deterministic_across_repeats"] = same;
  if (!member(row, "memory") || !row["memory"].is_object())
    row["memory"] = nlohmann::json::object();
  row["memory"]["peak_rss_bytes"] = peak_rss;
  row["order"] = "interleaved";
  return row;
}

nlohmann::json tokenizer_request(const std::string& folder, const nlohmann::json& request,
                                 const char* field, size_t count, std::ostream& log,
                                 int64_t timeout_s, nlohmann::json* output) {
  const std::string op = request.contains("encode")   ? "encode"
                         : request.contains("decode") ? "decode"
                                                      : "chat";
  ToolResult r = run_tool("hf_tokenizer.py", request, timeout_s, log);
  if (!r.out && timeout_s > 0 && (r.rc == 124 || r.rc == 137)) {
    const std::string what = op == "chat" ? "the chat template of '" + folder + "'"
                                          : "tools/hf_tokenizer.py (" + op +
                                                " with the "
                                                "tokenizer in '" +
                                                folder + "')";
    throw Error(what + " ran past " + std::to_string(timeout_s) + " s and was stopped");
  }
  if (!r.out) {
    throw Error("inputs.texts: tools/hf_tokenizer.py could not " + op + " with the tokenizer in '" +
                folder + "' (exit " + std::to_string(r.rc) + "; any message it printed is above)");
  }
  // One result per item: token ids (integers) for "encode", a string otherwise.
  const JsonAt out(*r.out, "inputs.texts: the output of tools/hf_tokenizer.py (" + op +
                               " with the tokenizer in '" + folder + "')");
  out.object();
  const std::vector<JsonAt> results = out[field].items();
  if (results.size() != count) {
    out[field].fail(std::string("one entry per ") + (op == "decode" ? "sequence" : "text") + " (" +
                    std::to_string(count) + ")");
  }
  for (const auto& x : results) {
    if (op == "encode") {
      for (const auto& id : x.items(std::numeric_limits<size_t>::max(), "an array of token ids"))
        id.integer();
    } else {
      x.string();
    }
  }
  if (output != nullptr) *output = *r.out;
  return (*r.out)[field];
}

namespace {

// What the tool's standard error says went wrong: its own "export_aoti:" message (with the lines
// indented under it, at most 5), else the last meaningful line, i.e. not a traceback's frames,
// a warning or a log line.
std::string tool_reason(const std::string& err) {
  std::vector<std::string> lines;
  std::stringstream in(err);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") != std::string::npos) lines.push_back(line);
  }
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].rfind("export_aoti:", 0) != 0) continue;
    std::string out = "\n  " + lines[i];
    for (size_t j = i + 1; j < lines.size() && j <= i + 5 && lines[j][0] == ' '; ++j)
      out += "\n  " + lines[j];
    return out;
  }
  const auto meaningful = [](const std::string& l) {
    const bool log_line = l.size() > 5 && (l[0] == 'W' || l[0] == 'I' || l[0] == 'E') &&
                          std::isdigit(static_cast<unsigned char>(l[1])) &&
                          std::isdigit(static_cast<unsigned char>(l[4]));  // W1202 09:46:...
    return l[0] != ' ' && l[0] != '\t' && !log_line &&
           l.rfind("Traceback (most recent call last)", 0) != 0 &&
           l.find("Warning: ") == std::string::npos && l.rfind("During handling of", 0) != 0 &&
           l.rfind("The above exception", 0) != 0;
  };
  for (size_t i = lines.size(); i-- > 0;) {
    if (meaningful(lines[i])) return "\n  " + lines[i];
  }
  return lines.empty() ? " (no message)" : "\n  " + lines.back();
}

// Whether the tool failed for want of disk space, by its message (Python's OSError [Errno 28],
// a compiler's "No space left on device", the tool's own exit status 6).
bool out_of_space(const CapturedCommand& r) {
  return r.rc == 6 || r.err.find("No space left on device") != std::string::npos ||
         r.err.find("[Errno 28]") != std::string::npos || r.err.find("ENOSPC") != std::string::npos;
}

// Removes the model copies of exports in processes that were killed before they could (their
// folders are named after their pid; /tmp is this host's).
void remove_stale_export_folders() {
  const std::string start = "gengraph-aoti-export-";
  std::error_code ec;
  for (std::filesystem::directory_iterator it(std::filesystem::temp_directory_path(ec), ec), end;
       !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(start, 0) != 0) continue;
    const std::string pid = name.substr(start.size(), name.find('-', start.size()) - start.size());
    if (pid.empty() || pid.size() > 9 || pid.find_first_not_of("0123456789") != std::string::npos)
      continue;
    if (std::stol(pid) == ::getpid() || process_is_running(std::stol(pid))) continue;
    std::error_code ignored;
    std::filesystem::remove_all(it->path(), ignored);
  }
}

// The mean build time (export and compile) of the packages already in the cache folder `dir`,
// from their build records; 0 when there are none. A progress display's estimate.
double usual_build_seconds(const std::filesystem::path& dir) {
  double sum = 0;
  int n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::directory_iterator() && n < 64; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const std::string tail = ".pt2.build.json";
    if (name.size() <= tail.size() || name.compare(name.size() - tail.size(), tail.size(), tail))
      continue;
    try {
      const std::string source = "'" + it->path().string() + "'";
      const nlohmann::json doc =
          parse_json_text(read_regular_file(it->path(), source, "a JSON file", 1 << 16), source);
      const JsonAt j(doc, source);
      const double most = std::numeric_limits<double>::max();
      sum += j["export_seconds"].number_in(0, most, "seconds") +
             j["compile_seconds"].number_in(0, most, "seconds");
      ++n;
    } catch (const std::exception&) {
      // a damaged record: the package's own check reports it when the package is used
    }
  }
  return n > 0 ? sum / n : 0.0;
}

AotiBuildReport export_with_tool(const CausalLM& model, const AotiExportRequest& request,
                                 const std::filesystem::path& out) {
  static int calls = 0;
  InterruptGuard guard;
  remove_stale_export_folders();
  const auto dir =
      std::filesystem::temp_directory_path() /
      ("gengraph-aoti-export-" + std::to_string(::getpid()) + "-" + std::to_string(++calls));
  struct RemoveAll {
    std::filesystem::path p;
    ~RemoveAll() {
      std::error_code ignored;
      std::filesystem::remove_all(p, ignored);
    }
  } remove{dir};
  save_model_folder(model, dir / "model");
  throw_if_interrupted();
  std::vector<std::string> argv = {python_for_tools().string(),
                                   (source_root() / "tools" / "export_aoti.py").string(),
                                   "--model",
                                   (dir / "model").string(),
                                   "--out",
                                   out.string(),
                                   "--dtype",
                                   request.dtype,
                                   "--device",
                                   request.device,
                                   "--fingerprint",
                                   request.fingerprint,
                                   "--max-rows",
                                   std::to_string(request.max_rows),
                                   "--report",
                                   (dir / "report.json").string()};
  if (request.freezing) argv.push_back("--freezing");
  if (request.ragged) {  // the ragged form calls gengraph's operators from this very library
    argv.push_back("--ragged");
    if (!request.weights.quantized())
      argv.insert(argv.end(), {"--ops-library", request.ops_library});
    if (request.invariant) argv.push_back("--invariant");
  }
  if (request.weights.quantized()) {
    // Quantized as gengraph quantizes it, calling gengraph's operators from this very library.
    argv.insert(argv.end(),
                {"--weights", request.weights.name(), "--ops-library", request.ops_library});
    if (request.weights.kind == WeightFormat::Kind::kInt4 || request.weights.int8_blocks()) {
      const int64_t group = request.weights.kind == WeightFormat::Kind::kInt4
                                ? request.weights.int4_group()
                                : request.weights.group_size;
      argv.insert(argv.end(), {"--group-size", std::to_string(group)});
    }
    if (!request.weights.lm_head) argv.push_back("--float-head");
    if (request.weights.head_int8()) argv.push_back("--int8-head");
    if (request.weights.int8_activation_rows > 0) {  // W8A8 from that many rows
      argv.insert(
          argv.end(),
          {"--int8-activation-rows", std::to_string(request.weights.int8_activation_rows),
           "--int8-activation-block", std::to_string(request.weights.int8_activation_block)});
    }
  }
  CapturedCommand r;
  {
    Progress shown("building the aoti package (export, then compile)", 0,
                   usual_build_seconds(out.parent_path()));
    r = run_captured(argv);
  }
  throw_if_interrupted();
  const std::string what = "AOTInductor export of the model from " + model.config().source;
  if (!r.found) {
    throw Error(what + ": the tools' Python '" + argv[0] +
                "' was not found (scripts/setup.sh makes it; GENGRAPH_PYTHON names another)");
  }
  if (r.rc != 0 && out_of_space(r)) {
    throw Error("building the aoti package in '" + out.parent_path().string() +
                "' failed: No space left on device (free space there or in '" +
                std::filesystem::temp_directory_path().string() +
                "', where the model's copy and Inductor's build files go; the backend option "
                "cache_dir or GENGRAPH_AOTI_CACHE puts packages on another disk)" +
                tool_reason(r.err));
  }
  if (r.rc != 0) {
    throw Error(what + " failed: tools/export_aoti.py exited with " + std::to_string(r.rc) +
                tool_reason(r.err));
  }
  const auto report = read_json_file(dir / "report.json");
  const JsonAt fields(
      report, "'" + (dir / "report.json").string() + "' (the report of tools/export_aoti.py)");
  AotiBuildReport b;
  b.export_seconds = fields.number_or("export_seconds", 0.0);
  b.compile_seconds = fields.number_or("compile_seconds", 0.0);
  return b;
}

}  // namespace

void install_aoti_export_tool() {
  // The exporter's identity: its sources (and the contract module it imports), hashed.
  std::string sources;
  for (const char* tool : {"export_aoti.py", "export_aoti_ragged.py", "trace_hf.py"}) {
    std::ifstream in(source_root() / "tools" / tool, std::ios::binary);
    sources += std::string(std::istreambuf_iterator<char>(in), {});
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016zx", std::hash<std::string>{}(sources));
  set_aoti_package_builder(export_with_tool, std::string(hex).substr(0, 10));
}

}  // namespace gengraph

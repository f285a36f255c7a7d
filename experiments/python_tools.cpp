#include "experiments/python_tools.h"

#include <ATen/Parallel.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "backends/aoti/aoti_step.h"
#include "framework/model/loader.h"
#include "framework/util/error.h"

namespace gengraph {

PeerModelFolder::PeerModelFolder(const ExperimentConfig& c, const LoadedModel& loaded)
    : path_(c.model.path) {
  if (!path_.empty()) return;
  path_ = std::filesystem::temp_directory_path() /
          ("gengraph-peer-model-" + std::to_string(::getpid()));
  temporary_ = true;
  try {
    save_model_folder(loaded, path_);
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

nlohmann::json run_peer(const PeerSpec& peer, const ExperimentConfig& c,
                        const std::filesystem::path& folder, const nlohmann::json& generation,
                        const std::vector<std::vector<int64_t>>& prompts, std::ostream& log) {
  const nlohmann::json request = {{"peer", peer.name},
                                  {"label", peer.label},
                                  {"model", folder.string()},
                                  {"dtype", c.model.dtype},
                                  {"device", c.model.device},
                                  {"prompts", prompts},
                                  {"generation", generation},
                                  {"warmup", c.run.warmup},
                                  {"repeats", c.run.repeats},
                                  {"seed", c.run.seed},
                                  {"threads", at::get_num_threads()}};
  log << "peer " << peer.label << "\n";
  ToolResult r = run_tool("hf_peer.py", request, c.run.peer_timeout_s, log);
  if (!r.out) {
    if (c.run.peer_timeout_s > 0 && (r.rc == 124 || r.rc == 137)) {
      throw Error("peer '" + peer.label + "': stopped after run.peer_timeout_s = " +
                  std::to_string(c.run.peer_timeout_s) + " s");
    }
    throw Error("peer '" + peer.label + "': tools/hf_peer.py failed (exit " + std::to_string(r.rc) +
                "; any message it printed is above)");
  }
  return *r.out;
}

nlohmann::json tokenizer_call(const std::string& folder, const char* op,
                              const nlohmann::json& items, const char* field, std::ostream& log) {
  ToolResult r = run_tool("hf_tokenizer.py", {{"model", folder}, {op, items}}, 0, log);
  if (!r.out || !(*r.out).contains(field) || (*r.out)[field].size() != items.size()) {
    throw Error(std::string("inputs.texts: tools/hf_tokenizer.py could not ") + op +
                " with the tokenizer in '" + folder + "' (exit " + std::to_string(r.rc) +
                "; any message it printed is above)");
  }
  return (*r.out)[field];
}

void decode_outputs(nlohmann::json& runs, const std::string& folder, std::ostream& log) {
  nlohmann::json seqs = nlohmann::json::array();
  for (const auto& run : runs) {
    if (!run.contains("outputs")) continue;
    for (const auto& in : run["outputs"]) {
      for (const auto& s : in["sequences"]) seqs.push_back(s["tokens"]);
    }
  }
  if (seqs.empty()) return;
  const nlohmann::json texts = tokenizer_call(folder, "decode", seqs, "texts", log);
  size_t k = 0;
  for (auto& run : runs) {
    if (!run.contains("outputs")) continue;
    for (auto& in : run["outputs"]) {
      for (auto& s : in["sequences"]) s["text"] = texts[k++];
    }
  }
}

namespace {

// The lines of the tool's standard error that say what went wrong (its own "export_aoti:" lines
// and what follows them), else the last lines.
std::string tool_reason(const std::string& err) {
  std::vector<std::string> lines;
  std::stringstream in(err);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(line);
  }
  size_t from = lines.size() > 8 ? lines.size() - 8 : 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].rfind("export_aoti:", 0) == 0) {
      from = i;
      break;
    }
  }
  std::string out;
  for (size_t i = from; i < lines.size() && i < from + 12; ++i) out += "\n  " + lines[i];
  return out.empty() ? " (no message)" : out;
}

AotiBuildReport export_with_tool(const CausalLM& model, const AotiExportRequest& request,
                                 const std::filesystem::path& out) {
  static int calls = 0;
  InterruptGuard guard;
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
  const CapturedCommand r = run_captured(argv);
  throw_if_interrupted();
  const std::string what = "AOTInductor export of the model from " + model.config().source;
  if (!r.found) {
    throw Error(what + ": the tools' Python '" + argv[0] +
                "' was not found (scripts/setup.sh makes it; GENGRAPH_PYTHON names another)");
  }
  if (r.rc != 0) {
    throw Error(what + " failed: tools/export_aoti.py exited with " + std::to_string(r.rc) +
                tool_reason(r.err));
  }
  const auto report = read_json_file(dir / "report.json");
  AotiBuildReport b;
  b.export_seconds = report.value("export_seconds", 0.0);
  b.compile_seconds = report.value("compile_seconds", 0.0);
  return b;
}

}  // namespace

void install_aoti_export_tool() {
  // The exporter's identity: its sources (and the contract module it imports), hashed.
  std::string sources;
  for (const char* tool : {"export_aoti.py", "trace_hf.py"}) {
    std::ifstream in(source_root() / "tools" / tool, std::ios::binary);
    sources += std::string(std::istreambuf_iterator<char>(in), {});
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016zx", std::hash<std::string>{}(sources));
  set_aoti_package_builder(export_with_tool, std::string(hex).substr(0, 10));
}

}  // namespace gengraph

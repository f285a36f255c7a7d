#include "experiments/python_tools.h"

#include <ATen/Parallel.h>
#include <unistd.h>

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

}  // namespace gengraph

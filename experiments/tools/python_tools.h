// gengraph's own uses of the Python tools: peer rows (tools/hf_peer.py, tools/engine_peer.py)
// and texts in and out through a model folder's tokenizer
// (tools/hf_tokenizer.py).
#pragma once

#include <gengraph/cli.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "experiments/experiment/experiment_config.h"
#include "experiments/tools/process.h"

namespace gengraph {

class Model;

// The model folder the peers load: the configured one, or (for a preset) the very same random
// weights written once to a temporary folder, removed when the peers are done.
class PeerModelFolder {
 public:
  PeerModelFolder(const ExperimentConfig& c, const Model& model);
  ~PeerModelFolder();
  PeerModelFolder(const PeerModelFolder&) = delete;
  PeerModelFolder& operator=(const PeerModelFolder&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  void remove();
  InterruptGuard guard_;  // constructed first: an interrupt while writing the copy is caught too
  std::filesystem::path path_;
  bool temporary_ = false;
};

// One peer row: transformers' generate() (tools/hf_peer.py) or another engine
// (tools/engine_peer.py) on `folder` with the resolved `generation` settings, the same prompts,
// warm-up, repeats, seed and threads. Throws Error naming the peer when the tool fails, gives a
// reason instead of a row, or runs past run.peer_timeout_s.
nlohmann::json run_peer(const PeerSpec& peer, const ExperimentConfig& c,
                        const std::filesystem::path& folder, const nlohmann::json& generation,
                        const std::vector<std::vector<int64_t>>& prompts, std::ostream& log);

// A peer timed in turn with gengraph's rows (run.peer_order: interleaved) runs one process a
// repeat: its rows (each checked by run_peer, one timed repeat each) as one row whose timing values
// are in repeat order, so that value i pairs with the baseline's repeat i. Deterministic when
// every repeat gave the first's tokens; "order": "interleaved" marks it for the ratios.
nlohmann::json merge_peer_repeats(const std::vector<nlohmann::json>& repeats);

// One call of tools/hf_tokenizer.py with `request` (its "encode", "decode" or "chat" form, see the
// tool): the output's `field`, checked to hold `count` entries of the right type, or an Error.
// `timeout_s` > 0 stops the tool after that long (the chat template's backstop). `output`, when
// given, receives the tool's whole output (a decode's "cut_bytes" beside its "texts").
nlohmann::json tokenizer_request(const std::string& folder, const nlohmann::json& request,
                                 const char* field, size_t count, std::ostream& log,
                                 int64_t timeout_s = 0, nlohmann::json* output = nullptr);

}  // namespace gengraph

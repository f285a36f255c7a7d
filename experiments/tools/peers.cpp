#include "experiments/tools/peers.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

namespace gengraph {
namespace {

struct Engine {
  const char* name;            // as the messages say it
  std::set<std::string> keys;  // the generation keys it maps (besides lengths and token ids)
  bool beams;
  bool cuda;
};

// Keys every peer takes: the lengths and the special tokens.
const std::set<std::string> kCommon = {"max_new_tokens", "max_length",   "min_length",
                                       "min_new_tokens", "eos_token_id", "pad_token_id",
                                       "bos_token_id"};
// Keys that act only when sampling, and only with beams (as transformers' warpers and beam scorer).
const std::set<std::string> kSampling = {"temperature", "top_k",          "top_p",     "min_p",
                                         "typical_p",   "epsilon_cutoff", "eta_cutoff"};
const std::set<std::string> kBeam = {"length_penalty", "early_stopping", "num_beam_groups",
                                     "diversity_penalty"};

const Engine& engine_of(const std::string& peer) {
  static const Engine ct2{"CTranslate2",
                          {"do_sample", "num_beams", "num_return_sequences", "temperature", "top_k",
                           "top_p", "length_penalty", "early_stopping"},
                          true,
                          true};
  static const Engine llama{
      "llama.cpp", {"do_sample", "temperature", "top_k", "top_p", "min_p"}, false, false};
  return peer.rfind("ct2", 0) == 0 ? ct2 : llama;
}

// Why an engine cannot run a setting, where there is more to say than that it has no such option.
std::string reason(const Engine& e, const std::string& key) {
  if (key == "num_beams")
    return std::string(e.name) +
           " (llama-cpp-python) has no beam search; drop the peer or the beams";
  if ((key == "repetition_penalty" || key == "no_repeat_ngram_size") &&
      std::string(e.name) == "CTranslate2")
    return std::string(e.name) + " applies it to the generated tokens only, transformers to the " +
           "prompt's too";
  if (key == "num_return_sequences")
    return std::string(e.name) + " peers here return one sequence per prompt";
  if (key == "processors" || key == "stopping_criteria" || key == "strategy" ||
      key == "stop_sequences" || key == "logit_bias" || key == "frequency_penalty" ||
      key == "presence_penalty" || key == "top_logprobs")
    return "a gengraph extension " + std::string(e.name) + " does not have";
  return "the " + std::string(e.name) + " peers do not support it";
}

}  // namespace

const std::vector<std::string>& peer_names() {
  static const std::vector<std::string> names = {
      "hf_eager", "hf_jit_trace", "hf_static_compile", "ct2",
      "ct2_int8", "llama_cpp",    "llama_cpp_q8_0",    "llama_cpp_q4_0"};
  return names;
}

std::string peer_tool(const std::string& peer) {
  return peer.rfind("hf_", 0) == 0 ? "hf_peer.py" : "engine_peer.py";
}

std::string peer_refusal(const std::string& peer, const ResolvedSettings& g,
                         const std::string& device, const std::string& dtype) {
  if (peer.rfind("hf_", 0) == 0) {
    // What tools/hf_peer.py refuses, refused before any row runs (validate, run, submit).
    if (g.num_beam_groups > 1) {
      return "generation.num_beam_groups = " + std::to_string(g.num_beam_groups) +
             ": diverse beam search is not in transformers 5.17's generate()";
    }
    const nlohmann::json got = g.to_json();
    for (const char* key :
         {"frequency_penalty", "presence_penalty", "logit_bias", "stop_sequences", "processors",
          "stopping_criteria", "strategy", "candidate_generator", "top_logprobs"}) {
      const auto it = got.find(key);
      if (it == got.end() || it->is_null() || (it->is_number() && *it == 0) ||
          ((it->is_array() || it->is_object()) && it->empty())) {
        continue;
      }
      return "generation." + std::string(key) + " = " + it->dump() +
             ": a gengraph extension transformers does not have";
    }
    return "";
  }
  const Engine& e = engine_of(peer);
  if (!e.cuda && device != "cpu")
    return "model.device = " + device + ": the " + e.name + " peers run on the CPU only";
  if (dtype != "float32" && dtype != "bfloat16" && dtype != "float16")
    return "model.dtype = " + dtype + ": expected float32, bfloat16 or float16";
  const nlohmann::json got = g.to_json(), defaults = ResolvedSettings{}.to_json();
  for (auto it = got.begin(); it != got.end(); ++it) {
    const std::string& key = it.key();
    const auto def = defaults.find(key);
    if (def != defaults.end() && *def == it.value()) continue;
    if (def == defaults.end() && it.value().empty()) continue;  // an unset extension
    if (kCommon.count(key) || e.keys.count(key)) continue;
    if (kSampling.count(key) && !g.do_sample) continue;
    if (kBeam.count(key) && g.num_beams == 1) continue;
    return "generation." + key + " = " + it.value().dump() + ": " + reason(e, key);
  }
  if (e.beams && g.do_sample && g.num_beams > 1) {
    return "generation.do_sample = true with num_beams = " + std::to_string(g.num_beams) + ": " +
           e.name + " samples without beams only";
  }
  if (e.beams && g.num_beams > 1 && g.early_stopping == EarlyStopping::kNever) {
    return "generation.early_stopping = \"never\": " + std::string(e.name) +
           " ends a beam search once num_beams hypotheses are finished";
  }
  if (e.beams && g.num_return_sequences > 1 && g.num_beams == 1) {
    return "generation.num_return_sequences = " + std::to_string(g.num_return_sequences) +
           ": the " + std::string(e.name) + " peers return several sequences from beams only";
  }
  return "";
}

}  // namespace gengraph

// A draft model as the candidate generator (transformers' assistant_model; with early exit,
// assistant_early_exit, the target's own first layers): a smaller or cheaper
// model with the target's vocabulary, on a backend of its own, proposes its greedy continuation
// (when sampling, a continuation drawn from its distribution); the target verifies it. Chosen by
// name:
//   generation:
//     candidate_generator: {name: draft_model, model: smollm2-135m, weights: int8,
//                           backend: eager, num_tokens: 5, schedule: heuristic}
// model: a folder, a known real model (gengraph models) or "preset:NAME"; weights: its form
// (float, int8, int4, bfloat16: a quantized copy of the target is a draft that agrees with it
// often); backend and options: any registered backend; num_tokens: candidates per step
// (transformers' num_assistant_tokens, default 20); schedule: constant, or heuristic
// (transformers' num_assistant_tokens_schedule: +2 after a step that kept every candidate, -1
// otherwise, at least 1); sampling: speculative or plain_draws (DraftModelOptions). The draft is
// loaded once per process and kept (same model, form,
// dtype and device), on the target's device and dtype.
#pragma once

#include <ATen/Tensor.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "framework/backend/forward_backend.h"
#include "framework/decoding/candidates/candidate_generator.h"

namespace gengraph {

class CausalLM;

struct DraftModelOptions {
  // Early exit (transformers' assistant_early_exit): the target's own first `layers` layers, its
  // final norm and head after them, as the draft (no model loaded); 0 for a draft model.
  int64_t layers = 0;
  std::string model;
  std::string weights = "float";
  std::string backend = "eager";
  std::map<std::string, std::string> backend_options;
  int64_t num_tokens = 20;
  bool heuristic = false;
  // When the generation samples (do_sample): true (sampling: speculative, the default, as
  // transformers' assistant) draws the candidates from the draft's processed distribution and
  // lets speculative sampling's rule keep or replace them, the output distributed as plain
  // sampling's; false (sampling: plain_draws) proposes the draft's greedy continuation and keeps
  // a candidate only when the target's own draw equals it: plain sampling's tokens for a seed,
  // fewer candidates kept.
  bool speculative_sampling = true;
};

// Reads the part's parameters (an Error names the bad one); no model is touched.
DraftModelOptions read_draft_model_options(const nlohmann::json& params);
// The same for early_exit: {layers (required), backend, options, num_tokens, schedule}.
DraftModelOptions read_early_exit_options(const nlohmann::json& params);

// The target's first `layers` layers as a model of their own (its embeddings, final norm and head
// shared as tensors; the layers built again in the target's form and weight format). Refused
// unless 1 <= layers < the target's layer count.
std::shared_ptr<const CausalLM> early_exit_model(const CausalLM& target, int64_t layers);

// How many draft backends this process has made: a draft's backend is kept for the next
// generation with the same draft model, backend and options (at most four are kept), so a run of
// many generations makes one.
int64_t draft_backends_created();

class DraftModel final : public CandidateGenerator {
 public:
  // `target`: the model being decoded (its device, dtype and vocabulary size); null when the
  // pipeline is only checked, and then nothing is loaded. `max_length`: the generation's (the
  // padded prompt of `prompt_length` tokens and the new tokens); refused, naming both models'
  // contexts, when the draft's context is shorter.
  DraftModel(DraftModelOptions options, const CausalLM* target, int64_t max_length,
             int64_t prompt_length = 0);
  // Gives the draft's backend back for the next generation (a trace draft is not traced again).
  ~DraftModel() override;
  DraftModel(const DraftModel&) = delete;
  DraftModel& operator=(const DraftModel&) = delete;
  std::string name() const override { return options_.layers ? "early_exit" : "draft_model"; }
  void begin() override;
  std::vector<int64_t> propose(
      const std::vector<int64_t>& history, int64_t max,
      const std::function<size_t(const std::vector<int64_t>&)>& allowed) override;
  std::vector<int64_t> propose_sampled(
      const std::vector<int64_t>& history, int64_t max,
      const std::function<size_t(const std::vector<int64_t>&)>& allowed, const Process& process,
      at::Tensor& probabilities) override;
  void update(int64_t proposed, int64_t accepted) override;

 private:
  // Up to `max` candidates: the draft's greedy continuation, or with `process` drawn from its
  // processed distribution, each one's distribution appended to `probabilities`.
  std::vector<int64_t> draft(const std::vector<int64_t>& history, int64_t max,
                             const Process* process, std::vector<at::Tensor>* probabilities);
  DraftModelOptions options_;
  int64_t max_length_;
  int64_t num_tokens_;
  std::unique_ptr<ForwardBackend> backend_;
  int64_t cached_ = 0;   // history tokens (and candidates) in the draft's cache
  int64_t history_ = 0;  // the history's length at the last proposal
};

}  // namespace gengraph

// The decoding loop: one loop for every backend and every strategy.
//   logits = backend.prefill(prompt)
//   loop: strategy.step(logits, processors, sequences, stopping) -> next tokens, parent rows
//         until done: logits = backend.decode(next tokens, positions + 1, parent rows)
#pragma once

#include <gengraph/stream.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "framework/backend/forward_backend.h"
#include "framework/decoding/generation_config.h"
#include "framework/decoding/pipeline.h"
#include "framework/decoding/search/search_strategy.h"
#include "framework/decoding/whole_step.h"
#include "framework/model/model_config.h"

namespace gengraph {

struct GenerationTiming {
  double time_to_first_token_s = 0;  // prefill + choosing the first token
  double total_s = 0;
  int64_t steps = 0;  // tokens generated per row (forward calls, prefill included)
};

struct GenerationResult {
  std::vector<std::vector<Hypothesis>> outputs;  // per input prompt, best first
  int64_t prompt_length = 0;                     // padded
  int64_t rows = 0;                              // batch x rows_per_input
  GenerationTiming timing;
  LoopReport loop;  // whole step or host loop (whole_step.h)
};

// Checks prompts against the model before any work: ids inside the vocabulary (and the generation
// settings' token ids), the longest prompt plus the new tokens within the context. Returns the
// total length. Generator::generate calls it; so does experiment validation, without weights.
int64_t check_prompts(const ModelConfig& model, const GenerationConfig& generation,
                      const std::vector<std::vector<int64_t>>& prompts);

class Generator {
 public:
  // `sync` waits for the device (CUDA) so that timings are true; empty on CPU.
  Generator(GenerationConfig config, std::function<void()> sync = {}, LoopOptions loop = {});
  // A copy has the same settings and none of the whole-step state (below).
  Generator(const Generator& other);
  Generator(Generator&&) noexcept;
  ~Generator();

  // prompts: token ids per input, ragged allowed (left-padded here as transformers does).
  // `stream`, when given, receives each token as it is chosen (gengraph/stream.h); on CUDA that
  // adds one device-to-host copy per step.
  GenerationResult generate(ForwardBackend& backend,
                            const std::vector<std::vector<int64_t>>& prompts,
                            const TokenStream& stream = {}) const;
  const GenerationConfig& config() const { return config_; }
  const LoopOptions& loop() const { return loop_; }

 private:
  struct WholeStepState;
  // generate() after its checks (prompts, settings, the memory estimate).
  GenerationResult run_checked(ForwardBackend& backend,
                               const std::vector<std::vector<int64_t>>& prompts,
                               const TokenStream& stream, Pipeline pipe, int64_t prompt_len,
                               int64_t max_length) const;
  // The whole-step state for this shape: the one kept from the last generation when it matches
  // (same backend, static step buffers, rows and lengths: its graph is reused), else a new one
  // made with `pipe`.
  WholeStepState& whole_step_state(ForwardBackend& backend, Pipeline pipe, int64_t rows,
                                   int64_t max_length, int64_t prompt_length) const;
  static void fold_outputs(std::vector<std::vector<Hypothesis>> per_row, int64_t batch,
                           GenerationResult& result);
  // The whole-step loop (whole_step.h) after the prefill: `first_logits` [rows, vocab] float32,
  // `last_positions` [rows, 1] the prompt's last position ids, at most `max_steps` decisions.
  void run_whole_step(ForwardBackend& backend, WholeStepState& w, const at::Tensor& first_logits,
                      const at::Tensor& last_positions, int64_t max_steps,
                      std::chrono::steady_clock::time_point t0, GenerationResult& result) const;

  GenerationConfig config_;
  std::function<void()> sync_;
  LoopOptions loop_;
  // The last whole-step generation's buffers, pipeline and graph (generate() is const, and not
  // thread-safe with the whole step: one Generator per thread).
  mutable std::unique_ptr<WholeStepState> whole_;
};

}  // namespace gengraph

// Generation: the checks before any work (prompts, settings, memory), the pipeline built from the
// settings, then the decoding loop, one loop for every backend, strategy and mode:
//
//   logits = backend.prefill(prompt)
//   decide(logits)                      strategy.step(logits, processors, sequences, stopping)
//   until the strategy stops running:   step = forward(next tokens, positions + 1, parents)
//                                              + decide(logits)
//
// over one form of the sequences (token_history.h: a fixed buffer and its length) and one
// implementation of every part. It runs in one of two modes, chosen per generation:
//  - the host loop: the length is known on the host, the forward is ForwardBackend::decode, and
//    the `running` flag is read after every step. Any backend, any part, streaming.
//  - the whole step: the length lives on the device, the forward is the backend's StaticDecode
//    over fixed buffers (the chosen tokens, positions and parents are written into them), and the
//    flag is read only every `sync_every` steps: the steps run past the end change nothing. With
//    `capture` (CUDA) the step is recorded once as a CUDA graph and replayed; uncaptured it runs
//    on any device (the CPU tests run it so). Every part says whether it can take part
//    (whole_step_blocker()), as does the backend (static_decode()).
//
// The Generator owns what the loop runs over: the pipeline, the sequences' buffer, the flags and,
// in the whole step, the graph captured over them and the backend's static buffers. It keeps them
// after a whole-step generation for the next one of the same shape on the same backend, which then
// replays the graph from the first decode step; the host loop starts afresh each time.
#pragma once

#include <gengraph/generation.h>
#include <gengraph/stream.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "framework/backend/forward_backend.h"
#include "framework/decoding/loop_options.h"
#include "framework/decoding/pipeline.h"
#include "framework/decoding/plan.h"
#include "framework/decoding/resolved_settings.h"
#include "framework/model/model_config.h"

namespace gengraph {

// "" when the whole step can run with this pipeline and backend (static_decode() is asked, so
// call after prepare()), else the first reason it cannot, naming the part.
std::string whole_step_blocker(const Pipeline& pipe, ForwardBackend& backend, bool streaming,
                               const LoopOptions& options);

class Generator {
 public:
  // `sync` waits for the device (CUDA) so that timings are true; empty on CPU.
  Generator(ResolvedSettings config, std::function<void()> sync = {}, LoopOptions loop = {});
  // A copy has the same settings and none of the kept whole-step loop.
  Generator(const Generator& other);
  Generator(Generator&&) noexcept;
  ~Generator();

  // prompts: token ids per input, ragged allowed (left-padded here as transformers does).
  // `stream`, when given, receives each token as it is chosen (gengraph/stream.h); on CUDA that
  // adds one device-to-host copy per step. Not thread-safe: one Generator per thread.
  // Makes the plan (plan.h) for this Generator's settings and `backend`, then executes it.
  Generation generate(ForwardBackend& backend, const std::vector<std::vector<int64_t>>& prompts,
                      const TokenStream& stream = {});
  // Executes `plan` (made for these prompts and `backend`, with this Generator's settings): its
  // pipeline when no generation has taken it yet, its memory estimate for allocation failures.
  // Nothing is resolved, built or estimated twice.
  Generation generate(ForwardBackend& backend, GenerationPlan& plan,
                      const std::vector<std::vector<int64_t>>& prompts,
                      const TokenStream& stream = {});
  const ResolvedSettings& config() const { return config_; }
  const LoopOptions& loop() const { return loop_; }

 private:
  // generate() after its checks: sets up the loop (or keeps the whole step's), runs it.
  Generation run_checked(ForwardBackend& backend, const std::vector<std::vector<int64_t>>& prompts,
                         const TokenStream& stream, Pipeline pipe, const GenerationPlan& plan);
  // Whether the kept whole-step loop can run this generation on `backend` as it is.
  bool serves(ForwardBackend& backend, int64_t rows, int64_t max_length,
              int64_t prompt_length) const;
  // Makes the loop's state for this shape (the whole step's buffers when `whole_step`).
  void set_up(ForwardBackend& backend, Pipeline pipe, int64_t rows, int64_t max_length,
              int64_t prompt_length, bool whole_step);
  // Drops the loop's state (its buffers, pipeline and graph).
  void forget();
  // The loop (generator_loop.cpp): lays the prompts out (left-padded with `pad`), prefills and
  // decides until the strategy stops; fills `out`'s times and loop report.
  void run_loop(const std::vector<std::vector<int64_t>>& prompts, int64_t pad,
                const TokenStream& stream, Generation& out);
  // Speculative decoding's loop (generator_loop.cpp), one prompt and one sequence: the pipeline's
  // candidates verified in one forward per step, decided position by position.
  void run_speculative(const std::vector<int64_t>& prompt, int64_t pad, const TokenStream& stream,
                       Generation& out);

  ResolvedSettings config_;
  nlohmann::json settings_;  // config_.to_json(), made once: every Generation carries it
  std::function<void()> sync_;
  LoopOptions loop_;

  // The loop's state.
  ForwardBackend* backend_ = nullptr;
  StaticDecode* static_decode_ = nullptr;  // the whole step's forward, else nullptr
  int64_t rows_ = 0, max_length_ = 0, prompt_length_ = 0, per_input_ = 1;
  Pipeline pipe_;
  TokenHistory seqs_;
  at::Tensor written_;     // the whole step's length ([] int64)
  at::Tensor running_;     // [] bool: the last decision's `running`
  at::Tensor live_steps_;  // [] int64: decisions made while running (the whole step)
  // [max_length] double (the whole step): the sum of the logits of the decode step that wrote
  // each slot, finite exactly when they all were; read where the flag is read.
  at::Tensor logit_sums_;
  // The storage of the backend's static buffers as the graph was captured over them.
  std::vector<const void*> captured_over_;
  bool reorder_ = false;          // the strategy reorders rows (parent_rows defined)
  std::function<void()> replay_;  // the captured step (step_graph.h), once captured
};

}  // namespace gengraph

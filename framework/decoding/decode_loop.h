// The decoding loop: one loop for every backend, strategy and mode.
//
//   logits = backend.prefill(prompt)
//   decide(logits)                      strategy.step(logits, processors, sequences, stopping)
//   until the strategy stops running:   step = forward(next tokens, positions + 1, parents)
//                                              + decide(logits)
//
// over one form of the sequences (sequences.h: a fixed buffer and its length) and one
// implementation of every part. It runs in one of two modes, chosen per generation:
//  - the host loop: the length is known on the host, the forward is ForwardBackend::decode, and
//    the `running` flag is read after every step. Any backend, any part, streaming.
//  - the whole step: the length lives on the device, the forward is the backend's StaticDecode
//    over fixed buffers (the chosen tokens, positions and parents are written into them), and the
//    flag is read only every `sync_every` steps: the steps run past the end change nothing. With
//    `capture` (CUDA) the step is recorded once as a CUDA graph and replayed; uncaptured it runs
//    on any device (the CPU tests run it so). Every part says whether it can take part
//    (whole_step_blocker()), as does the backend (static_decode()).
#pragma once

#include <gengraph/stream.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "framework/backend/forward_backend.h"
#include "framework/decoding/loop_options.h"
#include "framework/decoding/pipeline.h"

namespace gengraph {

class StepGraph;

// "" when the whole step can run with this pipeline and backend (static_decode() is asked, so
// call after prepare()), else the first reason it cannot, naming the part.
std::string whole_step_blocker(const Pipeline& pipe, ForwardBackend& backend, bool streaming,
                               const LoopOptions& options);

struct GenerationTiming {
  double time_to_first_token_s = 0;  // prefill + choosing the first token
  double total_s = 0;
  int64_t steps = 0;  // tokens generated per row (decisions made while the strategy ran)
};

// The loop with what it owns: the pipeline, the sequences' buffer, the flags and, in the whole
// step, the backend's static buffers it writes and the graph captured over all of them. A loop in
// the whole step is kept for the next generation of the same shape on the same backend, which
// then replays its graph from the first decode step (serves()).
class DecodeLoop {
 public:
  DecodeLoop(ForwardBackend& backend, Pipeline pipe, int64_t rows, int64_t max_length,
             int64_t prompt_length, bool whole_step);
  ~DecodeLoop();
  DecodeLoop(const DecodeLoop&) = delete;
  DecodeLoop& operator=(const DecodeLoop&) = delete;

  // Whether this loop can run a whole-step generation of this shape on `backend` as it is.
  bool serves(ForwardBackend& backend, int64_t rows, int64_t max_length,
              int64_t prompt_length) const;
  // One generation: lays the prompts out (left-padded with `pad`, as transformers does; ragged
  // allowed), prefills and decides until the strategy stops. `sync` waits for the device
  // (timings); `stream` gets each token as it is chosen (host loop only).
  void run(const std::vector<std::vector<int64_t>>& prompts, int64_t pad,
           const LoopOptions& options, const TokenStream& stream, const std::function<void()>& sync,
           GenerationTiming& timing, LoopReport& report);
  std::vector<std::vector<Hypothesis>> finalize() { return pipe_.strategy->finalize(seqs_); }

 private:
  ForwardBackend* backend_;
  StaticDecode* static_decode_ = nullptr;  // the whole step's forward, else nullptr
  int64_t rows_, max_length_, prompt_length_, per_input_;
  Pipeline pipe_;
  Sequences seqs_;
  at::Tensor written_;           // the whole step's length ([] int64)
  at::Tensor running_;           // [] bool: the last decision's `running`
  at::Tensor live_steps_;        // [] int64: decisions made while running (the whole step)
  StaticDecodeBuffers buffers_;  // the backend's, as a graph was captured over them
  bool reorder_ = false;         // the strategy reorders rows (parent_rows defined)
  std::unique_ptr<StepGraph> graph_;
};

}  // namespace gengraph

// Generation: the checks before any work (prompts, settings, memory), the pipeline built from the
// settings, then the decoding loop (decode_loop.h) in the host loop or the whole step.
#pragma once

#include <gengraph/stream.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "framework/backend/forward_backend.h"
#include "framework/decoding/decode_loop.h"
#include "framework/decoding/generation_config.h"
#include "framework/model/model_config.h"

namespace gengraph {

struct GenerationResult {
  std::vector<std::vector<Hypothesis>> outputs;  // per input prompt, best first
  int64_t prompt_length = 0;                     // padded
  int64_t rows = 0;                              // batch x rows_per_input
  GenerationTiming timing;
  LoopReport loop;  // whole step or host loop (decode_loop.h)
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
  // A copy has the same settings and none of the whole-step loop (below).
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
  // generate() after its checks (prompts, settings, the memory estimate).
  GenerationResult run_checked(ForwardBackend& backend,
                               const std::vector<std::vector<int64_t>>& prompts,
                               const TokenStream& stream, Pipeline pipe, int64_t prompt_len,
                               int64_t max_length) const;

  GenerationConfig config_;
  std::function<void()> sync_;
  LoopOptions loop_;
  // The last whole-step generation's loop: its buffers, pipeline and graph (generate() is const,
  // and not thread-safe with the whole step: one Generator per thread).
  mutable std::unique_ptr<DecodeLoop> whole_;
};

}  // namespace gengraph

// A search strategy turns next-token logits into the next tokens of every row, and at the end into
// the returned sequences. It never sees a backend; the Generator moves tensors between the two.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "framework/decoding/processors/logits_processor.h"
#include "framework/decoding/sequences.h"
#include "framework/decoding/stopping/stopping_criteria.h"

namespace gengraph {

struct Hypothesis {
  std::vector<int64_t> tokens;  // generated tokens (no prompt, no padding)
  std::optional<double> score;  // set by strategies that score sequences (beam search)
};

struct StepDecision {
  at::Tensor next_tokens;  // [rows] int64, already appended to the sequences
  at::Tensor parent_rows;  // [rows] int64, or undefined when rows keep their own history
  bool done = false;       // no further forward step is needed
  // [rows] bool: which of next_tokens belong to their row's output (false for the padding a
  // finished row receives). Set by strategies that stream (streams()); undefined otherwise.
  at::Tensor emitted;
};

// Makes `t` a tensor of `sizes` and `options` filled with `value`: in place when it already is one
// (so that a graph captured over it in an earlier generation stays valid), allocated otherwise.
// Strategies' begin() sets their state with it.
void refill(at::Tensor& t, at::IntArrayRef sizes, const at::TensorOptions& options,
            const at::Scalar& value);

// What the whole-step form of a step decides, all of it on the device. The tensors may be the
// strategy's own state: the loop copies them into its buffers before the next step.
struct DeviceDecision {
  at::Tensor next_tokens;  // [rows] int64, already written into the sequences
  at::Tensor parent_rows;  // [rows] int64, or undefined when the strategy never reorders rows
  at::Tensor done;         // [] bool: no further step can change what finalize() returns
};

class SearchStrategy {
 public:
  virtual ~SearchStrategy() = default;
  virtual std::string name() const = 0;
  // Rows per input prompt (num_beams for beam strategies).
  virtual int64_t rows_per_input() const { return 1; }
  // True when every chosen token is final as soon as it is chosen, so it can be streamed
  // (StepDecision::emitted says which are output). Beam strategies are not.
  virtual bool streams() const { return false; }
  // Called once after the prompt is laid out, before the first step.
  virtual void begin(const Sequences& seqs) = 0;
  // logits: [rows, vocab] float32. Runs `processors` as the strategy requires, chooses the next
  // tokens, appends them to `seqs` (reordering rows when it changes parents), and consults `stop`.
  virtual StepDecision step(const at::Tensor& logits, const LogitsProcessor& processors,
                            Sequences& seqs, const StoppingCriteria& stop) = 0;
  // The returned sequences for each input, best first.
  virtual std::vector<std::vector<Hypothesis>> finalize(const Sequences& seqs) = 0;

  // The whole-step form (framework/decoding/whole_step.h). "" when device_step() exists: it is
  // step() over the static form of Sequences (begin() got that form too), with fixed shapes, no
  // host reads and state updated in place, so that a CUDA graph can replay it; and once its
  // `done` is true, further calls change nothing finalize() returns (a loop that reads the flag
  // only every few steps runs a few steps past the end). Otherwise why not.
  virtual std::string whole_step_blocker() const {
    return "search strategy '" + name() + "' has no whole-step form (SearchStrategy::device_step)";
  }
  virtual DeviceDecision device_step(const at::Tensor& logits, const LogitsProcessor& processors,
                                     Sequences& seqs, const StoppingCriteria& stop);
  // Whether device_step() reorders rows (its parent_rows are defined).
  virtual bool reorders_rows() const { return false; }
};

}  // namespace gengraph

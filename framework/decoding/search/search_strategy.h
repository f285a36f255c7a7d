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
};

}  // namespace gengraph

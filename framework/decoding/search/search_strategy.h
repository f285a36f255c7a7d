// A search strategy turns next-token logits into the next tokens of every row, and at the end into
// the returned sequences. It never sees a backend; the Generator moves tensors between the two.
#pragma once

#include <ATen/Tensor.h>
#include <gengraph/error.h>
#include <gengraph/generation.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "framework/decoding/processors/logits_processor.h"
#include "framework/decoding/sequences.h"
#include "framework/decoding/stopping/stopping_criteria.h"

namespace gengraph {

// What a step decides. The tensors may be the strategy's own state: the loop reads or copies them
// before the next step.
struct StepDecision {
  at::Tensor next_tokens;  // [rows] int64, already written into the sequences
  at::Tensor parent_rows;  // [rows] int64, or undefined when the strategy never reorders rows
  // [] bool: a further step can still change what finalize() returns. The host loop reads it
  // after every step, the whole step every sync_every steps.
  at::Tensor running;
  // [rows] bool: which of next_tokens belong to their row's output (false for the padding a
  // finished row receives), and which rows go on after them (false: that token was the row's
  // last). Set by strategies that stream (streams()), in the host loop (the only one that
  // streams); undefined otherwise.
  at::Tensor emitted, continues;
  // [rows] float32: each token's score (its log-probability), when the strategy scores tokens.
  at::Tensor token_scores;
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
  // True when it was built to score its tokens (output_scores): finalize() then fills
  // Sequence::token_scores and score. A strategy that cannot is refused with output_scores.
  virtual bool scores_tokens() const { return false; }
  // Called once after the prompt is laid out, before the first step.
  virtual void begin(const Sequences& seqs) = 0;
  // logits: [rows, vocab] float32. Runs `processors` as the strategy requires, chooses the next
  // tokens, writes them into column `seqs.length` of `seqs.buffer` (reordering rows when it
  // changes parents), advances the length by one, and consults `stop`.
  //
  // One implementation serves both loops (sequences.h): the length is on the host in the host
  // loop and on the device in the whole step, and the helpers there do the least work each
  // allows. In the whole step the loop reads `running` only every few steps, so a step must have
  // fixed shapes, no host reads, state updated in place (keep(), refill()), and once `running`
  // is false it must change nothing finalize() returns.
  virtual StepDecision step(const at::Tensor& logits, const LogitsProcessor& processors,
                            Sequences& seqs, const StoppingCriteria& stop) = 0;
  // True when step() draws each row's token from the softmax of the processed scores (plain
  // multinomial sampling): speculative sampling may then choose the token by its own rule from
  // the same distribution, through step_choosing().
  virtual bool samples() const { return false; }
  // step() with the next token of every row chosen by `choose` ([rows, vocab] processed scores ->
  // [rows] int64) instead of by the strategy's own rule; the rest (scores, padding, stopping) as
  // step() does it. Called only when samples() is true.
  virtual StepDecision step_choosing(const at::Tensor& logits, const LogitsProcessor& processors,
                                     Sequences& seqs, const StoppingCriteria& stop,
                                     const std::function<at::Tensor(const at::Tensor&)>& choose) {
    (void)logits, (void)processors, (void)seqs, (void)stop, (void)choose;
    throw Error("internal: search strategy '" + name() + "' does not sample (samples() is false)");
  }
  // The returned sequences for each input, best first.
  virtual std::vector<std::vector<Sequence>> finalize(const Sequences& seqs) = 0;

  // "" when step() meets the whole step's conditions above, so that the step can run with the
  // length on the device and be captured as a CUDA graph; otherwise why not.
  virtual std::string whole_step_blocker() const {
    return "search strategy '" + name() +
           "' does not say it can run in a whole-step graph (SearchStrategy::whole_step_blocker)";
  }
};

}  // namespace gengraph

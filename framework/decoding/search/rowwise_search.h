// Strategies that extend every row independently (greedy, sampling): transformers' _sample loop.
// A finished row receives pad tokens from then on and its returned length stops growing.
#pragma once

#include <optional>

#include "framework/decoding/search/search_strategy.h"

namespace gengraph {

class RowwiseSearch : public SearchStrategy {
 public:
  // `score_tokens`: record each token's log-probability under the processed distribution
  // (output_scores).
  explicit RowwiseSearch(std::optional<int64_t> pad_token_id, bool score_tokens = false)
      : pad_token_id_(pad_token_id), score_tokens_(score_tokens) {}
  bool streams() const override { return true; }
  bool scores_tokens() const override { return score_tokens_; }
  void begin(const Sequences& seqs) override;
  StepDecision step(const at::Tensor& logits, const LogitsProcessor& processors, Sequences& seqs,
                    const StoppingCriteria& stop) override;
  StepDecision step_choosing(const at::Tensor& logits, const LogitsProcessor& processors,
                             Sequences& seqs, const StoppingCriteria& stop,
                             const std::function<at::Tensor(const at::Tensor&)>& choose) override;
  std::vector<std::vector<Sequence>> finalize(const Sequences& seqs) override;

 protected:
  // scores: [rows, vocab] float32, processed -> [rows] int64. A strategy whose choice reads
  // nothing back to the host and keeps its shapes overrides whole_step_blocker() with "".
  virtual at::Tensor choose(const at::Tensor& scores) = 0;

 private:
  // The step after the choice: scores, padding, the column written, stopping.
  StepDecision advance(const at::Tensor& scores, at::Tensor next, Sequences& seqs,
                       const StoppingCriteria& stop);
  std::optional<int64_t> pad_token_id_;
  bool score_tokens_ = false;
  at::Tensor unfinished_;    // [rows] bool
  at::Tensor lengths_;       // [rows] int64, generated tokens counted while unfinished
  at::Tensor token_scores_;  // [rows, capacity] float32 (score_tokens_): by the token's column
};

class GreedySearch final : public RowwiseSearch {
 public:
  using RowwiseSearch::RowwiseSearch;
  std::string name() const override { return "greedy"; }
  std::string whole_step_blocker() const override { return ""; }

 protected:
  at::Tensor choose(const at::Tensor& scores) override;
};

// transformers' multinomial sampling: softmax of the processed scores, then one draw per row from
// the default generator (seeded runs reproduce transformers' draws; see docs/parity.md).
class SampleSearch final : public RowwiseSearch {
 public:
  SampleSearch(std::optional<int64_t> pad_token_id, int64_t num_return_sequences,
               bool score_tokens = false)
      : RowwiseSearch(pad_token_id, score_tokens), per_input_(num_return_sequences) {}
  std::string name() const override { return "sample"; }
  std::string whole_step_blocker() const override { return ""; }
  bool samples() const override { return true; }
  int64_t rows_per_input() const override { return per_input_; }

 protected:
  // The draw at::multinomial makes, without its host-side validity checks: softmax, Exp(1) noise
  // from the same generator, argmax of p / noise (the same generator calls, hence the same tokens).
  at::Tensor choose(const at::Tensor& scores) override;

 private:
  int64_t per_input_;
};

}  // namespace gengraph

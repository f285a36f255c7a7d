// Beam search and beam sampling, vectorised over the batch as transformers 5.17's _beam_search:
// K = max(2, 1 + n_eos) * num_beams candidates per input each step (top-K, or drawn without
// replacement when sampling), the best num_beams unfinished candidates continue, and candidates
// that hit a stopping criterion among the top num_beams enter the finished pool scored
// sum_logprobs / generated_length ** length_penalty, subject to early_stopping.
#pragma once

#include "framework/decoding/resolved_settings.h"
#include "framework/decoding/search/search_strategy.h"

namespace gengraph {

struct BeamSearchOptions {
  int64_t num_beams = 1;
  double length_penalty = 1.0;
  EarlyStopping early_stopping = EarlyStopping::kFalse;
  int64_t num_return_sequences = 1;
  bool do_sample = false;
  int64_t n_eos = 0;
  int64_t max_length = 0;      // resolved total length
  int64_t fill_token = -1;     // transformers: (pad or eos[0]) if eos is set, else -1
  bool output_scores = false;  // record each token's processed log-probability
};

class BeamSearch final : public SearchStrategy {
 public:
  explicit BeamSearch(BeamSearchOptions options);
  std::string name() const override { return options_.do_sample ? "beam_sample" : "beam_search"; }
  int64_t rows_per_input() const override { return options_.num_beams; }
  bool scores_tokens() const override { return options_.output_scores; }
  void begin(const TokenHistory& seqs) override;
  StepDecision step(const at::Tensor& logits, const LogitsProcessor& processors, TokenHistory& seqs,
                    const StoppingCriteria& stop) override;
  std::vector<std::vector<Sequence>> finalize(const TokenHistory& seqs) override;
  std::string whole_step_blocker() const override { return ""; }

 private:
  BeamSearchOptions options_;
  int64_t batch_ = 0, prompt_len_ = 0, candidates_ = 0;
  at::Tensor running_scores_;  // [B, nb] float32
  at::Tensor fin_tokens_;      // [B, nb, max_length] int64, finished hypotheses
  at::Tensor fin_scores_;      // [B, nb] float32
  at::Tensor fin_lengths_;     // [B, nb] int64, generated tokens of each finished hypothesis
  at::Tensor is_finished_;     // [B, nb] bool
  at::Tensor improvable_;      // [B, 1] bool (transformers' is_early_stop_heuristic_unsatisfied)
  at::Tensor top_mask_;        // [K] bool, the first num_beams candidates
  at::Tensor row_base_;        // [B, 1] int64: b * num_beams, the first row of each input
  at::Tensor running_;         // [] bool: the search goes on
  // output_scores: each token's processed log-probability, by the token's column, for the
  // running beams [B, nb, capacity] and the finished hypotheses [B, nb, max_length].
  at::Tensor running_token_scores_, fin_token_scores_;
};

}  // namespace gengraph

// Diverse (group) beam search (Vijayakumar et al. 2016), as transformers 4.55 implemented it before
// moving it out of its core: num_beams split into num_beam_groups groups searched one after the
// other each step; a group's scores are lowered by diversity_penalty x how often earlier groups
// chose each token this step (Hamming diversity). Each (input, group) keeps its own finished
// hypotheses; the returned sequences are the best over all groups.
#pragma once

#include <memory>

#include "framework/decoding/resolved_settings.h"
#include "framework/decoding/search/beam_search.h"
#include "framework/decoding/search/search_strategy.h"

namespace gengraph {

// What the Hamming-diversity processor needs from the strategy during a group's step.
struct DiverseBeamState {
  at::Tensor current_tokens;  // [B * num_beams] int64: tokens chosen so far this step
  int64_t group = 0;          // the group being processed
  int64_t num_beams = 1;
  int64_t group_size = 1;
};

// transformers' HammingDiversityLogitsProcessor: scores of group g's rows minus
// penalty x (count of each token among groups 0..g-1 of the same input this step).
class HammingDiversity final : public LogitsProcessor {
 public:
  HammingDiversity(std::shared_ptr<const DiverseBeamState> state, double penalty)
      : state_(std::move(state)), penalty_(penalty) {}
  std::string name() const override { return "hamming_diversity"; }
  at::Tensor process(const TokenHistory& seqs, at::Tensor scores) const override;
  std::string whole_step_blocker() const override { return ""; }

 private:
  std::shared_ptr<const DiverseBeamState> state_;
  double penalty_;
};

// Beam settings shared with BeamSearch, plus the groups (no sampling: validated elsewhere).
struct GroupBeamSearchOptions : BeamSearchOptions {
  int64_t num_beam_groups = 2;
  std::vector<int64_t> eos;
  int64_t pad_token = 0;  // appended by groups that are done (transformers needs one)
};

class GroupBeamSearch final : public SearchStrategy {
 public:
  GroupBeamSearch(GroupBeamSearchOptions options, std::shared_ptr<DiverseBeamState> state);
  std::string name() const override { return "group_beam_search"; }
  int64_t rows_per_input() const override { return options_.num_beams; }
  bool scores_tokens() const override { return options_.output_scores; }
  void begin(const TokenHistory& seqs) override;
  // The pools are fixed tensors: each add is transformers' BeamHypotheses.add (evict the lowest
  // score, the oldest among equals) done for every input at once; finalize() reads them back.
  StepDecision step(const at::Tensor& logits, const LogitsProcessor& processors, TokenHistory& seqs,
                    const StoppingCriteria& stop) override;
  std::vector<std::vector<Sequence>> finalize(const TokenHistory& seqs) override;
  std::string whole_step_blocker() const override { return ""; }

 private:
  struct Finished {
    double score;
    std::vector<int64_t> tokens;       // generated tokens, EOS included when it ended with one
    std::vector<double> token_scores;  // output_scores: each token's processed log-probability
  };
  // transformers' BeamHypotheses: at most group_size entries, the worst evicted.
  struct Pool {
    std::vector<Finished> beams;
    double worst = 1e9;
    bool done = false;
  };
  // The host form of a pool add, for the running beams finalize() adds at the end.
  void add(Pool& pool, double sum_logprobs, Finished hyp, int64_t generated_len) const;
  // Adds the candidates `valid` [B] with `score` [B] float64, tokens `hyp` [B, cap] of `length`
  // [] generated tokens (output_scores: their token scores `hyp_scores` [B, cap]), to group g's
  // pools, in order `key` [].
  void add_to_pools(int64_t g, const at::Tensor& valid, const at::Tensor& score,
                    const at::Tensor& hyp, const at::Tensor& hyp_scores, const at::Tensor& length,
                    const at::Tensor& key);
  // The pools as host pools (finalize).
  std::vector<Pool> read_pools() const;

  GroupBeamSearchOptions options_;
  std::shared_ptr<DiverseBeamState> state_;
  int64_t batch_ = 0, prompt_len_ = 0, group_size_ = 1;
  at::Tensor beam_scores_;  // [B * num_beams] float32
  // [B, groups, ...]: the pools' scores (float64), insertion keys, tokens (full rows), generated
  // lengths, sizes and done flags; the tokens chosen this step (what HammingDiversity reads);
  // whether the search has ended; the length it ended at ([] int64).
  at::Tensor pool_scores_, pool_keys_, pool_tokens_, pool_lengths_, pool_sizes_, pool_done_;
  at::Tensor current_, done_, end_length_, eos_;
  // output_scores: each token's processed log-probability (after Hamming diversity) by its
  // column, for the running beams [B * num_beams, cap] and the pools [B, groups, gs, cap].
  at::Tensor running_token_scores_, pool_token_scores_;
};

}  // namespace gengraph

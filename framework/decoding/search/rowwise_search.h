// gengraph's row-wise strategies, greedy search and sampling. Their base, RowwiseSearch
// (transformers' _sample loop), is public: <gengraph/ext/decoding.h>.
#pragma once

#include <gengraph/ext/decoding.h>

#include <optional>

namespace gengraph {

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
               bool score_tokens = false, int64_t top_logprobs = 0)
      : RowwiseSearch(pad_token_id, score_tokens, top_logprobs), per_input_(num_return_sequences) {}
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

// Prompt lookup (transformers' PromptLookupCandidateGenerator, prompt_lookup_num_tokens): the
// candidates are what followed an earlier occurrence of the row's last n tokens, in the prompt or
// the output so far. Inputs that repeat, quote or summarise their prompt (code edits,
// retrieval-grounded answers, "repeat the passage") accept many candidates at a time.
#pragma once

#include "framework/decoding/candidates/candidate_generator.h"

namespace gengraph {

class PromptLookup final : public CandidateGenerator {
 public:
  // `num_tokens`: candidates per proposal (transformers' prompt_lookup_num_tokens, its
  // num_output_tokens); `max_ngram`: the longest suffix matched (max_matching_ngram_size,
  // transformers' default 2); `eos`: candidates end before the first of these.
  PromptLookup(int64_t num_tokens, int64_t max_ngram, std::vector<int64_t> eos);
  std::string name() const override { return "prompt_lookup"; }
  // As transformers does: n from min(max_ngram, length - 1) down to 1, the first earlier window
  // (left to right) equal to the last n tokens that is followed by at least one token gives up to
  // num_tokens of those tokens; candidates the processors ban are dropped (a window left with none
  // is passed over), then cut before the first EOS.
  std::vector<int64_t> propose(
      const std::vector<int64_t>& history, int64_t max,
      const std::function<size_t(const std::vector<int64_t>&)>& allowed) override;

 private:
  int64_t num_tokens_, max_ngram_;
  std::vector<int64_t> eos_;
};

}  // namespace gengraph

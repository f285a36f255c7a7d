// Processors that penalise repetition or length, reading the token history.
#pragma once

#include <cstdint>
#include <vector>

#include "framework/decoding/processors/logits_processor.h"

namespace gengraph {

// transformers' RepetitionPenaltyLogitsProcessor: every token present in the row's history (padded
// prompt included, as transformers does) has its score divided by the penalty when positive and
// multiplied when negative.
class RepetitionPenalty final : public LogitsProcessor {
 public:
  explicit RepetitionPenalty(double penalty);
  std::string name() const override { return "repetition_penalty"; }
  at::Tensor process(const TokenHistory& seqs, at::Tensor scores) const override;
  std::string whole_step_blocker() const override { return ""; }

 private:
  double penalty_;
};

// gengraph extension (OpenAI / vLLM semantics): over the *generated* tokens only,
// score -= frequency * count(token) + presence * (count(token) > 0).
class FrequencyPresencePenalty final : public LogitsProcessor {
 public:
  FrequencyPresencePenalty(double frequency, double presence);
  std::string name() const override { return "frequency_presence_penalty"; }
  at::Tensor process(const TokenHistory& seqs, at::Tensor scores) const override;
  std::string whole_step_blocker() const override { return ""; }

 private:
  double frequency_, presence_;
};

// transformers' NoRepeatNGramLogitsProcessor: bans any token that would repeat an n-gram already
// present in the row's history (padded prompt included).
class NoRepeatNGram final : public LogitsProcessor {
 public:
  explicit NoRepeatNGram(int64_t n);
  std::string name() const override { return "no_repeat_ngram"; }
  at::Tensor process(const TokenHistory& seqs, at::Tensor scores) const override;
  std::string whole_step_blocker() const override { return ""; }

 private:
  int64_t n_;
};

// transformers' ExponentialDecayLengthPenalty: after `start` new tokens, raises the EOS scores by
// |score| * (factor^(steps past start) - 1).
class ExponentialDecayLengthPenalty final : public LogitsProcessor {
 public:
  ExponentialDecayLengthPenalty(int64_t start, double factor, std::vector<int64_t> eos);
  std::string name() const override { return "exponential_decay_length_penalty"; }
  at::Tensor process(const TokenHistory& seqs, at::Tensor scores) const override;
  std::string whole_step_blocker() const override { return ""; }

 private:
  int64_t start_;
  double factor_;
  std::vector<int64_t> eos_;
  mutable at::Tensor eos_ids_;  // eos_ on the scores' device (ids_on_device)
};

}  // namespace gengraph

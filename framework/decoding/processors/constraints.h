// Processors that force, forbid or bias particular tokens.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "framework/decoding/processors/logits_processor.h"

namespace gengraph {

// transformers' SequenceBiasLogitsProcessor: adds `bias` to a sequence's last token when the row's
// history ends with the sequence's other tokens (always, for one-token sequences). Later entries
// with the same tokens replace earlier ones, as in transformers' dict.
class SequenceBias : public LogitsProcessor {
 public:
  SequenceBias(std::vector<std::pair<std::vector<int64_t>, double>> biases, int64_t vocab);
  std::string name() const override { return "sequence_bias"; }
  at::Tensor process(const TokenHistory& seqs, at::Tensor scores) const override;
  std::string whole_step_blocker() const override { return ""; }

 private:
  std::vector<std::pair<std::vector<int64_t>, double>> multi_;  // length >= 2
  std::vector<std::pair<int64_t, double>> single_;
  mutable at::Tensor single_bias_;  // [vocab] float32, on the scores' device
  mutable std::vector<at::Tensor>
      multi_on_device_;  // each multi_ sequence on the device (ids_on_device)
};

// transformers' NoBadWordsLogitsProcessor: a sequence bias of -inf; a single-token bad word equal
// to an EOS id is dropped, as transformers does.
class BadWords final : public SequenceBias {
 public:
  BadWords(const std::vector<std::vector<int64_t>>& bad_words, const std::vector<int64_t>& eos,
           int64_t vocab);
  std::string name() const override { return "bad_words"; }
};

// gengraph extension: a fixed additive bias per token id.
class LogitBias final : public LogitsProcessor {
 public:
  LogitBias(std::vector<std::pair<int64_t, double>> bias, int64_t vocab);
  std::string name() const override { return "logit_bias"; }
  at::Tensor process(const TokenHistory& seqs, at::Tensor scores) const override;
  std::string whole_step_blocker() const override { return ""; }

 private:
  std::vector<std::pair<int64_t, double>> bias_;
  mutable at::Tensor dense_;  // [vocab]
};

// Sets the scores of `tokens` to -inf: always (suppress_tokens), or only when the sequence length
// equals `at_length` (begin_suppress_tokens; transformers' begin_index).
class SuppressTokens final : public LogitsProcessor {
 public:
  SuppressTokens(std::vector<int64_t> tokens, std::optional<int64_t> at_length = std::nullopt,
                 bool relative_to_prompt = false);
  std::string name() const override {
    return at_length_ ? "begin_suppress_tokens" : "suppress_tokens";
  }
  at::Tensor process(const TokenHistory& seqs, at::Tensor scores) const override;
  std::string whole_step_blocker() const override { return ""; }

 private:
  std::vector<int64_t> tokens_;
  std::optional<int64_t> at_length_;
  bool relative_;  // at_length counts from the padded prompt length
  mutable at::Tensor mask_;
};

// Forces `tokens` (every other score -inf, theirs 0) when the sequence length equals a trigger:
// forced_bos (length 1) and forced_eos (max_length - 1).
class ForceTokens final : public LogitsProcessor {
 public:
  ForceTokens(std::string name, std::vector<int64_t> tokens, int64_t at_length);
  std::string name() const override { return name_; }
  at::Tensor process(const TokenHistory& seqs, at::Tensor scores) const override;
  std::string whole_step_blocker() const override { return ""; }

 private:
  std::string name_;
  std::vector<int64_t> tokens_;
  int64_t at_length_;
  mutable at::Tensor ids_;  // tokens_ on the scores' device (ids_on_device)
};

// Forbids EOS while too short: min_length counts the whole (padded) sequence, min_new_tokens only
// the generated part.
class MinLength final : public LogitsProcessor {
 public:
  MinLength(int64_t min, std::vector<int64_t> eos, bool new_tokens_only);
  std::string name() const override { return new_only_ ? "min_new_tokens" : "min_length"; }
  at::Tensor process(const TokenHistory& seqs, at::Tensor scores) const override;
  std::string whole_step_blocker() const override { return ""; }

 private:
  int64_t min_;
  std::vector<int64_t> eos_;
  bool new_only_;
  mutable at::Tensor mask_;  // EOS over the vocabulary, built on first use per device
};

}  // namespace gengraph

// gengraph's own stopping criteria. The base classes (StoppingCriterion, StoppingCriteria) are
// public: <gengraph/ext/decoding.h>.
#pragma once

#include <ATen/Tensor.h>
#include <gengraph/ext/decoding.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gengraph {

// Stops every row once the sequence (padded prompt included) reaches max_length tokens.
class MaxLengthCriterion final : public StoppingCriterion {
 public:
  explicit MaxLengthCriterion(int64_t max_length) : max_length_(max_length) {}
  std::string name() const override { return "max_length"; }
  at::Tensor should_stop(const TokenHistory& seqs) const override;
  std::optional<bool> decided_on_host(const TokenHistory& seqs) const override;
  std::string whole_step_blocker() const override { return ""; }
  int64_t max_length() const { return max_length_; }

 private:
  int64_t max_length_;
};

// Stops a row whose last token is one of the EOS ids.
class EosCriterion final : public StoppingCriterion {
 public:
  explicit EosCriterion(std::vector<int64_t> eos_ids) : eos_ids_(std::move(eos_ids)) {}
  std::string name() const override { return "eos"; }
  at::Tensor should_stop(const TokenHistory& seqs) const override;
  std::string whole_step_blocker() const override { return ""; }

 private:
  std::vector<int64_t> eos_ids_;
  mutable at::Tensor eos_;  // [n_eos] int64 on the sequences' device
};

// Stops every row once `seconds` have passed since the criterion was built (transformers'
// max_time).
class MaxTimeCriterion final : public StoppingCriterion {
 public:
  explicit MaxTimeCriterion(double seconds);
  std::string name() const override { return "max_time"; }
  at::Tensor should_stop(const TokenHistory& seqs) const override;
  std::optional<bool> decided_on_host(const TokenHistory& seqs) const override;
  std::string whole_step_blocker() const override {
    return "stopping criterion 'max_time' reads the host clock at every step";
  }

 private:
  double seconds_;
  std::chrono::steady_clock::time_point start_;
};

// Stops a row whose tokens end with one of the stop sequences (gengraph extension: token ids).
class StopSequencesCriterion final : public StoppingCriterion {
 public:
  explicit StopSequencesCriterion(std::vector<std::vector<int64_t>> sequences)
      : sequences_(std::move(sequences)), on_device_(sequences_.size()) {}
  std::string name() const override { return "stop_sequences"; }
  at::Tensor should_stop(const TokenHistory& seqs) const override;
  std::string whole_step_blocker() const override { return ""; }

 private:
  std::vector<std::vector<int64_t>> sequences_;
  mutable std::vector<at::Tensor>
      on_device_;  // each of sequences_ on the tokens' device (ids_on_device)
};

}  // namespace gengraph

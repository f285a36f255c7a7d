// Stopping criteria: each says, per row, whether that row is done after the token just appended.
#pragma once

#include <ATen/Tensor.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "framework/decoding/sequences.h"

namespace gengraph {

class StoppingCriterion {
 public:
  virtual ~StoppingCriterion() = default;
  virtual std::string name() const = 0;
  // -> [rows] bool
  virtual at::Tensor should_stop(const Sequences& seqs) const = 0;
  // The same answer for every row, known on the host without device work (max_length from a
  // length the host knows, max_time from the clock), or nullopt. StoppingCriteria then skips the
  // member's tensor: fewer operators for the host loop to issue.
  virtual std::optional<bool> decided_on_host(const Sequences&) const { return std::nullopt; }
  // As LogitsProcessor::whole_step_blocker: "" when should_stop() reads no value back to the host
  // and keeps its shapes with the length on the device (sequences.h).
  virtual std::string whole_step_blocker() const;
};

// Stops every row once the sequence (padded prompt included) reaches max_length tokens.
class MaxLengthCriterion final : public StoppingCriterion {
 public:
  explicit MaxLengthCriterion(int64_t max_length) : max_length_(max_length) {}
  std::string name() const override { return "max_length"; }
  at::Tensor should_stop(const Sequences& seqs) const override;
  std::optional<bool> decided_on_host(const Sequences& seqs) const override;
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
  at::Tensor should_stop(const Sequences& seqs) const override;
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
  at::Tensor should_stop(const Sequences& seqs) const override;
  std::optional<bool> decided_on_host(const Sequences& seqs) const override;
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
  at::Tensor should_stop(const Sequences& seqs) const override;
  std::string whole_step_blocker() const override { return ""; }

 private:
  std::vector<std::vector<int64_t>> sequences_;
  mutable std::vector<at::Tensor>
      on_device_;  // each of sequences_ on the tokens' device (ids_on_device)
};

class StoppingCriteria {
 public:
  void add(std::shared_ptr<StoppingCriterion> c) { members_.push_back(std::move(c)); }
  // -> [rows] bool: any member says stop
  at::Tensor should_stop(const Sequences& seqs) const;
  bool has(const std::string& name) const;
  std::string whole_step_blocker() const;  // the first member's
  size_t size() const { return members_.size(); }

 private:
  std::vector<std::shared_ptr<StoppingCriterion>> members_;
};

}  // namespace gengraph

// A logits processor rewrites next-token scores. The chain of processors is itself a processor,
// and can time each member.
#pragma once

#include <ATen/Tensor.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "framework/decoding/sequences.h"

namespace gengraph {

class LogitsProcessor {
 public:
  virtual ~LogitsProcessor() = default;
  virtual std::string name() const = 0;
  // scores: [rows, vocab] float32 -> [rows, vocab] float32 (may be modified in place)
  virtual at::Tensor process(const Sequences& seqs, at::Tensor scores) const = 0;
  // "" when process() neither reads a value back to the host nor changes its shapes from step to
  // step with the length on the device (sequences.h), so that the whole decoding step may run
  // inside a CUDA graph (framework/decoding/generator.h); otherwise why not. A processor that
  // does not say is taken to be unable.
  virtual std::string whole_step_blocker() const;
};

class ProcessorChain final : public LogitsProcessor {
 public:
  // A member built here or handed in by the caller (shared: the caller may keep it).
  void add(std::shared_ptr<LogitsProcessor> p) { members_.push_back(std::move(p)); }
  void insert(size_t index, std::shared_ptr<LogitsProcessor> p) {
    members_.insert(members_.begin() + static_cast<std::ptrdiff_t>(index), std::move(p));
  }
  std::string name() const override;
  at::Tensor process(const Sequences& seqs, at::Tensor scores) const override;
  std::string whole_step_blocker() const override;  // the first member's
  bool empty() const { return members_.empty(); }
  size_t size() const { return members_.size(); }
  const LogitsProcessor& at(size_t i) const { return *members_.at(i); }

  // When enabled, each member's wall time is accumulated (seconds) in member order.
  void enable_timing(bool on) {
    timing_ = on;
    seconds_.assign(members_.size(), 0.0);
  }
  const std::vector<double>& member_seconds() const { return seconds_; }

 private:
  std::vector<std::shared_ptr<LogitsProcessor>> members_;
  bool timing_ = false;
  mutable std::vector<double> seconds_;
};

}  // namespace gengraph

// A test fake shared by the tests and the benchmarks: a backend whose forward pass returns the
// first rows of a fixed [N, vocab] logits tensor at every step, so that what runs is everything but
// the model (processors, strategy, stopping, bookkeeping). Token choice is then a function of the
// logits alone, which makes strategies and extension parts testable without weights.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <utility>

#include "framework/backend/forward_backend.h"

namespace gengraph::testing {

class FixedLogitsBackend final : public ForwardBackend, public StaticDecode {
 public:
  // logits: [N, vocab] float on the model's device, N >= the rows of any batch it serves.
  FixedLogitsBackend(std::shared_ptr<const CausalLM> model, at::Tensor logits)
      : ForwardBackend(std::move(model)), logits_(std::move(logits)) {}
  std::string name() const override { return "fixed_logits"; }
  int64_t prefills() const { return prefills_; }
  int64_t decodes() const { return decodes_; }

  // The whole-step loop's forward: the fixed rows copied into a logits buffer.
  StaticDecode* static_decode() override { return this; }
  void start() override {
    slot.fill_(length());
    parents.copy_(at::arange(parents.size(0), parents.options()));
  }
  void run(bool) override {
    ++decodes_;
    logits.copy_(logits_.narrow(0, 0, logits.size(0)));
  }

 protected:
  // The static step's buffers stay put while the shape does (StaticDecode's contract).
  void do_prepare(int64_t rows, int64_t /*max_length*/) override {
    if (ids.defined() && ids.size(0) == rows) return;
    const auto l = logits_.options().dtype(at::kLong);
    ids = at::zeros({rows, 1}, l);
    positions = at::zeros({rows, 1}, l);
    slot = at::zeros({1}, l);
    parents = at::arange(rows, l);
    logits = at::empty({rows, logits_.size(1)}, logits_.options());
  }
  at::Tensor do_prefill(const StepInputs& in, const at::Tensor&) override {
    ++prefills_;
    return rows_of(in);
  }
  at::Tensor do_decode(const StepInputs& in, const at::Tensor&) override {
    ++decodes_;
    return rows_of(in);
  }

 private:
  // A fresh copy, as a real forward pass returns: processors edit their scores in place, which
  // must not change the logits of the next step.
  at::Tensor rows_of(const StepInputs& in) const {
    return logits_.narrow(0, 0, in.input_ids.size(0)).clone();
  }
  at::Tensor logits_;
  int64_t prefills_ = 0, decodes_ = 0;
};

}  // namespace gengraph::testing

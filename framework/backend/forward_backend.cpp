#include "framework/backend/forward_backend.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <vector>

#include "framework/model/causal_lm.h"
#include "framework/util/error.h"

namespace gengraph {

void ForwardBackend::prepare(int64_t rows, int64_t max_length) {
  if (rows <= 0 || max_length <= 0) {
    throw Error("backend '" + name() +
                "': batch shape needs positive rows and max_length, found rows=" +
                std::to_string(rows) + " max_length=" + std::to_string(max_length));
  }
  do_prepare(rows, max_length);
  rows_ = rows;
  max_length_ = max_length;
  length_ = 0;
  prepared_ = true;
}

void ForwardBackend::check(const StepInputs& in, int64_t expected_t, const char* call,
                           int64_t rows) const {
  const std::string where = "backend '" + name() + "' " + call + ": ";
  if (!prepared_) throw Error(where + "prepare() was not called");
  if (!in.input_ids.defined() || in.input_ids.dim() != 2 || in.input_ids.size(0) != rows) {
    throw Error(where + "input_ids must be [" + std::to_string(rows) + ", T] as prepared" +
                (rows != rows_ ? " (" + std::to_string(rows_) + " rows in copies of " +
                                     std::to_string(in.copies) + ")"
                               : std::string()));
  }
  if (in.input_ids.scalar_type() != at::kLong) throw Error(where + "input_ids must be int64");
  const int64_t t = in.input_ids.size(1);
  if (expected_t > 0 && t != expected_t) {
    throw Error(where + "expected " + std::to_string(expected_t) + " token(s) per row, found " +
                std::to_string(t));
  }
  if (!in.positions.defined() || in.positions.sizes() != in.input_ids.sizes()) {
    throw Error(where + "positions must have the shape of input_ids");
  }
  if (!in.token_valid.defined() || in.token_valid.sizes() != in.input_ids.sizes() ||
      in.token_valid.scalar_type() != at::kBool) {
    throw Error(where + "token_valid must be a bool tensor shaped like input_ids");
  }
  if (length_ + t > max_length_) {
    throw Error(where + "writing " + std::to_string(t) + " token(s) at length " +
                std::to_string(length_) + " exceeds the prepared max_length " +
                std::to_string(max_length_));
  }
  if (in.parent_rows.defined() && (in.parent_rows.dim() != 1 || in.parent_rows.size(0) != rows_)) {
    throw Error(where + "parent_rows must be [" + std::to_string(rows_) + "]");
  }
}

at::Tensor ForwardBackend::prefill(const StepInputs& in) {
  length_ = 0;
  if (in.copies < 1 || rows_ % in.copies != 0) {
    throw Error("backend '" + name() + "' prefill: copies " + std::to_string(in.copies) +
                " does not divide the prepared " + std::to_string(rows_) + " rows");
  }
  if (in.copies > 1 && !shares_prefill()) {
    StepInputs each = in;  // every row of the batch, the prompt repeated
    each.input_ids = in.input_ids.repeat_interleave(in.copies, 0);
    each.positions = in.positions.repeat_interleave(in.copies, 0);
    each.token_valid = in.token_valid.repeat_interleave(in.copies, 0);
    each.copies = 1;
    return prefill(each);
  }
  check(in, 0, "prefill", rows_ / in.copies);
  const int64_t t = in.input_ids.size(1);
  const at::Tensor slots = at::arange(0, t, in.input_ids.options());
  at::Tensor logits = do_prefill(in, slots);
  length_ = t;
  return logits;
}

at::Tensor ForwardBackend::decode(const StepInputs& in) {
  check(in, 1, "decode", rows_);
  if (length_ == 0) throw Error("backend '" + name() + "' decode: prefill() must come first");
  const at::Tensor slots = at::arange(length_, length_ + 1, in.input_ids.options());
  at::Tensor logits = do_decode(in, slots);
  length_ += 1;
  return logits;
}

at::Tensor ForwardBackend::verify(const StepInputs& in) {
  check(in, 0, "verify", rows_);
  if (length_ == 0) throw Error("backend '" + name() + "' verify: prefill() must come first");
  if (in.parent_rows.defined()) {
    throw Error("backend '" + name() + "' verify: parent_rows is for decode (beams do not verify)");
  }
  const int64_t t = in.input_ids.size(1);
  if (t < 1) throw Error("backend '" + name() + "' verify: no tokens");
  if (!verifies_at_once()) {
    // One decode step per position: the same logits, one forward each.
    std::vector<at::Tensor> logits;
    for (int64_t i = 0; i < t; ++i) {
      logits.push_back(decode(StepInputs{in.input_ids.narrow(1, i, 1),
                                         in.positions.narrow(1, i, 1),
                                         in.token_valid.narrow(1, i, 1),
                                         {}}));
    }
    return at::stack(logits, 1);
  }
  const at::Tensor slots = at::arange(length_, length_ + t, in.input_ids.options());
  at::Tensor logits = do_verify(in, slots);
  length_ += t;
  return logits;
}

void ForwardBackend::rewind(int64_t n) {
  if (n < 0 || n >= length_) {
    throw Error("backend '" + name() + "' rewind: " + std::to_string(n) + " position(s) of the " +
                std::to_string(length_) + " written (the prompt's first stays)");
  }
  if (n == 0) return;
  do_rewind(length_ - n);
  length_ -= n;
}

at::Tensor ForwardBackend::do_verify(const StepInputs&, const at::Tensor&) {
  throw Error("internal: backend '" + name() + "' says it verifies at once but has no do_verify");
}

int64_t ForwardBackend::verify_positions(int64_t t, int64_t bucket, int64_t room) {
  return std::min((t + bucket - 1) / bucket * bucket, room);
}

StepInputs ForwardBackend::pad_verify_inputs(const StepInputs& in, int64_t positions) {
  const int64_t rows = in.input_ids.size(0), t = in.input_ids.size(1), extra = positions - t;
  if (extra <= 0) return in;
  const at::Tensor steps = at::arange(1, extra + 1, in.positions.options());
  return StepInputs{
      at::cat({in.input_ids, in.input_ids.narrow(1, t - 1, 1).expand({rows, extra})}, 1),
      at::cat({in.positions, in.positions.narrow(1, t - 1, 1) + steps}, 1),
      at::cat({in.token_valid, at::ones({rows, extra}, in.token_valid.options())}, 1),
      {}};
}

at::Tensor ForwardBackend::forward_ragged(const RaggedBatch& /*batch*/, PagedCache& /*cache*/) {
  throw Error("backend '" + name() +
              "' cannot run a ragged batch over a paged cache (ForwardBackend::runs_ragged is "
              "false), which the scheduler needs; use eager, aoti with ragged: true, or cuda_graph "
              "with step: eager "
              "(docs/serving.md#backends)");
}

void ForwardBackend::do_rewind(int64_t) {
  throw Error("backend '" + name() +
              "' cannot rewind its cache (ForwardBackend::do_rewind), which speculative decoding "
              "needs to drop the candidates it does not keep");
}

}  // namespace gengraph

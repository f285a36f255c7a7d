#include "framework/decoding/whole_step.h"

#include <ATen/ATen.h>

#include "framework/backend/forward_backend.h"
#include "framework/decoding/pipeline.h"
#include "framework/model/causal_lm.h"
#include "framework/util/error.h"

namespace gengraph {

int64_t Sequences::length() const {
  if (is_static()) {
    throw Error(
        "internal: Sequences::length() called on the static form; a part that accepts it "
        "reads the length on the device (sequences.h)");
  }
  return tokens.size(1);
}

at::Tensor last_tokens(const Sequences& seqs, int64_t n) {
  if (n == 1) return seqs.tokens.index_select(1, (seqs.written - 1).clamp_min_(0).view({1}));
  const at::Tensor cols = (at::arange(n, seqs.tokens.options()) + (seqs.written - n)).clamp_min(0);
  return seqs.tokens.index_select(1, cols);
}

at::Tensor written_columns(const Sequences& seqs) {
  return at::arange(seqs.tokens.size(1), seqs.tokens.options()).lt(seqs.written);
}

void refill(at::Tensor& t, at::IntArrayRef sizes, const at::TensorOptions& options,
            const at::Scalar& value) {
  if (t.defined() && t.sizes() == sizes && t.dtype() == options.dtype() &&
      t.device() == options.device() && t.is_contiguous()) {
    t.fill_(value);
  } else {
    t = at::full(sizes, value, options);
  }
}

DeviceDecision SearchStrategy::device_step(const at::Tensor&, const LogitsProcessor&, Sequences&,
                                           const StoppingCriteria&) {
  throw Error(whole_step_blocker().empty()
                  ? "internal: search strategy '" + name() +
                        "' says it has a whole-step form but does not implement device_step"
                  : whole_step_blocker());
}

LoopOptions::WholeStep parse_whole_step(const std::string& text, const std::string& where) {
  if (text == "off" || text == "false") return LoopOptions::WholeStep::kOff;
  if (text == "auto") return LoopOptions::WholeStep::kAuto;
  if (text == "on" || text == "true") return LoopOptions::WholeStep::kOn;
  throw Error(where + ": expected off, auto or on, found '" + text + "'");
}

std::string whole_step_name(LoopOptions::WholeStep w) {
  switch (w) {
    case LoopOptions::WholeStep::kOff:
      return "off";
    case LoopOptions::WholeStep::kAuto:
      return "auto";
    case LoopOptions::WholeStep::kOn:
      return "on";
  }
  return "?";
}

std::string whole_step_blocker(const Pipeline& pipe, ForwardBackend& backend, bool streaming,
                               const LoopOptions& options) {
  if (streaming) {
    return "streaming hands every token to the host as it is chosen (a device-to-host wait per "
           "step)";
  }
  if (std::string why = pipe.strategy->whole_step_blocker(); !why.empty()) return why;
  if (std::string why = pipe.processors.whole_step_blocker(); !why.empty()) return why;
  if (std::string why = pipe.stopping.whole_step_blocker(); !why.empty()) return why;
  if (backend.static_decode() == nullptr) {
    return "backend '" + backend.name() +
           "' has no static decode step (ForwardBackend::static_decode; cuda_graph has one)";
  }
  if (options.capture && !backend.model().device().is_cuda()) {
    return "capturing the whole step needs the model on a CUDA device, found " +
           backend.model().device().str() + " (loop option capture: false runs it uncaptured)";
  }
  return "";
}

}  // namespace gengraph

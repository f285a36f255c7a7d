#include "framework/decoding/processors/logits_processor.h"

namespace gengraph {

std::string ProcessorChain::name() const {
  std::string out = "chain(";
  for (size_t i = 0; i < members_.size(); ++i) out += (i ? ", " : "") + members_[i]->name();
  return out + ")";
}

std::string LogitsProcessor::whole_step_blocker() const {
  return "logits processor '" + name() +
         "' does not say it can run in a whole-step graph (LogitsProcessor::whole_step_blocker)";
}

std::string ProcessorChain::whole_step_blocker() const {
  return first_whole_step_blocker(members_);
}

at::Tensor ProcessorChain::process(const TokenHistory& seqs, at::Tensor scores) const {
  for (size_t i = 0; i < members_.size(); ++i) {
    if (!timing_) {
      scores = members_[i]->process(seqs, std::move(scores));
      continue;
    }
    const auto t0 = std::chrono::steady_clock::now();
    scores = members_[i]->process(seqs, std::move(scores));
    seconds_[i] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return scores;
}

}  // namespace gengraph

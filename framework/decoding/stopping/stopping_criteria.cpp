#include "framework/decoding/stopping/stopping_criteria.h"

#include <ATen/ATen.h>

namespace gengraph {

at::Tensor MaxLengthCriterion::should_stop(const Sequences& seqs) const {
  return at::full({seqs.rows()}, seqs.length() >= max_length_,
                  seqs.tokens.options().dtype(at::kBool));
}

at::Tensor EosCriterion::should_stop(const Sequences& seqs) const {
  if (!eos_.defined() || eos_.device() != seqs.tokens.device()) {
    eos_ = at::tensor(eos_ids_, at::kLong).to(seqs.tokens.device());
  }
  return at::isin(seqs.tokens.select(1, seqs.length() - 1), eos_);
}

at::Tensor StoppingCriteria::should_stop(const Sequences& seqs) const {
  at::Tensor stop = at::zeros({seqs.rows()}, seqs.tokens.options().dtype(at::kBool));
  for (const auto& m : members_) stop.logical_or_(m->should_stop(seqs));
  return stop;
}

bool StoppingCriteria::has(const std::string& name) const {
  for (const auto& m : members_) {
    if (m->name() == name) return true;
  }
  return false;
}

}  // namespace gengraph

#include "framework/decoding/stopping/stopping_criteria.h"

#include <ATen/ATen.h>

#include "framework/decoding/device_ids.h"

namespace gengraph {

at::Tensor MaxLengthCriterion::should_stop(const Sequences& seqs) const {
  return at::full({seqs.rows()}, seqs.length() >= max_length_,
                  seqs.tokens.options().dtype(at::kBool));
}

at::Tensor EosCriterion::should_stop(const Sequences& seqs) const {
  return at::isin(seqs.tokens.select(1, seqs.length() - 1),
                  ids_on_device(eos_, eos_ids_, seqs.tokens.device()));
}

MaxTimeCriterion::MaxTimeCriterion(double seconds)
    : seconds_(seconds), start_(std::chrono::steady_clock::now()) {}

at::Tensor MaxTimeCriterion::should_stop(const Sequences& seqs) const {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  return at::full({seqs.rows()}, elapsed > seconds_, seqs.tokens.options().dtype(at::kBool));
}

at::Tensor StopSequencesCriterion::should_stop(const Sequences& seqs) const {
  at::Tensor stop = at::zeros({seqs.rows()}, seqs.tokens.options().dtype(at::kBool));
  for (size_t i = 0; i < sequences_.size(); ++i) {
    const int64_t n = static_cast<int64_t>(sequences_[i].size());
    if (n > seqs.length()) continue;
    stop.logical_or_(seqs.tokens.narrow(1, seqs.length() - n, n)
                         .eq(ids_on_device(on_device_[i], sequences_[i], seqs.tokens.device()))
                         .all(1));
  }
  return stop;
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

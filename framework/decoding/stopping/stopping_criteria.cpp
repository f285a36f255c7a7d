#include "framework/decoding/stopping/stopping_criteria.h"

#include <ATen/ATen.h>

#include "framework/decoding/device_ids.h"

namespace gengraph {

std::string StoppingCriterion::whole_step_blocker() const {
  return "stopping criterion '" + name() +
         "' does not say it can run in a whole-step graph (StoppingCriterion::whole_step_blocker)";
}

std::string StoppingCriteria::whole_step_blocker() const {
  return first_whole_step_blocker(members_);
}

at::Tensor MaxLengthCriterion::should_stop(const Sequences& seqs) const {
  if (seqs.is_static()) return seqs.written.ge(max_length_).expand({seqs.rows()});
  return at::full({seqs.rows()}, seqs.length() >= max_length_,
                  seqs.tokens.options().dtype(at::kBool));
}

at::Tensor EosCriterion::should_stop(const Sequences& seqs) const {
  const at::Tensor last =
      seqs.is_static() ? last_tokens(seqs, 1).squeeze(1) : seqs.tokens.select(1, seqs.length() - 1);
  if (eos_ids_.size() == 1) return last.eq(eos_ids_[0]);
  return at::isin(last, ids_on_device(eos_, eos_ids_, seqs.tokens.device()));
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
    const at::Tensor& want = ids_on_device(on_device_[i], sequences_[i], seqs.tokens.device());
    if (seqs.is_static()) {
      if (n > seqs.tokens.size(1)) continue;
      stop.logical_or_(last_tokens(seqs, n).eq(want).all(1).logical_and(seqs.written.ge(n)));
      continue;
    }
    if (n > seqs.length()) continue;
    stop.logical_or_(seqs.tokens.narrow(1, seqs.length() - n, n).eq(want).all(1));
  }
  return stop;
}

at::Tensor StoppingCriteria::should_stop(const Sequences& seqs) const {
  if (members_.empty()) return at::zeros({seqs.rows()}, seqs.tokens.options().dtype(at::kBool));
  // A member's answer may be a view (max_length expands one flag over the rows): combined out of
  // place, starting from the first, one kernel per further member.
  at::Tensor stop = members_[0]->should_stop(seqs);
  for (size_t i = 1; i < members_.size(); ++i)
    stop = stop.logical_or(members_[i]->should_stop(seqs));
  return stop.expand({seqs.rows()});
}

bool StoppingCriteria::has(const std::string& name) const {
  for (const auto& m : members_) {
    if (m->name() == name) return true;
  }
  return false;
}

}  // namespace gengraph

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

at::Tensor MaxLengthCriterion::should_stop(const TokenHistory& seqs) const {
  return flag_rows(seqs.length.ge(max_length_), seqs.rows(), seqs.buffer.options());
}

std::optional<bool> MaxLengthCriterion::decided_on_host(const TokenHistory& seqs) const {
  return seqs.length.ge(max_length_).known();
}

at::Tensor EosCriterion::should_stop(const TokenHistory& seqs) const {
  const at::Tensor last = last_token(seqs);
  if (eos_ids_.size() == 1) return last.eq(eos_ids_[0]);
  return at::isin(last, ids_on_device(eos_, eos_ids_, seqs.buffer.device()));
}

MaxTimeCriterion::MaxTimeCriterion(double seconds)
    : seconds_(seconds), start_(std::chrono::steady_clock::now()) {}

std::optional<bool> MaxTimeCriterion::decided_on_host(const TokenHistory&) const {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  return elapsed > seconds_;
}

at::Tensor MaxTimeCriterion::should_stop(const TokenHistory& seqs) const {
  return at::full({seqs.rows()}, *decided_on_host(seqs), seqs.buffer.options().dtype(at::kBool));
}

at::Tensor StopSequencesCriterion::should_stop(const TokenHistory& seqs) const {
  at::Tensor stop = at::zeros({seqs.rows()}, seqs.buffer.options().dtype(at::kBool));
  for (size_t i = 0; i < sequences_.size(); ++i) {
    const int64_t n = static_cast<int64_t>(sequences_[i].size());
    const Flag long_enough = seqs.length.ge(n);
    if (n > seqs.capacity() || long_enough.never()) continue;
    const at::Tensor& want = ids_on_device(on_device_[i], sequences_[i], seqs.buffer.device());
    stop.logical_or_(and_flag(last_tokens(seqs, n).eq(want).all(1), long_enough));
  }
  return stop;
}

at::Tensor StoppingCriteria::should_stop(const TokenHistory& seqs) const {
  const auto flags = seqs.buffer.options().dtype(at::kBool);
  // Members whose answer the host knows (the host loop's max_length, max_time) add no operator;
  // the others are combined out of place from the first (an answer may be a view: max_length
  // expands one flag over the rows in the whole step), one kernel per further member.
  at::Tensor stop;
  for (const auto& m : members_) {
    if (const std::optional<bool> known = m->decided_on_host(seqs)) {
      if (*known) return at::ones({seqs.rows()}, flags);
      continue;
    }
    const at::Tensor s = m->should_stop(seqs);
    stop = stop.defined() ? stop.logical_or(s) : s;
  }
  if (!stop.defined()) return at::zeros({seqs.rows()}, flags);
  if (stop.dim() == 1 && stop.size(0) == seqs.rows()) return stop;
  return stop.expand({seqs.rows()});
}

bool StoppingCriteria::has(const std::string& name) const {
  for (const auto& m : members_) {
    if (m->name() == name) return true;
  }
  return false;
}

}  // namespace gengraph

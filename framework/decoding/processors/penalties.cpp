#include "framework/decoding/processors/penalties.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

#include "framework/decoding/device_ids.h"
#include "framework/util/error.h"

namespace gengraph {

RepetitionPenalty::RepetitionPenalty(double penalty) : penalty_(penalty) {
  if (!(penalty > 0))
    throw Error("repetition_penalty: expected a number > 0, found " + std::to_string(penalty));
}

at::Tensor RepetitionPenalty::process(const TokenHistory& seqs, at::Tensor scores) const {
  const at::Tensor ids = written_tokens(seqs);  // [rows, n]
  at::Tensor s = scores.gather(1, ids);
  s = at::where(s.lt(0), s * penalty_, s / penalty_);
  return scores.scatter(1, ids, s);
}

FrequencyPresencePenalty::FrequencyPresencePenalty(double frequency, double presence)
    : frequency_(frequency), presence_(presence) {}

at::Tensor FrequencyPresencePenalty::process(const TokenHistory& seqs, at::Tensor scores) const {
  if (seqs.length.le(seqs.prompt_length).always()) return scores;  // nothing generated yet
  // Generated columns weigh 1, the prompt and unwritten columns 0.
  const auto [ids, weight] = weighted_tokens(seqs, seqs.prompt_length, scores.scalar_type());
  const at::Tensor counts = at::zeros_like(scores).scatter_add_(1, ids, weight);  // [rows, vocab]
  return scores - counts * frequency_ - counts.gt(0).to(scores.scalar_type()) * presence_;
}

NoRepeatNGram::NoRepeatNGram(int64_t n) : n_(n) {
  if (n <= 0)
    throw Error("no_repeat_ngram_size: expected an integer > 0, found " + std::to_string(n));
}

at::Tensor NoRepeatNGram::process(const TokenHistory& seqs, at::Tensor scores) const {
  if (seqs.length.lt(n_).always() || seqs.capacity() < n_) return scores;
  const at::Tensor ids = written_span(seqs);  // [rows, len]
  const int64_t vocab = scores.size(-1);
  const at::Tensor prefix = last_tokens(seqs, n_ - 1);  // [rows, n-1]
  const at::Tensor windows = ids.unfold(1, n_, 1);      // [rows, len-n+1, n]
  const at::Tensor matches = within_written(
      seqs, windows.narrow(-1, 0, n_ - 1).eq(prefix.unsqueeze(1)).all(-1), n_);  // [rows, len-n+1]
  at::Tensor banned = at::zeros({scores.size(0), vocab + 1}, scores.options().dtype(at::kBool));
  banned.scatter_(
      1, at::where(matches, windows.select(-1, n_ - 1), at::full_like(matches, vocab, at::kLong)),
      true);
  return scores.masked_fill(banned.narrow(1, 0, vocab), -std::numeric_limits<double>::infinity());
}

ExponentialDecayLengthPenalty::ExponentialDecayLengthPenalty(int64_t start, double factor,
                                                             std::vector<int64_t> eos)
    : start_(start), factor_(factor), eos_(std::move(eos)) {
  if (eos_.empty()) throw Error("exponential_decay_length_penalty: needs an eos_token_id");
}

at::Tensor ExponentialDecayLengthPenalty::process(const TokenHistory& seqs,
                                                  at::Tensor scores) const {
  const int64_t regulation_start = start_ + seqs.prompt_length;
  const Flag active = seqs.length.gt(regulation_start);
  if (active.never()) return scores;
  return pick(
      active,
      [&] {
        // factor ** (length - start) - 1 in double, applied as a scalar operand would be.
        const Factor factor = seqs.length.exponential(factor_, -regulation_start).minus(1);
        const at::Tensor& eos = ids_on_device(eos_ids_, eos_, scores.device());
        at::Tensor penalties = at::zeros_like(scores);
        penalties.index_copy_(1, eos, factor.multiply(at::abs(scores.index_select(1, eos))));
        return scores + penalties;
      },
      scores);
}

}  // namespace gengraph

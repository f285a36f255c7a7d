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

at::Tensor RepetitionPenalty::process(const Sequences& seqs, at::Tensor scores) const {
  // Static form: unwritten columns repeat column 0's token, which is among the written ones, so
  // gathering and scattering it again changes nothing.
  const at::Tensor ids =
      seqs.is_static() ? at::where(written_columns(seqs), seqs.tokens, seqs.tokens.narrow(1, 0, 1))
                       : seqs.tokens;  // [rows, len]
  at::Tensor s = scores.gather(1, ids);
  s = at::where(s.lt(0), s * penalty_, s / penalty_);
  return scores.scatter(1, ids, s);
}

FrequencyPresencePenalty::FrequencyPresencePenalty(double frequency, double presence)
    : frequency_(frequency), presence_(presence) {}

at::Tensor FrequencyPresencePenalty::process(const Sequences& seqs, at::Tensor scores) const {
  if (seqs.is_static()) {
    // Generated columns weigh 1, the prompt and unwritten columns 0.
    const at::Tensor cols = at::arange(seqs.tokens.size(1), seqs.tokens.options());
    const at::Tensor weight = written_columns(seqs)
                                  .logical_and(cols.ge(seqs.prompt_length))
                                  .to(scores.scalar_type())
                                  .expand(seqs.tokens.sizes());
    const at::Tensor counts = at::zeros_like(scores).scatter_add_(1, seqs.tokens, weight);
    return scores - counts * frequency_ - counts.gt(0).to(scores.scalar_type()) * presence_;
  }
  if (seqs.generated() == 0) return scores;
  const at::Tensor generated = seqs.tokens.narrow(1, seqs.prompt_length, seqs.generated());
  const at::Tensor counts = at::zeros_like(scores).scatter_add_(
      1, generated, at::ones(generated.sizes(), scores.options()));  // [rows, vocab]
  return scores - counts * frequency_ - counts.gt(0).to(scores.scalar_type()) * presence_;
}

NoRepeatNGram::NoRepeatNGram(int64_t n) : n_(n) {
  if (n <= 0)
    throw Error("no_repeat_ngram_size: expected an integer > 0, found " + std::to_string(n));
}

at::Tensor NoRepeatNGram::process(const Sequences& seqs, at::Tensor scores) const {
  const at::Tensor& ids = seqs.tokens;  // [rows, len] (static form: [rows, capacity])
  const int64_t len = ids.size(1);
  if (len < n_) return scores;
  const int64_t vocab = scores.size(-1);
  const at::Tensor prefix = seqs.is_static() ? last_tokens(seqs, n_ - 1)
                                             : ids.narrow(1, len + 1 - n_, n_ - 1);  // [rows, n-1]
  const at::Tensor windows = ids.unfold(1, n_, 1);  // [rows, len-n+1, n]
  at::Tensor matches =
      windows.narrow(-1, 0, n_ - 1).eq(prefix.unsqueeze(1)).all(-1);  // [rows, len-n+1]
  if (seqs.is_static()) {  // only windows inside the written columns
    matches = matches.logical_and(
        at::arange(len - n_ + 1, ids.options()).le(seqs.written - n_).unsqueeze(0));
  }
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

at::Tensor ExponentialDecayLengthPenalty::process(const Sequences& seqs, at::Tensor scores) const {
  const int64_t regulation_start = start_ + seqs.prompt_length;
  if (seqs.is_static()) {
    // The factor in double as std::pow computes it, then float32 as a scalar operand would be.
    const at::Tensor steps = (seqs.written - regulation_start).to(at::kDouble);
    const at::Tensor factor = (at::pow(factor_, steps) - 1).to(scores.scalar_type());
    const at::Tensor& eos = ids_on_device(eos_ids_, eos_, scores.device());
    at::Tensor penalties = at::zeros_like(scores);
    penalties.index_copy_(1, eos, at::abs(scores.index_select(1, eos)) * factor);
    return at::where(seqs.written.gt(regulation_start), scores + penalties, scores);
  }
  const int64_t cur_len = seqs.length();
  if (cur_len <= regulation_start) return scores;
  const at::Tensor& eos = ids_on_device(eos_ids_, eos_, scores.device());
  const at::Tensor penalty =
      at::abs(scores.index_select(1, eos)) *
      (std::pow(factor_, static_cast<double>(cur_len - regulation_start)) - 1);
  at::Tensor penalties = at::zeros_like(scores);
  penalties.index_copy_(1, eos, penalty);
  return scores + penalties;
}

}  // namespace gengraph

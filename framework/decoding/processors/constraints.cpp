#include "framework/decoding/processors/constraints.h"

#include <ATen/ATen.h>

#include <limits>
#include <map>

#include "framework/decoding/device_ids.h"
#include "framework/util/error.h"

namespace gengraph {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

void check_vocab(const std::vector<int64_t>& ids, int64_t vocab, const std::string& what) {
  for (auto id : ids) {
    if (id < 0 || id >= vocab) {
      throw Error(what + ": token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                  std::to_string(vocab) + ")");
    }
  }
}

// [vocab] bool, true at `ids`
at::Tensor vocab_mask(const std::vector<int64_t>& ids, int64_t vocab, const at::Device& device) {
  return at::isin(at::arange(vocab, at::TensorOptions().dtype(at::kLong).device(device)),
                  at::tensor(ids, at::kLong).to(device));
}

// The mask of `ids` over the scores' vocabulary, built once per device and vocabulary size and
// kept in `cache`: building it copies the ids to the device, which on CUDA waits for the stream
// (a pageable host-to-device copy), once per decode step if it were rebuilt each call.
const at::Tensor& cached_vocab_mask(at::Tensor& cache, const std::vector<int64_t>& ids,
                                    const at::Tensor& scores) {
  if (!cache.defined() || cache.device() != scores.device() || cache.size(0) != scores.size(-1)) {
    cache = vocab_mask(ids, scores.size(-1), scores.device());
  }
  return cache;
}

// scores with -inf at `ids` (`mask` over the vocabulary) in the rows where `flag` holds, as
// at::where(and_flag(mask, flag), -inf, scores) gives. When every row takes it on CPU, a copy with
// those columns filled instead: at::where broadcasting a [vocab] mask over the rows runs far below
// memory speed there, where the copy runs at memory speed (the timing:
// docs/results/measurements-from-comments.md).
at::Tensor fill_columns(const at::Tensor& scores, const std::vector<int64_t>& ids,
                        const at::Tensor& mask, const Flag& flag) {
  if (flag.never()) return scores;
  if (!flag.always() || !scores.is_cpu() || scores.dim() != 2) {
    return at::where(and_flag(mask, flag), -kInf, scores);
  }
  std::vector<int64_t> inside;
  for (const int64_t id : ids) {
    if (id >= 0 && id < scores.size(1)) inside.push_back(id);
  }
  at::Tensor out = scores.clone(at::MemoryFormat::Contiguous);
  if (!inside.empty()) out.index_fill_(1, at::tensor(inside, at::kLong), -kInf);
  return out;
}

}  // namespace

SequenceBias::SequenceBias(std::vector<std::pair<std::vector<int64_t>, double>> biases,
                           int64_t vocab) {
  // transformers keeps a dict keyed by the sequence: a repeated sequence keeps its last bias, at
  // its first position.
  std::vector<std::vector<int64_t>> order;
  std::map<std::vector<int64_t>, double> by_seq;
  for (auto& [seq, bias] : biases) {
    check_vocab(seq, vocab, "sequence_bias");
    if (!by_seq.count(seq)) order.push_back(seq);
    by_seq[seq] = bias;
  }
  for (const auto& seq : order) {
    if (seq.size() == 1) {
      single_.emplace_back(seq[0], by_seq[seq]);
    } else {
      multi_.emplace_back(seq, by_seq[seq]);
    }
  }
  multi_on_device_.resize(multi_.size());
}

at::Tensor SequenceBias::process(const TokenHistory& seqs, at::Tensor scores) const {
  const int64_t vocab = scores.size(-1);
  if (!single_bias_.defined() || single_bias_.device() != scores.device()) {
    std::vector<float> dense(vocab, 0.0f);
    for (const auto& [id, b] : single_) dense[id] = static_cast<float>(b);
    single_bias_ = at::tensor(dense, at::kFloat).to(scores.device());
  }
  at::Tensor bias = at::zeros_like(scores) + single_bias_;
  for (size_t i = 0; i < multi_.size(); ++i) {
    const auto& [seq, b] = multi_[i];
    const auto n = static_cast<int64_t>(seq.size());
    const int64_t prefix = n - 1;
    // The prefix must lie in the history: a sequence longer than it has no match yet.
    const Flag long_enough = seqs.length.ge(n);
    if (n > seqs.capacity() || long_enough.never()) continue;
    const at::Tensor want =
        ids_on_device(multi_on_device_[i], seq, scores.device()).narrow(0, 0, prefix);
    const at::Tensor match =
        and_flag(last_tokens(seqs, prefix).eq(want).prod(1).to(at::kBool), long_enough);  // [rows]
    // b where the prefix matches, 0 elsewhere (not add_(match, b): b may be -inf, 0 * inf is NaN).
    bias.select(1, seq.back()).add_(at::where(match, b, 0.0));
  }
  return scores + bias;
}

namespace {
std::vector<std::pair<std::vector<int64_t>, double>> bad_word_biases(
    const std::vector<std::vector<int64_t>>& bad, const std::vector<int64_t>& eos) {
  std::vector<std::pair<std::vector<int64_t>, double>> out;
  for (const auto& seq : bad) {
    const bool is_eos = seq.size() == 1 && std::find(eos.begin(), eos.end(), seq[0]) != eos.end();
    if (!is_eos) out.emplace_back(seq, -kInf);
  }
  return out;
}
}  // namespace

BadWords::BadWords(const std::vector<std::vector<int64_t>>& bad, const std::vector<int64_t>& eos,
                   int64_t vocab)
    : SequenceBias(bad_word_biases(bad, eos), vocab) {}

LogitBias::LogitBias(std::vector<std::pair<int64_t, double>> bias, int64_t vocab)
    : bias_(std::move(bias)) {
  for (const auto& [id, b] : bias_) check_vocab({id}, vocab, "logit_bias");
}

at::Tensor LogitBias::process(const TokenHistory&, at::Tensor scores) const {
  if (!dense_.defined() || dense_.device() != scores.device()) {
    std::vector<float> dense(scores.size(-1), 0.0f);
    for (const auto& [id, b] : bias_) dense[id] += static_cast<float>(b);
    dense_ = at::tensor(dense, at::kFloat).to(scores.device());
  }
  return scores + dense_;
}

SuppressTokens::SuppressTokens(std::vector<int64_t> tokens, std::optional<int64_t> at_length,
                               bool relative)
    : tokens_(std::move(tokens)), at_length_(at_length), relative_(relative) {}

at::Tensor SuppressTokens::process(const TokenHistory& seqs, at::Tensor scores) const {
  const at::Tensor& mask = cached_vocab_mask(mask_, tokens_, scores);
  if (at_length_) {
    const int64_t trigger = *at_length_ + (relative_ ? seqs.prompt_length : 0);
    return fill_columns(scores, tokens_, mask, seqs.length.eq(trigger));
  }
  return fill_columns(scores, tokens_, mask, true);
}

ForceTokens::ForceTokens(std::string name, std::vector<int64_t> tokens, int64_t at_length)
    : name_(std::move(name)), tokens_(std::move(tokens)), at_length_(at_length) {}

at::Tensor ForceTokens::process(const TokenHistory& seqs, at::Tensor scores) const {
  return pick(
      seqs.length.eq(at_length_),
      [&] {
        at::Tensor out = at::full_like(scores, -kInf);
        out.index_fill_(1, ids_on_device(ids_, tokens_, scores.device()), 0.0);
        return out;
      },
      scores);
}

MinLength::MinLength(int64_t min, std::vector<int64_t> eos, bool new_only)
    : min_(min), eos_(std::move(eos)), new_only_(new_only) {
  if (eos_.empty()) throw Error(name() + ": needs an eos_token_id");
}

at::Tensor MinLength::process(const TokenHistory& seqs, at::Tensor scores) const {
  const at::Tensor& mask = cached_vocab_mask(mask_, eos_, scores);
  const Flag too_short = seqs.length.lt(new_only_ ? min_ + seqs.prompt_length : min_);
  return fill_columns(scores, eos_, mask, too_short);
}

}  // namespace gengraph

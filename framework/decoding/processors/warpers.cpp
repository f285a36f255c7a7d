#include "framework/decoding/processors/warpers.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

#include "framework/util/error.h"

namespace gengraph {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

void require(bool ok, const std::string& what) {
  if (!ok) throw Error(what);
}

// scores < the k-th largest score, per row.   scores: [rows, vocab] -> [rows, vocab] bool
at::Tensor below_kth(const at::Tensor& scores, int64_t k) {
  return scores.lt(std::get<0>(at::topk(scores, k)).narrow(-1, k - 1, 1));  // [rows, 1]
}

}  // namespace

Temperature::Temperature(double t) : t_(t) {
  require(t > 0, "temperature: expected a number > 0, found " + std::to_string(t));
}
at::Tensor Temperature::process(const TokenHistory&, at::Tensor scores) const {
  return scores / t_;
}

TopK::TopK(int64_t k, int64_t keep) : k_(std::max(k, keep)) {
  require(k > 0, "top_k: expected an integer > 0, found " + std::to_string(k));
}
at::Tensor TopK::process(const TokenHistory&, at::Tensor scores) const {
  const int64_t k = std::min(k_, scores.size(-1));
  return scores.masked_fill(below_kth(scores, k), -kInf);
}

TopP::TopP(double p, int64_t keep) : p_(p), keep_(keep) {
  require(p >= 0 && p <= 1, "top_p: expected a number in [0, 1], found " + std::to_string(p));
}
at::Tensor TopP::process(const TokenHistory&, at::Tensor scores) const {
  auto [sorted, idx] = at::sort(scores, -1, /*descending=*/false);
  const at::Tensor cum = sorted.softmax(-1).cumsum(-1);
  at::Tensor remove = cum.le(1 - p_);
  remove
      .narrow(-1, remove.size(-1) - std::min(keep_, remove.size(-1)),
              std::min(keep_, remove.size(-1)))
      .fill_(false);
  return scores.masked_fill(remove.scatter(1, idx, remove), -kInf);
}

MinP::MinP(double p, int64_t keep) : p_(p), keep_(keep) {
  require(p >= 0 && p <= 1, "min_p: expected a number in [0, 1], found " + std::to_string(p));
}
at::Tensor MinP::process(const TokenHistory&, at::Tensor scores) const {
  const at::Tensor probs = at::softmax(scores, -1);
  const at::Tensor top = std::get<0>(probs.max(-1, /*keepdim=*/true));
  at::Tensor remove = probs.lt(top * p_);
  const int64_t k = std::min(keep_, probs.size(-1));
  remove.scatter_(-1, std::get<1>(at::topk(probs, k, -1)), false);
  return scores.masked_fill(remove, -kInf);
}

Typical::Typical(double mass, int64_t keep) : mass_(mass), keep_(keep) {
  require(mass > 0 && mass < 1,
          "typical_p: expected a number in (0, 1), found " + std::to_string(mass));
}
at::Tensor Typical::process(const TokenHistory&, at::Tensor scores) const {
  const at::Tensor normalized = at::log_softmax(scores, -1);
  const at::Tensor p = at::exp(normalized);
  const at::Tensor ent = at::nansum(normalized * p, {-1}, /*keepdim=*/true).neg();
  const at::Tensor shifted = at::abs(normalized.neg() - ent);
  auto [sorted_scores, sorted_idx] = at::sort(shifted, -1, /*descending=*/false);
  const at::Tensor cum = scores.gather(-1, sorted_idx).softmax(-1).cumsum(-1);
  at::Tensor last = cum.lt(mass_).sum(1);
  last.clamp_max_(sorted_scores.size(-1) - 1);
  at::Tensor remove = sorted_scores.gt(sorted_scores.gather(1, last.view({-1, 1})));
  remove.narrow(-1, 0, std::min(keep_, remove.size(-1))).fill_(false);
  return scores.masked_fill(remove.scatter(1, sorted_idx, remove), -kInf);
}

EpsilonCutoff::EpsilonCutoff(double epsilon, int64_t keep, bool eta)
    : epsilon_(epsilon), keep_(keep), eta_(eta) {
  require(epsilon > 0 && epsilon < 1, std::string(eta ? "eta_cutoff" : "epsilon_cutoff") +
                                          ": expected a number in (0, 1), found " +
                                          std::to_string(epsilon));
}
at::Tensor EpsilonCutoff::process(const TokenHistory&, at::Tensor scores) const {
  const at::Tensor probs = scores.softmax(-1);
  at::Tensor remove;
  if (eta_) {
    // torch.distributions.Categorical(logits=scores).entropy(), then
    // eta = min(epsilon, sqrt(epsilon) * exp(-entropy)), epsilon held as a float32 tensor.
    const at::Tensor logits = scores - scores.logsumexp(-1, /*keepdim=*/true);
    const at::Tensor clamped = logits.clamp_min(std::numeric_limits<float>::lowest());
    const at::Tensor entropy = (clamped * at::softmax(logits, -1)).sum(-1).neg();
    const at::Tensor eps = at::scalar_tensor(epsilon_, scores.options());
    const at::Tensor eta = at::minimum(eps, at::sqrt(eps) * at::exp(entropy.neg())).unsqueeze(-1);
    remove = probs.lt(eta);
  } else {
    remove = probs.lt(epsilon_);
  }
  const int64_t k = std::min(keep_, scores.size(-1));
  return scores.masked_fill(remove.logical_and(below_kth(scores, k)), -kInf);
}

at::Tensor Renormalize::process(const TokenHistory&, at::Tensor scores) const {
  return scores.log_softmax(-1);
}

at::Tensor RemoveInvalidValues::process(const TokenHistory&, at::Tensor scores) const {
  const double hi = std::numeric_limits<float>::max(), lo = std::numeric_limits<float>::lowest();
  // NaN to 0, +inf to the largest float32, -inf to the lowest: one kernel.
  return at::nan_to_num(scores, 0.0, hi, lo);
}

}  // namespace gengraph

// Sampling warpers (transformers' *LogitsWarper): reshape the distribution before a draw.
// Each mirrors transformers 5.17's op sequence so the same scores give bitwise the same result.
#pragma once

#include "framework/decoding/processors/logits_processor.h"

namespace gengraph {

class Temperature final : public LogitsProcessor {
 public:
  explicit Temperature(double t);
  std::string name() const override { return "temperature"; }
  at::Tensor process(const TokenHistory& seqs, at::Tensor scores) const override;
  std::string whole_step_blocker() const override { return ""; }

 private:
  double t_;
};

class TopK final : public LogitsProcessor {
 public:
  TopK(int64_t k, int64_t min_tokens_to_keep);
  std::string name() const override { return "top_k"; }
  at::Tensor process(const TokenHistory& seqs, at::Tensor scores) const override;
  std::string whole_step_blocker() const override { return ""; }

 private:
  int64_t k_;
};

class TopP final : public LogitsProcessor {
 public:
  TopP(double p, int64_t min_tokens_to_keep);
  std::string name() const override { return "top_p"; }
  at::Tensor process(const TokenHistory& seqs, at::Tensor scores) const override;
  std::string whole_step_blocker() const override { return ""; }

 private:
  double p_;
  int64_t keep_;
};

class MinP final : public LogitsProcessor {
 public:
  MinP(double p, int64_t min_tokens_to_keep);
  std::string name() const override { return "min_p"; }
  at::Tensor process(const TokenHistory& seqs, at::Tensor scores) const override;
  std::string whole_step_blocker() const override { return ""; }

 private:
  double p_;
  int64_t keep_;
};

class Typical final : public LogitsProcessor {
 public:
  Typical(double mass, int64_t min_tokens_to_keep);
  std::string name() const override { return "typical_p"; }
  at::Tensor process(const TokenHistory& seqs, at::Tensor scores) const override;
  std::string whole_step_blocker() const override { return ""; }

 private:
  double mass_;
  int64_t keep_;
};

// Epsilon sampling (epsilon_cutoff) and eta sampling (eta_cutoff, entropy-dependent threshold).
class EpsilonCutoff final : public LogitsProcessor {
 public:
  EpsilonCutoff(double epsilon, int64_t min_tokens_to_keep, bool eta);
  std::string name() const override { return eta_ ? "eta_cutoff" : "epsilon_cutoff"; }
  at::Tensor process(const TokenHistory& seqs, at::Tensor scores) const override;
  std::string whole_step_blocker() const override { return ""; }

 private:
  double epsilon_;
  int64_t keep_;
  bool eta_;
};

// log_softmax over the processed scores (renormalize_logits).
class Renormalize final : public LogitsProcessor {
 public:
  std::string name() const override { return "renormalize"; }
  at::Tensor process(const TokenHistory& seqs, at::Tensor scores) const override;
  std::string whole_step_blocker() const override { return ""; }
};

// nan -> 0, +inf -> float max, -inf -> float lowest (remove_invalid_values).
class RemoveInvalidValues final : public LogitsProcessor {
 public:
  std::string name() const override { return "remove_invalid_values"; }
  at::Tensor process(const TokenHistory& seqs, at::Tensor scores) const override;
  std::string whole_step_blocker() const override { return ""; }
};

}  // namespace gengraph

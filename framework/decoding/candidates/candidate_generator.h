// Speculative decoding's proposers: a candidate generator guesses the tokens that follow a row,
// the target model scores the guesses in one forward (ForwardBackend::verify), and the search
// strategy keeps the longest prefix it would have chosen itself (Generator::run_speculative,
// framework/decoding/decode_loop.cpp). For greedy search, and for sampling from candidates
// without a distribution, candidates change only how fast tokens come, never which: a wrong
// guess costs a wasted position of the verify forward. Sampling from a draft's distribution
// (propose_sampled) keeps the output's distribution, not its draws.
//
// Candidate generators are decoding parts like the others: registered by name
// (candidate_registry(), registry.h), built-in `prompt_lookup` enabled by transformers'
// prompt_lookup_num_tokens, a registered one chosen with `candidate_generator: {name: ...}`.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace gengraph {

class CandidateGenerator {
 public:
  virtual ~CandidateGenerator() = default;
  virtual std::string name() const = 0;
  // Called once per generation, before the first proposal.
  virtual void begin() {}
  // Up to `max` tokens to follow `history` (the row's tokens so far, prompt included, no
  // padding), best guess first; none is a plain step. `allowed(candidates)` says how many leading
  // candidates the generation's logits processors allow (transformers' prompt lookup drops a
  // candidate they ban, and the ones after it).
  virtual std::vector<int64_t> propose(
      const std::vector<int64_t>& history, int64_t max,
      const std::function<size_t(const std::vector<int64_t>&)>& allowed) = 0;
  // Sampling (do_sample). A generator that draws its candidates from a distribution of its own
  // returns them and sets `probabilities` to each one's distribution, [candidates, vocab] float32
  // rows that sum to 1. The target then keeps or replaces each candidate by speculative sampling's
  // rule (docs/decoding.md#speculative-sampling), which leaves the output distributed as plain
  // sampling's. `process(drafted, logits)` applies the generation's logits processors and warpers
  // to a [1, vocab] float32 row of logits that follows the history and the candidates `drafted`
  // so far: the draft's distribution should be taken through them, as transformers' assistant
  // does. The default proposes as propose() does and leaves `probabilities` undefined: then a
  // candidate is kept only when the target's own draw at its position equals it (transformers'
  // rule for prompt lookup), which gives plain sampling's tokens for a seed.
  using Process =
      std::function<at::Tensor(const std::vector<int64_t>& drafted, const at::Tensor& logits)>;
  virtual std::vector<int64_t> propose_sampled(
      const std::vector<int64_t>& history, int64_t max,
      const std::function<size_t(const std::vector<int64_t>&)>& allowed, const Process& process,
      at::Tensor& probabilities) {
    (void)process;
    probabilities = at::Tensor();
    return propose(history, max, allowed);
  }
  // After the verify forward: `proposed` candidates, of which the first `accepted` were kept.
  virtual void update(int64_t proposed, int64_t accepted) {
    (void)proposed;
    (void)accepted;
  }
};

}  // namespace gengraph

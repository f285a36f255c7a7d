// Speculative decoding's proposers: a candidate generator guesses the tokens that follow a row,
// the target model scores the guesses in one forward (ForwardBackend::verify), and the search
// strategy keeps the longest prefix it would have chosen itself (framework/decoding/
// speculative.cpp). Candidates change only how fast tokens come, never which: a wrong guess costs
// a wasted position of the verify forward.
//
// Candidate generators are decoding parts like the others: registered by name
// (candidate_registry(), registry.h), built-in `prompt_lookup` enabled by transformers'
// prompt_lookup_num_tokens, a registered one chosen with `candidate_generator: {name: ...}`.
#pragma once

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
  // After the verify forward: `proposed` candidates, of which the first `accepted` were kept.
  virtual void update(int64_t proposed, int64_t accepted) {
    (void)proposed;
    (void)accepted;
  }
};

}  // namespace gengraph

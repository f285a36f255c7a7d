// Streaming: each generated token handed to the caller as it is chosen. A public header: the
// Engine's (gengraph.h) and the decoding loop's (framework/decoding/generator.h) one stream type.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

namespace gengraph {

// One of the most likely tokens at a step (the setting top_logprobs): its id and its
// log-probability under the processed distribution the step's token was chosen from.
struct TopLogprob {
  int64_t token = 0;
  double logprob = 0;
};

struct StreamedToken {
  int64_t input = 0;     // which prompt
  int64_t sequence = 0;  // which of its sequences (num_return_sequences when sampling), from 0
  int64_t token = 0;     // the token id just chosen
  int64_t step = 0;      // generated tokens before this one in that sequence
  // The token's log-probability under the processed distribution it was chosen from, with the
  // setting output_scores (transformers' name) or top_logprobs; NaN without either.
  double logprob = std::numeric_limits<double>::quiet_NaN();
  // With top_logprobs = k > 0: the k most likely tokens of that distribution, best first (ties in
  // the order at::topk gives them); empty without it.
  std::vector<TopLogprob> top = {};
  // The sequence's last token: it ended with this one (EOS, a stop sequence, the length limit).
  bool last = false;
};

// Called once per token that belongs to a sequence's output, in step order and, within a step, in
// input order; never for the padding a finished sequence receives. Returns whether to go on:
// false stops the generation after the step that chose this token, and the result holds every
// sequence as far as it got (the rest of that step's tokens are still handed over). Only
// strategies that fix a token when they choose it can stream (greedy, sampling); beam strategies
// choose their sequences at the end, and streaming with one is an error.
using TokenStream = std::function<bool(const StreamedToken&)>;

}  // namespace gengraph

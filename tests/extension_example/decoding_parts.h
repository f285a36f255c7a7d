// Three decoding parts written outside gengraph and registered by name, so that an experiment file
// selects them like built-ins:
//   ban_token_range  logits processor: tokens first..last (inclusive) can never be chosen
//   stop_on_repeat   stopping criterion: a row stops once its last `n` tokens are one token
//   epsilon_greedy   search strategy: the argmax, except with probability `epsilon` a draw from
//                    the softmax of the processed scores
#pragma once

namespace example {

// Adds the three parts to gengraph's processor, stopping and strategy registries.
void register_decoding_parts();

}  // namespace example

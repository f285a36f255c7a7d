// Streaming: each generated token handed to the caller as it is chosen. A public header: the
// Engine's (gengraph.h) and the decoding loop's (framework/decoding/generator.h) one stream type.
#pragma once

#include <cstdint>
#include <functional>

namespace gengraph {

struct StreamedToken {
  int64_t input = 0;     // which prompt
  int64_t sequence = 0;  // which of its sequences (num_return_sequences when sampling), from 0
  int64_t token = 0;     // the token id just chosen
  int64_t step = 0;      // generated tokens before this one in that sequence
};

// Called once per token that belongs to a sequence's output, in step order and, within a step, in
// input order; never for the padding a finished sequence receives. Only strategies that fix a
// token when they choose it can stream (greedy, sampling); beam strategies choose their sequences
// at the end, and streaming with one is an error.
using TokenStream = std::function<void(const StreamedToken&)>;

}  // namespace gengraph

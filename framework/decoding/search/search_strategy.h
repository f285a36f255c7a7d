// SearchStrategy and StepDecision are public: <gengraph/ext/decoding.h>, where a strategy built
// outside gengraph finds them. Framework code includes them by this path.
#pragma once

#include <gengraph/ext/decoding.h>

#include <vector>

namespace gengraph {

// A decision's alternatives (top_tokens, top_logprobs) read to the host, one list per row, best
// first; no rows when the decision has none. The loops hand them out with the streamed tokens.
std::vector<std::vector<TopLogprob>> top_logprobs_on_host(const StepDecision& d);

}  // namespace gengraph

// How the decoding loop runs (generator.h); a light header for the settings. What it did is
// reported in the Generation it returns (gengraph/generation.h).
#pragma once

#include <gengraph/generation.h>

#include <cstdint>
#include <string>

namespace gengraph {

struct LoopOptions {
  using WholeStep = gengraph::WholeStep;  // the public API's (gengraph/generation.h)
  WholeStep whole_step = WholeStep::kOff;
  bool capture = true;     // replay the step as a CUDA graph (CUDA only); false: run it uncaptured
  int64_t sync_every = 4;  // read the done flag before every sync_every-th step
};

// "off" | "auto" | "on" -> WholeStep; throws naming `where` and the allowed values.
LoopOptions::WholeStep parse_whole_step(const std::string& text, const std::string& where);
std::string whole_step_name(LoopOptions::WholeStep w);

}  // namespace gengraph

// How the decoding loop runs (decode_loop.h), and what it reports having done; a light header
// for the settings and the results.
#pragma once

#include <cstdint>
#include <string>

namespace gengraph {

struct LoopOptions {
  enum class WholeStep {
    kOff,   // the host loop
    kAuto,  // the whole step when every part allows it, else the host loop (the result says why)
    kOn,    // the whole step, or an error naming the part that prevents it
  };
  WholeStep whole_step = WholeStep::kOff;
  bool capture = true;     // replay the step as a CUDA graph (CUDA only); false: run it uncaptured
  int64_t sync_every = 4;  // read the done flag before every sync_every-th step
};

// "off" | "auto" | "on" -> WholeStep; throws naming `where` and the allowed values.
LoopOptions::WholeStep parse_whole_step(const std::string& text, const std::string& where);
std::string whole_step_name(LoopOptions::WholeStep w);

// What a generation did about the whole step.
struct LoopReport {
  bool whole_step = false;  // the whole-step loop ran
  bool captured = false;    // ... replayed as a CUDA graph
  std::string fallback;     // why the host loop ran although whole_step was auto ("" otherwise)
  int64_t steps_run = 0;   // decoding steps run, those past the end (up to sync_every - 1) included
  int64_t flag_reads = 0;  // reads of the done flag, each a device-to-host wait on CUDA
  double capture_s = 0;    // capturing the graph
};

}  // namespace gengraph

// The whole decoding step on the device. The host loop (generator.cpp) runs a step as the
// backend's forward, then processors, strategy and stopping checks issued op by op from the host,
// and reads a `done` flag back every step. The whole-step loop instead composes, once per
// generation,
//
//   step = backend's StaticDecode::run  (forward over fixed buffers, the beam reorder included)
//        + strategy.device_step         (processors, choice, stop checks, over static Sequences)
//        + writing the chosen tokens, positions and parents into the backend's input buffers
//
// runs it with fixed shapes and no host reads, captured as one CUDA graph (`capture`; kept by the
// Generator for its next generation of the same shape) or uncaptured (any device; the CPU
// conformance tests run it so), and reads the
// device-side "all done" flag only every `sync_every` steps. Steps past the end change nothing:
// strategies freeze once done. Processors and strategies know nothing of graphs and backends
// nothing of decoding settings; every part says whether it can take part (whole_step_blocker()).
#pragma once

#include <cstdint>
#include <string>

namespace gengraph {

class ForwardBackend;
struct Pipeline;

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

// "" when the whole step can run with this pipeline and backend (static_decode() is asked, so
// call after prepare()), else the first reason it cannot, naming the part.
std::string whole_step_blocker(const Pipeline& pipe, ForwardBackend& backend, bool streaming,
                               const LoopOptions& options);

}  // namespace gengraph

// A CUDA graph of any host function, for loops that replay a whole step: captured once (on a side
// stream, into its own memory pool), replayed as often as needed. Keeps CUDA headers out of the
// framework's other translation units. Capturing records work without running it.
#pragma once

#include <c10/core/Device.h>

#include <functional>

namespace gengraph {

// Records `step`'s device work on `device` (an Error unless it is CUDA) and returns the replay,
// which owns the graph. `step` must already have run once uncaptured (library handles, lazily made
// tensors), must not read values back to the host, and must leave every result a later replay
// needs in tensors that outlive the graph.
std::function<void()> capture_step(const c10::Device& device, const std::function<void()>& step);

}  // namespace gengraph

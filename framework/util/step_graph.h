// A CUDA graph of any host function, for loops that replay a whole step: capture once (on a side
// stream, into its own memory pool), replay as often as needed. Keeps CUDA headers out of the
// framework's other translation units. Capturing records work without running it.
#pragma once

#include <c10/core/Device.h>

#include <functional>
#include <memory>

namespace gengraph {

class StepGraph {
 public:
  explicit StepGraph(const c10::Device& device);  // throws unless `device` is CUDA
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // Records `fn`'s device work. `fn` must already have run once uncaptured (library handles,
  // lazily made tensors), must not read values back to the host, and must leave every result a
  // later replay needs in tensors that outlive the graph.
  void capture(const std::function<void()>& fn);
  void replay();
  bool captured() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gengraph

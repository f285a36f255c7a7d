#include "framework/util/step_graph.h"

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "framework/util/device.h"
#include "framework/util/error.h"

namespace gengraph {

struct StepGraph::Impl {
  c10::Device device;
  std::unique_ptr<at::cuda::CUDAGraph> graph;
};

StepGraph::StepGraph(const c10::Device& device) : impl_(std::make_unique<Impl>(Impl{device, {}})) {
  if (!device.is_cuda()) {
    throw Error("a whole-step graph needs the model on a CUDA device, found " + device.str() +
                " (loop option capture: false runs the whole step uncaptured)");
  }
}

StepGraph::~StepGraph() = default;

void StepGraph::capture(const std::function<void()>& fn) {
  const c10::Device dev = impl_->device;
  c10::cuda::CUDAGuard guard(dev);
  // Capture needs a stream other than the default one; what the current stream wrote must be
  // complete before the side stream records reads of it, and the other way round after.
  auto stream = c10::cuda::getStreamFromPool(false, dev.index());
  synchronize(dev);
  impl_->graph = std::make_unique<at::cuda::CUDAGraph>();
  {
    c10::cuda::CUDAStreamGuard sg(stream);
    impl_->graph->capture_begin();
    fn();
    impl_->graph->capture_end();
  }
  synchronize(dev);
}

void StepGraph::replay() { impl_->graph->replay(); }

bool StepGraph::captured() const { return impl_->graph != nullptr; }

}  // namespace gengraph

#include "framework/util/step_graph.h"

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <memory>

#include "framework/util/device.h"
#include "framework/util/error.h"

namespace gengraph {

std::function<void()> capture_step(const c10::Device& device, const std::function<void()>& step) {
  if (!device.is_cuda()) {
    throw Error("a whole-step graph needs the model on a CUDA device, found " + device.str() +
                " (loop option capture: false runs the whole step uncaptured)");
  }
  c10::cuda::CUDAGuard guard(device);
  // Capture needs a stream other than the default one; what the current stream wrote must be
  // complete before the side stream records reads of it, and the other way round after.
  auto stream = c10::cuda::getStreamFromPool(false, device.index());
  synchronize(device);
  auto graph = std::make_shared<at::cuda::CUDAGraph>();
  {
    c10::cuda::CUDAStreamGuard sg(stream);
    graph->capture_begin();
    step();
    graph->capture_end();
  }
  synchronize(device);
  return [graph] { graph->replay(); };
}

}  // namespace gengraph

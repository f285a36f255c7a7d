// The built-in backends, registered explicitly (static initialisers in libraries get dropped).
#include "backends/register_builtin.h"

#include <mutex>

#include "backends/aoti/aoti_backend.h"
#include "backends/aoti/aoti_step.h"
#include "backends/cuda_graph/cuda_graph_backend.h"
#include "backends/eager/eager_backend.h"
#include "backends/trace/trace_backend.h"
#include "backends/trace/traced_step.h"
#include "framework/backend/backend_registry.h"

namespace gengraph {

void register_builtin_backends() {
  static std::once_flag once;
  std::call_once(once, [] {
    // The model steps first: cuda_graph reads them by name (framework/backend/model_step.h).
    ModelStepRegistry::instance().add(eager_step_info());
    ModelStepRegistry::instance().add(trace_step_info());
    ModelStepRegistry::instance().add(aoti_step_info());
    BackendRegistry::instance().add(eager_backend_info());
    BackendRegistry::instance().add(trace_backend_info());
    BackendRegistry::instance().add(cuda_graph_backend_info());
    BackendRegistry::instance().add(aoti_backend_info());
  });
}

}  // namespace gengraph

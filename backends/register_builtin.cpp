// The built-in backends, registered explicitly (static initialisers in libraries get dropped).
#include "backends/register_builtin.h"

#include <mutex>

#include "backends/aoti/aoti_backend.h"
#include "backends/cuda_graph/cuda_graph_backend.h"
#include "backends/eager/eager_backend.h"
#include "backends/trace/trace_backend.h"
#include "framework/backend/backend_registry.h"

namespace gengraph {

void register_builtin_backends() {
  static std::once_flag once;
  std::call_once(once, [] {
    BackendRegistry::instance().add(eager_backend_info());
    BackendRegistry::instance().add(trace_backend_info());
    BackendRegistry::instance().add(cuda_graph_backend_info());
    BackendRegistry::instance().add(aoti_backend_info());
  });
}

}  // namespace gengraph

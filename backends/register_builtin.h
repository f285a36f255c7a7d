// The built-in backends (eager, trace, cuda_graph, aoti) and model steps (eager, trace, aoti:
// framework/backend/model_step.h), registered explicitly: static initialisers in a library get
// dropped by the linker. Idempotent. gengraph::Engine and the CLI call it; a program
// that uses BackendRegistry directly calls it once before.
#pragma once

namespace gengraph {

void register_builtin_backends();

}  // namespace gengraph

#include "experiments/cli.h"
#include "framework/backend/backend_registry.h"
#include "recompute_backend.h"

int main(int argc, char** argv) {
  gengraph::register_builtin_backends();
  example::register_recompute_backend();
  return gengraph::cli_main(argc, argv);
}

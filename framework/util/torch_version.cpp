#include <torch/headeronly/version.h>

#include "framework/util/version.h"

#define GENGRAPH_STR2(x) #x
#define GENGRAPH_STR(x) GENGRAPH_STR2(x)

namespace gengraph {

const char* torch_version() {
  return GENGRAPH_STR(TORCH_VERSION_MAJOR) "." GENGRAPH_STR(TORCH_VERSION_MINOR) "." GENGRAPH_STR(
      TORCH_VERSION_PATCH);
}

}  // namespace gengraph

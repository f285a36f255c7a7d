// `eager`: runs the model's ATen ops directly, with a growing or a static KV cache.
// The reference every other backend is compared against.
#pragma once

#include "framework/backend/backend_registry.h"

namespace gengraph {

BackendInfo eager_backend_info();

}  // namespace gengraph

// `eager`: runs the model's ATen ops directly, with a growing or a static KV cache.
// The reference every other backend is compared against.
#pragma once

#include "framework/backend/backend_registry.h"
#include "framework/backend/model_step.h"

namespace gengraph {

BackendInfo eager_backend_info();
// The `eager` model step (framework/backend/model_step.h): the model's forward over a static cache.
ModelStepInfo eager_step_info();

}  // namespace gengraph

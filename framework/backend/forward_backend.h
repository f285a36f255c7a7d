// ForwardBackend, StepInputs and StaticDecode are public: <gengraph/ext/backend.h>, where a
// backend built outside gengraph finds them. Framework code includes them by this path.
#pragma once

#include <gengraph/ext/backend.h>

#include "framework/backend/options.h"  // read_share_prefill, expand_home

// BackendInfo and BackendRegistry are public: <gengraph/ext/backend.h>. gengraph's own backends
// are registered by register_builtin_backends() (backends/register_builtin.h). Framework code
// includes them by this path.
#pragma once

#include <gengraph/ext/backend.h>

#include "framework/backend/options.h"  // read_share_prefill, expand_home

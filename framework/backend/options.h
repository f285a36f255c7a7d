// Helpers for backends' options. The options themselves (BackendOptions: strings from YAML or
// --set, read with types and checked for unknown keys) are public: <gengraph/ext/backend.h>.
#pragma once

#include <gengraph/ext/backend.h>

#include <string>

namespace gengraph {

// The option share_prefill (default true), of backends that can run the prompt of several rows
// (the beams of one input) once and copy its cache: false prefills every row, for comparison.
bool read_share_prefill(const BackendOptions& o);

// The options window_rings (default true) and ring_spare (default kDefaultRingSpare), of backends
// whose caches can hold a model's sliding-window layers in rings (WindowLayout): the spare, or -1
// with window_rings false (every layer at the cache's whole length, for comparison).
int64_t read_ring_spare(const BackendOptions& o);
// Throws "backend '<b>': options window_rings and ring_spare apply to <apply_to>, found <found>"
// when either is given: for a configuration whose cache holds no rings.
void refuse_ring_options(const BackendOptions& o, const std::string& apply_to,
                         const std::string& found);

// "~/x" as the shell would expand it (YAML does not); other paths as they are. For path options.
std::string expand_home(const std::string& path);

}  // namespace gengraph

// `recompute`: a backend with no KV cache reuse. Every step re-runs the whole sequence, so it is
// slow but needs no cache logic at all: a reference for checking cache-based backends, and a
// worked example of adding a backend from outside gengraph.
#pragma once

namespace example {

// Adds "recompute" to gengraph's backend registry.
void register_recompute_backend();

}  // namespace example

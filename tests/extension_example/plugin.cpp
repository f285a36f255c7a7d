// The example's parts as a plug-in of the stock `gengraph` CLI: built as a MODULE library, loaded
// with `gengraph --plugin libexample_plugin.so ...` (or GENGRAPH_PLUGINS), which runs
// register_everything once. See docs/extending.md#plug-ins.
#include <gengraph/plugin.h>

#include "decoding_parts.h"
#include "recompute_backend.h"

namespace {

void register_everything() {
  example::register_recompute_backend();
  example::register_decoding_parts();
}

}  // namespace

GENGRAPH_PLUGIN(register_everything)

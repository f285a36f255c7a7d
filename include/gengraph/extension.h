// Writing gengraph's parts outside gengraph, the one header to include (link gengraph::core):
//   - a forward backend: derive ForwardBackend (do_prepare, do_prefill, do_decode), drive the
//     CausalLM it is given, keep a KVCache, and add it to BackendRegistry::instance() by name;
//   - a logits processor, a stopping criterion or a search strategy: derive LogitsProcessor,
//     StoppingCriterion or SearchStrategy (RowwiseSearch for one token per row), and add it to
//     processor_registry(), stopping_registry() or strategy_registry() by name.
// check_backend_conformance runs a registered backend beside eager through the checks the
// built-ins pass (<gengraph/conformance.h>).
// Registered parts are then chosen from YAML and from the Engine like built-ins. Register them at
// start-up in a program of your own (then call gengraph::cli_main, <gengraph/cli.h>, to offer the
// CLI's commands), or from a plug-in of the stock CLI (<gengraph/plugin.h>). docs/extending.md
// walks through each; tests/extension_example is a complete, tested project.
//
// Include only <gengraph/...> headers. The ones this header includes, below, are installed
// beside it because they declare these types; no other internal header is installed.
// Unlike <gengraph/gengraph.h>, this header needs LibTorch's headers (the parts work on
// at::Tensor): find_package(gengraph) finds them.
#pragma once

#include <gengraph/conformance.h>
#include <gengraph/gengraph.h>

#include "framework/backend/backend_registry.h"
#include "framework/backend/forward_backend.h"
#include "framework/cache/kv_cache.h"
#include "framework/decoding/registry.h"
#include "framework/decoding/search/rowwise_search.h"
#include "framework/model/causal_lm.h"

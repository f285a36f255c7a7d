// Writing gengraph's parts outside gengraph, the one header to include (link gengraph::core):
//   - a forward backend: derive ForwardBackend (do_prepare, do_prefill, do_decode), drive the
//     model it is given (run_forward_step), keep a KVCache, and add it to
//     BackendRegistry::instance() by name (<gengraph/ext/backend.h>, <gengraph/ext/model.h>,
//     <gengraph/ext/cache.h>);
//   - a logits processor, a stopping criterion, a search strategy or a candidate generator: derive
//     LogitsProcessor, StoppingCriterion, SearchStrategy (RowwiseSearch for one token per row) or
//     CandidateGenerator (<gengraph/ext/decoding.h>), reading the token history through
//     <gengraph/ext/token_history.h>, and add it to processor_registry(), stopping_registry(),
//     strategy_registry() or candidate_registry() by name (<gengraph/ext/registry.h>).
//   - a scheduling policy: derive SchedulingPolicy and add it to PolicyRegistry::instance()
//     (<gengraph/ext/scheduling.h>); a backend joins the scheduler by running ragged batches over
//     a PagedCache (ForwardBackend::runs_ragged, forward_ragged; <gengraph/ext/paged_cache.h>).
// check_backend_conformance runs a registered backend beside eager through the checks the
// built-ins pass (<gengraph/conformance.h>).
// Registered parts are then chosen from YAML and from the Engine like built-ins. Register them at
// start-up in a program of your own (then call gengraph::cli_main, <gengraph/cli.h>, to offer the
// CLI's commands), or from a plug-in of the stock CLI (<gengraph/plugin.h>). docs/extending.md
// walks through each; tests/extension_example is a complete, tested project.
//
// These headers are the whole extension surface: public headers, which include only each other,
// LibTorch's and nlohmann's; no internal header of gengraph is installed. Their interfaces are
// versioned by GENGRAPH_PLUGIN_ABI (<gengraph/plugin.h>). Unlike <gengraph/gengraph.h>, this
// header needs LibTorch's headers (the parts work on at::Tensor): find_package(gengraph) finds
// them.
#pragma once

#include <gengraph/conformance.h>
#include <gengraph/ext/backend.h>
#include <gengraph/ext/cache.h>
#include <gengraph/ext/decoding.h>
#include <gengraph/ext/model.h>
#include <gengraph/ext/paged_cache.h>
#include <gengraph/ext/registry.h>
#include <gengraph/ext/scheduling.h>
#include <gengraph/ext/token_history.h>
#include <gengraph/gengraph.h>

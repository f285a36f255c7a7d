// The backend conformance checks (declared in the public <gengraph/conformance.h>) and the
// strategies they run, which the test suite's own conformance tests run too.
#pragma once

#include <gengraph/conformance.h>

#include <string>
#include <utility>
#include <vector>

#include "framework/decoding/resolved_settings.h"

namespace gengraph {

// Every built-in strategy over the settings of `base`: greedy, seeded sampling (top_k 20), beam
// search (3 beams, 2 returned), beam sampling (early_stopping true) and diverse beam search (4
// beams in 2 groups), labelled.
std::vector<std::pair<std::string, ResolvedSettings>> every_strategy(const ResolvedSettings& base);

}  // namespace gengraph

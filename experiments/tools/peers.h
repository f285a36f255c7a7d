// The peers an experiment can put beside gengraph's rows: transformers' generate()
// (tools/hf_peer.py) and rival engines on the same weights (tools/engine_peer.py: CTranslate2 and
// llama.cpp), and what each can honour of the generation settings.
#pragma once

#include <string>
#include <vector>

#include "framework/decoding/resolved_settings.h"

namespace gengraph {

// Every peer name, in the order the docs list them.
const std::vector<std::string>& peer_names();

// The tool under tools/ that runs `peer` (a name from peer_names()).
std::string peer_tool(const std::string& peer);

// What `peer` cannot honour of `g` (the generation settings as the run resolves them) on `device`
// with `dtype`: the first setting it would have to ignore, as "generation.KEY = VALUE: REASON", or
// "" when it can run them all. Settings that act only under sampling (temperature, top_k, ...) or
// only with beams (length_penalty, ...) count only then, as in transformers.
std::string peer_refusal(const std::string& peer, const ResolvedSettings& g,
                         const std::string& device, const std::string& dtype);

}  // namespace gengraph

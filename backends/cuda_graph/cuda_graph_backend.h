// `cuda_graph`: the decode step, beam reorder included, captured once per batch-size bucket as a
// CUDA graph over a static KV cache and static input buffers, then replayed every token.
// Prefill runs uncaptured. Continuous batching's ragged steps (step: eager) are captured per
// bucket of tokens over the scheduler's paged cache (ragged_graphs.h). Options:
//   buckets: "1,2,4,8,16,32,64"   row counts (batch x beams) to capture; a batch uses the smallest
//                                  bucket that fits (extra rows are padding, computed and ignored)
//   max_length: N (0)             static cache length; 0 = the length of the first request
//   step: eager|trace|aoti (eager)  what the captured step runs: the model's ATen ops, its trace,
//                                  or its AOTInductor package (one package serves every bucket)
//   freeze, fuser                 for step: trace, as the trace backend's options
//   package, cache_dir, freezing, max_rows   for step: aoti, as the aoti backend's options
//   warmup: N (3)                 uncaptured runs on the capture stream before capturing
//   capture: true|false (true)    false runs the same static-buffer step uncaptured, on any device
//   ragged_max_tokens: N (256)    continuous batching (step: eager): a step of up to N tokens is
//                                  padded to a power of two and replayed as that bucket's graph;
//                                  N a power of two; larger steps run uncaptured
//   ragged_max_blocks: N (0)      the captured steps' block table width; 0 = enough blocks for
//                                  the model's max_positions; wider steps run uncaptured
#pragma once

#include "framework/backend/backend_registry.h"

namespace gengraph {

BackendInfo cuda_graph_backend_info();

}  // namespace gengraph

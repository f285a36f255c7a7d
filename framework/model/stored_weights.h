// Projection weights a file holds already quantized on one of gengraph's grids, so that a model
// takes their levels as they are instead of quantizing their dequantized values again: a GGUF's
// Q4_0 and Q4_1 blocks are int4 groups of 32, its Q8_0 blocks int8 in blocks of 32
// (docs/gguf.md#quantized-tensors).
#pragma once

#include <map>
#include <string>

#include "framework/quant/quantize.h"

namespace gengraph {

struct StoredWeights {
  // By canonical weight name ("model.layers.0.self_attn.q_proj.weight"): the levels [out, in],
  // their float16 scales and zeros [out, in / group], rows as the float weight's.
  std::map<std::string, Int4Weight> int4;
  // Int8 in blocks (a GGUF's Q8_0 under group_size 32): levels [out, in], float16 scales
  // [out, in / block].
  std::map<std::string, Int8Blocks> int8;
};

}  // namespace gengraph

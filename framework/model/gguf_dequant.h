// GGUF tensor data to float32: F16 and BF16 widened, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K and Q6_K
// dequantized as llama.cpp's reference dequantization does, each value rounded the same way
// (products and sums in float32, none fused: the file is compiled without FMA contraction).
#pragma once

#include <cstdint>

#include "framework/model/gguf.h"

namespace gengraph {

// `elements` values of `type` (a whole number of blocks) from `data` into `out`, in order.
// Runs on ATen's intra-op threads.
void gguf_dequantize(GgufType type, const uint8_t* data, int64_t elements, float* out);

}  // namespace gengraph

// The device's memory bandwidth, and the bytes a decode step must move: what a results row's
// decode time is compared with (docs/results-schema.md, "bandwidth").
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <string>

namespace gengraph {

class CausalLM;

// The device's memory bandwidth, measured two ways (bytes/s, best of 5 timings after a warm-up):
// `read` is a float32 matrix-vector product over a matrix far bigger than any cache (bytes of the
// matrix read), the access pattern of a batch-1 decode step and the fastest read stream found
// here (faster than a sum); `copy` is a copy_ of a buffer of the same size (bytes read + written).
// CUDA gets a bigger buffer and several ops per timing, so launch and sync costs stay small.
struct Bandwidth {
  double read = 0, copy = 0;
  std::string method;
};

Bandwidth measure_bandwidth(const c10::Device& device);

// Bytes a decode step must read at least: every weight once as the model holds it (quantized
// projections at their stored size, CausalLM::decode_weight_bytes), plus the keys/values written
// so far.
double decode_bytes_per_step(const CausalLM& m, int64_t rows, double mean_cache_len);

}  // namespace gengraph

// The device's memory bandwidth: what a results row's decode time is compared with, beside the
// bytes a decode step must read (Model::decode_read_bytes; docs/results-schema.md, "bandwidth").
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <string>

namespace gengraph {

// The device's memory bandwidth, measured two ways (bytes/s, best of 5 timings after a warm-up):
// `read` is the faster of a float32 matrix-vector product over a matrix far bigger than any cache
// (the access pattern of a batch-1 decode step) and, on CPU, gengraph's read stream over the same
// matrix (kernels::read_sum: vector loads on the decode's threads), in bytes of the matrix read;
// `copy` is a copy_ of a buffer of the same size (bytes read + written).
// CUDA gets a bigger buffer and several ops per timing, so launch and sync costs stay small.
struct Bandwidth {
  double read = 0, copy = 0;
  std::string method;
};

Bandwidth measure_bandwidth(const c10::Device& device);

}  // namespace gengraph

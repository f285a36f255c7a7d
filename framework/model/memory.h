// Memory estimates made before anything is allocated, checked against what the device has
// available, so that a legal but absurd setting (a million layers, a billion rows, a context of
// millions) is refused in a second, naming the estimate and the setting to change, instead of
// allocating until the machine runs out or LibTorch's allocator gives up.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>

#include "framework/model/model_config.h"

namespace gengraph {

struct Architecture;

// Bytes of the model's weights in `dtype`: the architecture's own tensor list for one and for two
// layers, extrapolated to the configured count (so a million layers costs no million-entry list).
double weight_bytes(const Architecture& arch, const ModelConfig& config, c10::ScalarType dtype);

// Bytes of a KV cache (keys and values, every layer) for `rows` x `max_length` positions.
double kv_cache_bytes(const ModelConfig& config, c10::ScalarType dtype, double rows,
                      double max_length);

// "1.5 GB", "812 MB", "12 KB".
std::string human_bytes(double bytes);

// Throws Error when `bytes` exceed what `device` has available (CPU: MemAvailable, bounded by a
// cgroup memory limit; CUDA: free device memory plus what the caching allocator holds unused):
// "<what> needs about X, more than the Y available on <device>; <advice>". Does nothing when the
// device cannot be asked (a CUDA device validated on a machine without one).
void check_memory(const std::string& what, double bytes, const c10::Device& device,
                  const std::string& advice);

}  // namespace gengraph

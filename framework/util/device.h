// Device helpers that keep CUDA headers out of the rest of the framework.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>

namespace gengraph {

bool cuda_available();
int cuda_device_count();
// Waits for all work on `device` (no-op on CPU).
void synchronize(const c10::Device& device);
// Resets / reads the caching allocator's peak (CUDA only; 0 on CPU).
void reset_peak_memory(const c10::Device& device);
int64_t peak_memory_bytes(const c10::Device& device);
// Memory that could still be allocated on `device`, in bytes: on CPU the kernel's MemAvailable,
// bounded by the cgroup memory limit and by the process's own limits (what RLIMIT_AS, `ulimit -v`,
// leaves above the current virtual size, and RLIMIT_DATA, `ulimit -d`, above the current data
// size); on CUDA the free device memory plus what the caching allocator holds unused. `bound` says
// which of these decided (empty for MemAvailable or the device's free memory). 0 bytes when it
// cannot be told (CUDA requested, none here).
struct AvailableMemory {
  int64_t bytes = 0;
  std::string bound;  // e.g. "the process's address-space limit (ulimit -v 4000000)"
};
AvailableMemory available_memory(const c10::Device& device);
int64_t available_memory_bytes(const c10::Device& device);
// The process's peak resident set size (bytes).
int64_t peak_rss_bytes();
std::string device_description(const c10::Device& device);

// "float32" | "bfloat16" | "float16" -> ScalarType; throws listing the allowed names.
c10::ScalarType parse_dtype(const std::string& name);
std::string dtype_name(c10::ScalarType t);
// "cpu" | "cuda" | "cuda:N" -> Device; throws when CUDA is requested but not present.
c10::Device parse_device(const std::string& name);

}  // namespace gengraph

#include "framework/util/device.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <sys/resource.h>

#include <fstream>

#include "framework/util/error.h"

namespace gengraph {

bool cuda_available() { return c10::cuda::device_count() > 0; }
int cuda_device_count() { return c10::cuda::device_count(); }

void synchronize(const c10::Device& device) {
  if (device.is_cuda()) {
    c10::cuda::CUDAGuard guard(device);
    c10::cuda::device_synchronize();
  }
}

void reset_peak_memory(const c10::Device& device) {
  if (device.is_cuda())
    c10::cuda::CUDACachingAllocator::resetPeakStats(device.index() < 0 ? 0 : device.index());
}

int64_t peak_memory_bytes(const c10::Device& device) {
  if (!device.is_cuda()) return 0;
  const auto stats =
      c10::cuda::CUDACachingAllocator::getDeviceStats(device.index() < 0 ? 0 : device.index());
  return stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
      .peak;
}

int64_t peak_rss_bytes() {
  struct rusage u {};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;
}

std::string device_description(const c10::Device& device) {
  if (device.is_cuda()) return "cuda:" + std::to_string(device.index() < 0 ? 0 : device.index());
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return "cpu (" + line.substr(colon + 2) + ")";
    }
  }
  return "cpu";
}

c10::ScalarType parse_dtype(const std::string& name) {
  if (name == "float32") return c10::kFloat;
  if (name == "bfloat16") return c10::kBFloat16;
  if (name == "float16") return c10::kHalf;
  throw Error("dtype '" + name + "': expected one of float32, bfloat16, float16");
}

std::string dtype_name(c10::ScalarType t) {
  switch (t) {
    case c10::kFloat:
      return "float32";
    case c10::kBFloat16:
      return "bfloat16";
    case c10::kHalf:
      return "float16";
    default:
      return c10::toString(t);
  }
}

c10::Device parse_device(const std::string& name) {
  c10::Device d(c10::kCPU);
  try {
    d = c10::Device(name);
  } catch (const std::exception&) {
    throw Error("device '" + name + "': expected cpu, cuda or cuda:N");
  }
  if (d.is_cuda()) {
    const int n = cuda_device_count();
    if (n == 0) throw Error("device '" + name + "' requested, but no CUDA device is visible here");
    if (d.index() >= n) {
      throw Error("device '" + name + "': only " + std::to_string(n) + " CUDA device(s) visible");
    }
    if (d.index() < 0) d = c10::Device(c10::kCUDA, 0);
  } else if (!d.is_cpu()) {
    throw Error("device '" + name + "': expected cpu, cuda or cuda:N");
  }
  return d;
}

}  // namespace gengraph

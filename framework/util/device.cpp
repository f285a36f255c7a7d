#include "framework/util/device.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <utility>

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

namespace {

// A number from a /proc or /sys file: the value after `key` (or the whole file when `key` is
// empty), or -1 when absent or "max".
int64_t number_in_file(const char* path, const std::string& key, int64_t scale) {
  std::ifstream in(path);
  for (std::string word; in >> word;) {
    if (!key.empty() && word != key) continue;
    std::string value = word;
    if (!key.empty() && !(in >> value)) return -1;
    if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos) return -1;
    return std::stoll(value) * scale;
  }
  return -1;
}

}  // namespace

namespace {

// The process's virtual size and data size (data + stack), in bytes, from /proc/self/statm; -1
// when it cannot be read.
std::pair<int64_t, int64_t> virtual_and_data_bytes() {
  std::ifstream in("/proc/self/statm");
  int64_t size = -1, resident = 0, shared = 0, text = 0, lib = 0, data = -1;
  if (!(in >> size >> resident >> shared >> text >> lib >> data)) return {-1, -1};
  const int64_t page = ::sysconf(_SC_PAGESIZE);
  return {size * page, data * page};
}

// What a soft resource limit leaves above `used` bytes: -1 when there is no limit (or `used` is
// unknown).
int64_t left_under(int resource, int64_t used) {
  struct rlimit r {};
  if (used < 0 || ::getrlimit(resource, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return -1;
  const auto limit = static_cast<int64_t>(std::min<rlim_t>(r.rlim_cur, INT64_MAX));
  return limit > used ? limit - used : 0;
}

std::string limit_kb(int resource) {
  struct rlimit r {};
  ::getrlimit(resource, &r);
  return std::to_string(static_cast<uint64_t>(r.rlim_cur) / 1024);
}

}  // namespace

AvailableMemory available_memory(const c10::Device& device) {
  AvailableMemory out;
  if (device.is_cuda()) {
    if (!cuda_available()) return out;
    const int index = device.index() < 0 ? 0 : device.index();
    c10::cuda::CUDAGuard guard(device);
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
      (void)cudaGetLastError();
      return out;
    }
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index);
    const auto agg = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    out.bytes = static_cast<int64_t>(free) + stats.reserved_bytes[agg].current -
                stats.allocated_bytes[agg].current;
    return out;
  }
  int64_t avail = number_in_file("/proc/meminfo", "MemAvailable:", 1024);
  // The smallest bound wins; each names itself.
  const auto bound_by = [&](int64_t left, std::string why) {
    if (left >= 0 && (avail < 0 || left < avail)) {
      avail = left;
      out.bound = std::move(why);
    }
  };
  const int64_t limit = number_in_file("/sys/fs/cgroup/memory.max", "", 1);
  if (limit > 0) {
    const int64_t used = number_in_file("/sys/fs/cgroup/memory.current", "", 1);
    bound_by(used >= 0 ? std::max<int64_t>(limit - used, 0) : limit,
             "the cgroup memory limit (memory.max " + std::to_string(limit) + " bytes)");
  }
  const auto [virtual_size, data_size] = virtual_and_data_bytes();
  bound_by(left_under(RLIMIT_AS, virtual_size),
           "the process's address-space limit (ulimit -v " + limit_kb(RLIMIT_AS) + ")");
  bound_by(left_under(RLIMIT_DATA, data_size),
           "the process's data-size limit (ulimit -d " + limit_kb(RLIMIT_DATA) + ")");
  out.bytes = avail < 0 ? 0 : avail;
  return out;
}

int64_t available_memory_bytes(const c10::Device& device) { return available_memory(device).bytes; }

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

#include "framework/model/memory.h"

#include <cstdio>
#include <sstream>

#include "framework/model/model_registry.h"
#include "framework/util/device.h"
#include "framework/util/error.h"

namespace gengraph {
namespace {

constexpr double kPerTensorOverhead = 2048;

}  // namespace

double weight_bytes(const Architecture& arch, const ModelConfig& config, c10::ScalarType dtype) {
  auto bytes_with = [&](int64_t layers) {
    ModelConfig c = config;
    c.num_layers = layers;
    if (!c.sliding_layers.empty()) c.sliding_layers.resize(static_cast<size_t>(layers), false);
    double total = 0;
    for (const auto& spec : arch.weight_specs(c)) {
      double n = 1;
      for (const int64_t d : spec.shape) n *= static_cast<double>(d);
      // The data, and what each tensor costs beside it (its TensorImpl, storage, name, map entry).
      total += n * static_cast<double>(c10::elementSize(dtype)) + kPerTensorOverhead;
    }
    return total;
  };
  const double one = bytes_with(1);
  if (config.num_layers <= 1) return one;
  return one + (bytes_with(2) - one) * static_cast<double>(config.num_layers - 1);
}

double kv_cache_bytes(const ModelConfig& c, c10::ScalarType dtype, double rows, double max_length) {
  return 2.0 * static_cast<double>(c.num_layers) * rows * static_cast<double>(c.num_kv_heads) *
         max_length * static_cast<double>(c.head_dim) *
         static_cast<double>(c10::elementSize(dtype));
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB", "PB", "EB"};
  int u = 0;
  while (bytes >= 1000 && u < 6) {
    bytes /= 1000;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, bytes >= 100 || u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

void check_memory(const std::string& what, double bytes, const c10::Device& device,
                  const std::string& advice) {
  const int64_t available = available_memory_bytes(device);
  if (available <= 0 || bytes <= static_cast<double>(available)) return;
  throw Error(what + " needs about " + human_bytes(bytes) + ", more than the " +
              human_bytes(static_cast<double>(available)) + " available on " + device.str() + "; " +
              advice);
}

}  // namespace gengraph

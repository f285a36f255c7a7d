// Token ids that processors and stopping criteria compare with, kept on the device of the tensors
// they read.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace gengraph {

// `ids` as an int64 tensor on `device`, made on first use and kept in `cache` (made again only if
// the device changes). Made at every step instead, the host-to-device copy would wait for the
// CUDA stream once per token.
inline const at::Tensor& ids_on_device(at::Tensor& cache, const std::vector<int64_t>& ids,
                                       const c10::Device& device) {
  if (!cache.defined() || cache.device() != device) cache = at::tensor(ids, at::kLong).to(device);
  return cache;
}

}  // namespace gengraph

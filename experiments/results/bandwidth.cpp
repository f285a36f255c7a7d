#include "experiments/results/bandwidth.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <sstream>

#include "framework/util/device.h"

namespace gengraph {

Bandwidth measure_bandwidth(const c10::Device& device) {
  const bool cuda = device.is_cuda();
  const int64_t side = cuda ? 16384 : 8192;  // floats: 1 GiB on CUDA, 256 MiB elsewhere
  const int iters = cuda ? 8 : 1;
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(device);
  at::Tensor m = at::ones({side, side}, opts), v = at::ones({side}, opts),
             out = at::empty({side}, opts);
  at::Tensor a = m.view({-1}), b = at::empty_like(a);
  const double bytes = static_cast<double>(m.nbytes()) * iters;
  auto best_of = [&](double bytes_moved, const std::function<void()>& op) {
    double best = 0;
    for (int i = 0; i < 6; ++i) {
      synchronize(device);
      const auto t0 = std::chrono::steady_clock::now();
      for (int k = 0; k < iters; ++k) op();
      synchronize(device);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (i > 0) best = std::max(best, bytes_moved / s);
    }
    return best;
  };
  Bandwidth bw;
  bw.read = best_of(bytes, [&] { at::mv_out(out, m, v); });
  bw.copy = best_of(2 * bytes, [&] { b.copy_(a); });
  std::ostringstream d;
  d << "read: float32 mv over a " << side << "x" << side
    << " matrix (bytes of the matrix); copy: copy_ of " << (m.nbytes() >> 20)
    << " MiB (bytes read + written); " << iters << " op(s) per timing, best of 5 after a warm-up";
  bw.method = d.str();
  return bw;
}

}  // namespace gengraph

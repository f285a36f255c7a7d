#include "experiments/results/bandwidth.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <sstream>
#include <vector>

#include "framework/quant/kernels.h"
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
  // Each op timed once a round, the rounds alternating the ops (a host whose speed drifts moves
  // them alike), the first round a warm-up; the best rate of each op.
  struct Op {
    double bytes_moved;
    std::function<void()> run;
    double best = 0;
  };
  volatile float sink = 0;
  std::vector<Op> ops = {{bytes, [&] { at::mv_out(out, m, v); }}, {2 * bytes, [&] { b.copy_(a); }}};
  // On CPU also gengraph's read stream (kernels::read_sum on the decode's threads): on a 2-core
  // Zen 3 LibTorch's mv read 19.1 GB/s where llama.cpp's f32 decode read 20.8, so mv alone was
  // not a ceiling.
  if (!cuda) ops.push_back({bytes, [&] { sink = sink + kernels::read_sum(m); }});
  for (int i = 0; i < 6; ++i) {
    for (Op& op : ops) {
      synchronize(device);
      const auto t0 = std::chrono::steady_clock::now();
      for (int k = 0; k < iters; ++k) op.run();
      synchronize(device);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (i > 0) op.best = std::max(op.best, op.bytes_moved / s);
    }
  }
  const double mv = ops[0].best, stream = cuda ? 0 : ops[2].best;
  Bandwidth bw;
  bw.read = std::max(mv, stream);
  bw.copy = ops[1].best;
  std::ostringstream d;
  d << "read: the faster of a float32 mv over a " << side << "x" << side << " matrix";
  if (!cuda) d << " and gengraph's read stream (kernels::read_sum) over it";
  d << " (bytes of the matrix; mv " << mv / 1e9 << " GB/s";
  if (!cuda) d << ", read stream " << stream / 1e9 << " GB/s";
  d << "); copy: copy_ of " << (m.nbytes() >> 20) << " MiB (bytes read + written); " << iters
    << " op(s) per timing, best of 5 rounds alternating the ops after a warm-up round";
  bw.method = d.str();
  return bw;
}

}  // namespace gengraph

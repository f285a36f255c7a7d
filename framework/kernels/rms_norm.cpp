#include "framework/kernels/rms_norm.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>

namespace gengraph::kernels {
namespace {

at::Tensor rms_norm_cpu(const at::Tensor& x_in, const at::Tensor& weight, double eps) {
  TORCH_CHECK(rms_norm_applies(x_in, weight), "gengraph::rms_norm: float32 CPU activations [..., ",
              weight.numel(), "] and a float32 weight [d], got ", x_in.sizes(), " ",
              x_in.scalar_type(), " and ", weight.sizes(), " ", weight.scalar_type());
  const at::Tensor x = x_in.contiguous();
  const at::Tensor w = weight.contiguous();
  const int64_t d = w.numel(), rows = d == 0 ? 0 : x.numel() / d;
  at::Tensor y = at::empty_like(x);
  const float* xp = x.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const float eps_f = static_cast<float>(eps);
  at::parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, d)),
                   [&](int64_t r0, int64_t r1) {
                     for (int64_t r = r0; r < r1; ++r) {
                       const float* xr = xp + r * d;
                       float* yr = yp + r * d;
                       double ss = 0.0;
                       for (int64_t i = 0; i < d; ++i) {
                         const float sq = xr[i] * xr[i];  // x.pow(2), rounded to float
                         ss += sq;
                       }
                       const float mean = static_cast<float>(ss / static_cast<double>(d));
                       const float inv = 1.0f / std::sqrt(mean + eps_f);
                       for (int64_t i = 0; i < d; ++i) {
                         const float normed = xr[i] * inv;  // x * rsqrt(...), rounded
                         yr[i] = wp[i] * normed;
                       }
                     }
                   });
  return y;
}

}  // namespace

bool rms_norm_applies(const at::Tensor& x, const at::Tensor& weight) {
  return x.defined() && weight.defined() && x.is_cpu() && weight.is_cpu() &&
         x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat && weight.dim() == 1 &&
         x.dim() >= 1 && x.size(-1) == weight.size(0);
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("gengraph::rms_norm", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&, double)>();
  return op.call(x, weight, eps);
}

}  // namespace gengraph::kernels

TORCH_LIBRARY_FRAGMENT(gengraph, m) {
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
}

TORCH_LIBRARY_IMPL(gengraph, CPU, m) { m.impl("rms_norm", &gengraph::kernels::rms_norm_cpu); }

// The shape-only (Meta) kernel, so that torch.export can trace the operator.
namespace {
at::Tensor rms_norm_meta(const at::Tensor& x, const at::Tensor& weight, double eps) {
  return at::empty_like(x, x.options().memory_format(at::MemoryFormat::Contiguous));
}
}  // namespace

TORCH_LIBRARY_IMPL(gengraph, Meta, m) { m.impl("rms_norm", &rms_norm_meta); }

// The kernels as operators of the dispatcher (gengraph::linear_int8, ...), so that TorchScript's
// tracer records them and torch.export / AOTInductor can trace them (their Meta kernels).
#include <ATen/ATen.h>
#include <torch/library.h>

#include "framework/quant/kernels_internal.h"

// Operators of the dispatcher, so that TorchScript's tracer records them (its fallback records
// any registered operator) and a trace replays them.
TORCH_LIBRARY_FRAGMENT(gengraph, m) {
  m.def("linear_int8(Tensor x, Tensor q, Tensor scales) -> Tensor");
  m.def("linear_w8a8(Tensor x, Tensor q, Tensor scales, int block=0) -> Tensor");
  // model.int8_activation_rows as one operator, for a program whose row count is not known when
  // it is made (an AOTInductor package, tools/export_aoti.py): linear_w8a8 when x has at least
  // `activation_rows` rows (and activation_rows > 0), else linear_int8, decided at every call as
  // Projection decides it.
  m.def(
      "linear_int8_act(Tensor x, Tensor q, Tensor scales, int activation_rows, int block=0) -> "
      "Tensor");
  m.def("linear_int4(Tensor x, Tensor packed, Tensor scales, Tensor zeros, int group) -> Tensor");
  m.def("linear_w4a8(Tensor x, Tensor packed, Tensor scales, Tensor zeros, int group) -> Tensor");
  // The same for int4 (an AOTInductor package): linear_w4a8 from `activation_rows` rows (> 0),
  // else linear_int4.
  m.def(
      "linear_int4_act(Tensor x, Tensor packed, Tensor scales, Tensor zeros, int group, "
      "int activation_rows) -> Tensor");
  m.def("linear_bf16(Tensor x, Tensor w) -> Tensor");
  m.def("linear_f32(Tensor x, Tensor w) -> Tensor");
}

namespace gengraph::kernels::detail {
namespace {
at::Tensor linear_int8_act_cpu(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scales,
                               int64_t activation_rows, int64_t block) {
  TORCH_CHECK(activation_rows >= 0,
              "gengraph::linear_int8_act: activation_rows must be 0 or more, got ",
              activation_rows);
  return activation_rows > 0 && x.dim() == 2 && x.size(0) >= activation_rows
             ? linear_w8a8_cpu(x, q, scales, block)
             : linear_int8_cpu(x, q, scales);
}

at::Tensor linear_int4_act_cpu(const at::Tensor& x, const at::Tensor& packed,
                               const at::Tensor& scales, const at::Tensor& zeros, int64_t group,
                               int64_t activation_rows) {
  TORCH_CHECK(activation_rows >= 0,
              "gengraph::linear_int4_act: activation_rows must be 0 or more, got ",
              activation_rows);
  return activation_rows > 0 && x.dim() == 2 && x.size(0) >= activation_rows
             ? linear_w4a8_cpu(x, packed, scales, zeros, group)
             : linear_int4_cpu(x, packed, scales, zeros, group);
}
}  // namespace
}  // namespace gengraph::kernels::detail

TORCH_LIBRARY_IMPL(gengraph, CPU, m) {
  m.impl("linear_int8", &gengraph::kernels::detail::linear_int8_cpu);
  m.impl("linear_w8a8", &gengraph::kernels::detail::linear_w8a8_cpu);
  m.impl("linear_int8_act", &gengraph::kernels::detail::linear_int8_act_cpu);
  m.impl("linear_int4", &gengraph::kernels::detail::linear_int4_cpu);
  m.impl("linear_w4a8", &gengraph::kernels::detail::linear_w4a8_cpu);
  m.impl("linear_int4_act", &gengraph::kernels::detail::linear_int4_act_cpu);
  m.impl("linear_bf16", &gengraph::kernels::detail::linear_bf16_cpu);
  m.impl("linear_f32", &gengraph::kernels::detail::linear_f32_cpu);
}

// Shape-only (Meta) kernels, so that torch.export and Inductor can trace the operators
// (tools/export_aoti.py exports a quantized model with them): the output's size from the inputs',
// symbolic sizes kept symbolic.
namespace gengraph::kernels {
namespace {

at::Tensor rows_by(const at::Tensor& x, const c10::SymInt& n, const char* op) {
  TORCH_CHECK(x.dim() == 2, op, ": activations must be 2-D, got ", x.dim(), " dimensions");
  return at::empty_symint({x.sym_size(0), n}, x.options());
}

at::Tensor linear_int8_meta(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scales) {
  TORCH_CHECK(q.dim() == 2, "gengraph::linear_int8: weight must be 2-D");
  return rows_by(x, q.sym_size(0), "gengraph::linear_int8");
}

at::Tensor linear_w8a8_meta(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scales,
                            int64_t block) {
  return linear_int8_meta(x, q, scales);
}

at::Tensor linear_int8_act_meta(const at::Tensor& x, const at::Tensor& q, const at::Tensor& scales,
                                int64_t activation_rows, int64_t block) {
  return linear_int8_meta(x, q, scales);
}

at::Tensor linear_int4_meta(const at::Tensor& x, const at::Tensor& packed, const at::Tensor& scales,
                            const at::Tensor& zeros, int64_t group) {
  TORCH_CHECK(packed.dim() == 2, "gengraph::linear_int4: weight must be 2-D");
  return rows_by(x, packed.sym_size(0), "gengraph::linear_int4");
}

at::Tensor linear_int4_act_meta(const at::Tensor& x, const at::Tensor& packed,
                                const at::Tensor& scales, const at::Tensor& zeros, int64_t group,
                                int64_t activation_rows) {
  return linear_int4_meta(x, packed, scales, zeros, group);
}

at::Tensor linear_bf16_meta(const at::Tensor& x, const at::Tensor& w) {
  TORCH_CHECK(w.dim() == 2, "gengraph::linear_bf16: weight must be 2-D");
  return rows_by(x, w.sym_size(0), "gengraph::linear_bf16");
}

}  // namespace
}  // namespace gengraph::kernels

TORCH_LIBRARY_IMPL(gengraph, Meta, m) {
  m.impl("linear_int8", &gengraph::kernels::linear_int8_meta);
  m.impl("linear_w8a8", &gengraph::kernels::linear_w8a8_meta);
  m.impl("linear_int8_act", &gengraph::kernels::linear_int8_act_meta);
  m.impl("linear_int4", &gengraph::kernels::linear_int4_meta);
  m.impl("linear_w4a8", &gengraph::kernels::linear_int4_meta);
  m.impl("linear_int4_act", &gengraph::kernels::linear_int4_act_meta);
  m.impl("linear_bf16", &gengraph::kernels::linear_bf16_meta);
}

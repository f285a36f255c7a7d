#include "framework/quant/projection.h"

#include <ATen/ATen.h>
#include <ATen/TracerMode.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <string>

#include "framework/quant/kernels.h"
#include "framework/quant/quantize.h"
#include "framework/util/error.h"

namespace gengraph {

namespace {
// x as a matrix, the GEMM's result viewed back with `out` features.
at::Tensor rows_of(const at::Tensor& x) { return x.reshape({-1, x.size(-1)}); }
at::Tensor shaped(const at::Tensor& y, const at::Tensor& x) {
  auto sizes = x.sizes().vec();
  sizes.back() = y.size(-1);
  return y.view(sizes);
}

// LibTorch's oneDNN linear operators, registered by libtorch_cpu under mkldnn:: (no ATen header
// declares them, so they are called through the dispatcher).
using LinearFn = at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                            c10::string_view, c10::List<std::optional<c10::Scalar>>,
                            std::optional<c10::string_view>);
using LinearAddFn = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                               const std::optional<at::Tensor>&, c10::string_view);

const c10::TypedOperatorHandle<LinearFn>& onednn_linear() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("mkldnn::_linear_pointwise", "")
                             .typed<LinearFn>();
  return op;
}

const c10::TypedOperatorHandle<LinearAddFn>& onednn_linear_add() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("mkldnn::_linear_pointwise", "binary")
                             .typed<LinearAddFn>();
  return op;
}

std::optional<at::Tensor> optional(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}
}  // namespace

bool onednn_gemm(const at::Tensor& weight) {
  // oneDNN's call costs a fixed overhead more than MKL's, whatever the size: below the size where
  // the two break even (2^19 floats, 2 MB) at::linear is faster (docs/benchmarks.md#cpu-gemms,
  // docs/results/quant-notes-from-comments.md).
  constexpr int64_t kMinElements = int64_t{1} << 19;
  return weight.device().is_cpu() && weight.scalar_type() == at::kFloat &&
         weight.numel() >= kMinElements && at::hasMKLDNN() &&
         c10::Dispatcher::singleton().findSchema({"mkldnn::_linear_pointwise", ""}).has_value();
}

Projection::Projection(at::Tensor w, at::Tensor b, const WeightFormat& f, const Int4Weight* stored,
                       const Int8Blocks* stored_int8)
    : weight(std::move(w)), bias(std::move(b)), format(f) {
  TORCH_CHECK(weight.dim() == 2 && weight.is_contiguous(), "Projection: a contiguous 2-D weight");
  out_features = weight.size(0);
  // int8 activations (int8 or int4 weights) have CPU kernels only.
  if (format.quantized() && format.int8_activation_rows > 0 && !weight.is_cpu()) {
    throw Error(
        "model.int8_activation_rows: int8 activations run on CPU only so far (LibTorch's "
        "integer GEMM); set 0 on " +
        weight.device().str());
  }
  // Every entry point checks the format first (YAML, the Engine, quality, the loader); this is the
  // last line before a division by group_size.
  if (format.quantized()) check_weight_format(format, true, key_names_with_prefix("model."));
  switch (format.kind) {
    case WeightFormat::Kind::kAsLoaded:
      onednn = onednn_gemm(weight);
      return;
    case WeightFormat::Kind::kInt8: {
      const int64_t block = format.int8_activation_block;
      if (block != 0 && format.int8_activation_rows > 0 && weight.size(1) % block != 0) {
        throw Error(
            "model.int8_activation_block: expected 0, or a multiple of 32 dividing every "
            "projection's input channels; found " +
            std::to_string(block) + " for a projection of " + std::to_string(weight.size(1)) +
            " input channels");
      }
      if (format.int8_blocks()) {
        // A float16 scale per block of group_size channels: gengraph's CPU kernels only.
        const int64_t group = format.group_size;
        if (!weight.is_cpu()) {
          throw Error("model.group_size: int8 in blocks (group_size " + std::to_string(group) +
                      ") runs on CPU only (LibTorch's CUDA int8 kernel takes a scale per output "
                      "channel); leave group_size out with int8 on " +
                      weight.device().str());
        }
        if (weight.size(1) % group != 0) {
          throw Error("model.weights int8: a projection's " + std::to_string(weight.size(1)) +
                      " input channels are not a multiple of group_size " + std::to_string(group) +
                      " (choose one that divides them)");
        }
        if (stored_int8 &&
            (stored_int8->block != group || stored_int8->q.sizes() != weight.sizes())) {
          throw Error("Projection: stored int8 blocks of " + std::to_string(stored_int8->block) +
                      " do not fit a weight of " + std::to_string(weight.size(0)) + " x " +
                      std::to_string(weight.size(1)) + " in blocks of " + std::to_string(group));
        }
        Int8Blocks q = stored_int8 ? *stored_int8 : quantize_int8_blocks(weight, group);
        qweight = std::move(q.q);
        scales = std::move(q.scales);
        break;
      }
      Int8Weight q = quantize_int8(weight);
      qweight = std::move(q.q);
      // gengraph's CPU kernel takes float32 scales; LibTorch's CUDA kernel the activations' dtype.
      scales = weight.is_cpu() ? q.scales.to(at::kFloat).contiguous() : std::move(q.scales);
      break;
    }
    case WeightFormat::Kind::kInt4: {
      if (weight.size(1) % format.int4_group() != 0) {
        throw Error("model.weights int4: a projection's " + std::to_string(weight.size(1)) +
                    " input channels are not a multiple of group_size " +
                    std::to_string(format.int4_group()) + " (choose one that divides them)");
      }
      if (stored && (stored->group != format.int4_group() || stored->q.sizes() != weight.sizes())) {
        throw Error("Projection: stored int4 levels of shape " + std::to_string(stored->q.size(0)) +
                    " x " + std::to_string(stored->q.size(1)) + " in groups of " +
                    std::to_string(stored->group) + " do not fit a weight of " +
                    std::to_string(weight.size(0)) + " x " + std::to_string(weight.size(1)) +
                    " in groups of " + std::to_string(format.int4_group()));
      }
      if (!weight.device().is_cpu()) {
        const Int4Cuda packed =
            pack_int4_cuda(stored ? *stored : quantize_int4(weight, format.int4_group()));
        qweight = packed.packed;
        scales = packed.scales_and_zeros;
        break;
      }
      Int4Weight q = stored ? *stored : quantize_int4(weight, format.int4_group());
      qweight = kernels::pack_int4(q.q);
      scales = std::move(q.scales);
      zeros = std::move(q.zeros);
      break;
    }
    case WeightFormat::Kind::kBFloat16:
      qweight = weight.to(at::kBFloat16).contiguous();
      break;
  }
  weight = at::Tensor();  // the float weight is not read again
}

// TorchScript's tracer cannot record the oneDNN operator's Scalar?[] argument: a model being
// traced takes at::linear (a frozen CPU trace then gets oneDNN from optimize_for_inference).
bool tracing() { return at::tracer::impl::is_dispatch_enabled(); }

bool Projection::streams(const at::Tensor& x) const {
  return weight.defined() && weight.is_cpu() && weight.scalar_type() == at::kFloat &&
         x.scalar_type() == at::kFloat && x.dim() >= 1 && x.size(-1) > 0 &&
         (x.numel() / x.size(-1) < kernels::kStreamRows || kernels::BatchInvariant::active());
}

at::Tensor Projection::operator()(const at::Tensor& x) const {
  if (format.quantized()) {
    const at::Tensor x2 = rows_of(x).contiguous();
    at::Tensor y;
    if (qweight.is_cpu()) {
      // gengraph's kernels (framework/quant/kernels.h): float32 activations.
      const at::Tensor xf = x2.scalar_type() == at::kFloat ? x2 : x2.to(at::kFloat);
      // int8 activations from int8_activation_rows rows; under BatchInvariant from one row, since
      // a threshold on the rows would make a row's arithmetic depend on its batch.
      const bool w8 =
          format.int8_activation_rows > 0 &&
          (xf.size(0) >= format.int8_activation_rows || kernels::BatchInvariant::active());
      switch (format.kind) {
        case WeightFormat::Kind::kInt8:
          y = w8 ? kernels::linear_w8a8(xf, qweight, scales, format.int8_activation_block)
                 : kernels::linear_int8(xf, qweight, scales);
          break;
        case WeightFormat::Kind::kInt4:
          y = w8 ? kernels::linear_w4a8(xf, qweight, scales, zeros, format.int4_group())
                 : kernels::linear_int4(xf, qweight, scales, zeros, format.int4_group());
          break;
        default:
          y = kernels::linear_bf16(xf, qweight);
          break;
      }
      if (y.scalar_type() != x.scalar_type()) y = y.to(x.scalar_type());
    } else if (format.kind == WeightFormat::Kind::kInt8) {
      y = at::_weight_int8pack_mm(x2, qweight, scales);
    } else if (format.kind == WeightFormat::Kind::kInt4) {
      // LibTorch's CUDA kernel (tinygemm): bfloat16 activations, float32 sums, bfloat16 out.
      y = at::_weight_int4pack_mm(x2.to(at::kBFloat16), qweight, format.int4_group(), scales);
      if (y.size(1) != out_features) y = y.narrow(1, 0, out_features);  // padding rows dropped
      y = y.to(x.scalar_type()).contiguous();
    } else {
      y = at::linear(x2.to(at::kBFloat16), qweight).to(x.scalar_type());
    }
    // y is this call's own: the bias added in place (the same sums as y + bias, without a second
    // output to allocate, whose fresh pages cost more than the additions at a prefill's rows).
    if (bias.defined()) y.add_(bias);
    return shaped(y, x);
  }
  if (streams(x)) {
    at::Tensor y = kernels::linear_f32(rows_of(x).contiguous(), weight);
    if (bias.defined()) y.add_(bias);
    return shaped(y, x);
  }
  if (onednn && !tracing()) {
    return shaped(onednn_linear().call(rows_of(x), weight, optional(bias), "none",
                                       c10::List<std::optional<c10::Scalar>>(), ""),
                  x);
  }
  return bias.defined() ? at::linear(x, weight, bias) : at::linear(x, weight);
}

at::Tensor Projection::add_to(const at::Tensor& residual, const at::Tensor& x) const {
  if (format.quantized() || streams(x)) {
    // The product is this call's own: the residual added into it (a + b and b + a are the same
    // float) where the two agree in shape and type, as they do in the models.
    at::Tensor y = (*this)(x);
    if (y.sizes() == residual.sizes() && y.scalar_type() == residual.scalar_type()) {
      return y.add_(residual);
    }
    return residual + y;
  }
  if (onednn && !tracing()) {
    return shaped(
        onednn_linear_add().call(rows_of(x), rows_of(residual), weight, optional(bias), "add"),
        residual);
  }
  if (bias.defined()) return residual + (*this)(x);
  return shaped(at::addmm(rows_of(residual), rows_of(x), weight.t()), residual);
}

}  // namespace gengraph

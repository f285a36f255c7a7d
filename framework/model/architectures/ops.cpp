#include "framework/model/architectures/ops.h"

#include <ATen/ATen.h>
#include <ATen/TracerMode.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "framework/cache/kv_cache.h"
#include "framework/kernels/layer_ops.h"
#include "framework/kernels/weight_only.h"
#include "framework/util/error.h"

namespace gengraph {

Activation parse_activation(const std::string& name, const std::string& source) {
  static const std::map<std::string, Activation> kNames = {
      {"gelu_new", Activation::kGeluNew},  {"gelu_pytorch_tanh", Activation::kGeluNew},
      {"gelu_fast", Activation::kGeluNew}, {"gelu", Activation::kGeluExact},
      {"relu", Activation::kRelu},         {"silu", Activation::kSilu},
      {"swish", Activation::kSilu},        {"quick_gelu", Activation::kQuickGelu}};
  auto it = kNames.find(name);
  if (it == kNames.end()) {
    std::vector<std::string> known;
    for (const auto& [k, v] : kNames) known.push_back(k);
    throw Error(source + ": unsupported activation '" + name +
                "'; supported: " + join(known, ", "));
  }
  return it->second;
}

at::Tensor activate(const at::Tensor& x, Activation a) {
  switch (a) {
    case Activation::kGeluNew: {
      // transformers' NewGELUActivation, written as it does, term by term.
      const double c = std::sqrt(2.0 / M_PI);
      return 0.5 * x * (1.0 + at::tanh(c * (x + 0.044715 * at::pow(x, 3.0))));
    }
    case Activation::kGeluExact:
      return at::gelu(x);
    case Activation::kRelu:
      return at::relu(x);
    case Activation::kSilu:
      return at::silu(x);
    case Activation::kQuickGelu:
      return x * at::sigmoid(1.702 * x);
  }
  return x;
}

at::Tensor conv1d_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  auto sizes = x.sizes().vec();
  sizes.back() = weight.size(1);
  return at::addmm(bias, x.reshape({-1, x.size(-1)}), weight).view(sizes);
}

bool gpt2_family_ignorable(const std::string& key) {
  auto ends_with = [&](const std::string& s) {
    return key.size() >= s.size() && key.compare(key.size() - s.size(), s.size(), s) == 0;
  };
  return ends_with(".attn.bias") || ends_with(".attn.masked_bias") || key == "lm_head.weight";
}

at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const at::Tensor& mask, double scale) {
  const int64_t rows = q.size(0), heads = q.size(1), t = q.size(2), hd = q.size(3);
  // A decode step on CPU in float32: gengraph's kernel, one task per row and head, instead of
  // LibTorch's flash kernel's two MKL calls per row and head.
  if (kernels::decode_attention_applies(q, k, v, mask)) {
    return kernels::decode_attention(q, k, v, mask, scale);
  }
  at::Tensor out = at::scaled_dot_product_attention(q, k, v, mask, 0.0, false, scale,
                                                    /*enable_gqa=*/k.size(1) != heads);
  return out.transpose(1, 2).reshape({rows, t, heads * hd});
}

at::Tensor additive_mask(const at::Tensor& mask, at::ScalarType dtype) {
  return at::full(mask.sizes(), -std::numeric_limits<double>::infinity(),
                  mask.options().dtype(dtype))
      .masked_fill_(mask, 0.0);
}

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
  // oneDNN's call costs about 30 us more than MKL's here, whatever the size: below about 2 MB of
  // weight (768 x 768 floats break even) at::linear is faster (docs/benchmarks.md#cpu-gemms).
  constexpr int64_t kMinElements = int64_t{1} << 19;
  return weight.device().is_cpu() && weight.scalar_type() == at::kFloat &&
         weight.numel() >= kMinElements && at::hasMKLDNN() &&
         c10::Dispatcher::singleton().findSchema({"mkldnn::_linear_pointwise", ""}).has_value();
}

Int8Weight quantize_int8(const at::Tensor& weight) {
  const at::Tensor w = weight.to(at::kFloat);
  // A row of zeros gets scale 1 (its values quantize to 0 whatever the scale).
  const at::Tensor absmax = w.abs().amax(1);
  const at::Tensor scales = at::where(absmax > 0, absmax / 127.0, at::ones_like(absmax));
  Int8Weight out;
  out.q = at::round(w / scales.unsqueeze(1)).clamp(-127, 127).to(at::kChar).contiguous();
  out.scales = scales.to(weight.scalar_type()).contiguous();
  return out;
}

at::Tensor dequantize_int8(const Int8Weight& w) {
  return w.q.to(at::kFloat) * w.scales.to(at::kFloat).unsqueeze(1);
}

Int4Weight quantize_int4(const at::Tensor& weight, int64_t group) {
  const int64_t n = weight.size(0), k = weight.size(1);
  const at::Tensor w = weight.to(at::kFloat).reshape({n, k / group, group});
  const at::Tensor lo = w.amin(-1), hi = w.amax(-1);
  // 15 steps from the minimum to the maximum; a constant group gets step 1 (all its values are
  // the minimum). The levels are decided on that float32 grid; then the step and the minimum are
  // stored as float16 (rounded to nearest), as a Q4_1 block stores its own.
  const at::Tensor range = hi - lo;
  const at::Tensor step = at::where(range > 0, range / 15.0, at::ones_like(range));
  const at::Tensor scale = step.to(at::kHalf), zero = lo.to(at::kHalf);
  if (!(zero.isfinite().all().item<bool>() && scale.isfinite().all().item<bool>())) {
    const at::Tensor bad = (zero.isfinite() & scale.isfinite()).logical_not().nonzero()[0];
    const int64_t row = bad[0].item<int64_t>(), g = bad[1].item<int64_t>();
    throw Error("model.weights int4: output channel " + std::to_string(row) + "'s group " +
                std::to_string(g) + " holds weights from " +
                std::to_string(lo[row][g].item<float>()) + " to " +
                std::to_string(hi[row][g].item<float>()) +
                "; int4 keeps its scales and zeros in float16, which holds finite values up to "
                "65504 (use int8 or bfloat16 for this model)");
  }
  Int4Weight out;
  out.group = group;
  out.q = at::round((w - lo.unsqueeze(-1)) / step.unsqueeze(-1))
              .clamp(0, 15)
              .to(at::kInt)
              .reshape({n, k})
              .contiguous();
  out.scales = scale.contiguous();
  out.zeros = zero.contiguous();
  return out;
}

namespace {

// The CUDA kernel's value is (q - 8) x scale + zero: its zero is the stored minimum plus 8 steps.
// bfloat16 [in / group, out, 2].
at::Tensor int4_cuda_scales_and_zeros(const Int4Weight& w) {
  const at::Tensor step = w.scales.to(at::kFloat), lo = w.zeros.to(at::kFloat);
  return at::stack({step, lo + 8.0 * step}, -1)  // [out, groups, 2]
      .transpose(0, 1)
      .to(at::kBFloat16)
      .contiguous();
}

}  // namespace

Int4Cuda pack_int4_cuda(const Int4Weight& w) {
  const int64_t n = w.q.size(0), k = w.q.size(1);
  // The kernel's tiles: k a multiple of 16 x inner k-tiles (2, 4 or 8: the most that fit; a
  // group of 32 or more dividing k makes 2 fit), n a multiple of 8: other outputs (GPT-2's
  // 50257-token head) get rows of level 0 with scale and zero 0, whose outputs are dropped.
  const int64_t tiles = k % 128 == 0 ? 8 : k % 64 == 0 ? 4 : 2;
  if (k % (16 * tiles) != 0) {
    throw Error("model.weights int4 on CUDA: a projection of " + std::to_string(k) +
                " inputs; LibTorch's CUDA int4 kernel needs a multiple of 32");
  }
  const int64_t padded = (n + 7) / 8 * 8;
  at::Tensor q = w.q.to(at::kInt);
  at::Tensor sz = int4_cuda_scales_and_zeros(w);  // [groups, n, 2]
  if (padded != n) {
    q = at::constant_pad_nd(q, {0, 0, 0, padded - n}, 0);
    sz = at::constant_pad_nd(sz, {0, 0, 0, padded - n}, 0).contiguous();
  }
  // Two levels a byte, the even input channel in the high nibble, as the packing op reads them.
  const at::Tensor bytes =
      q.slice(1, 0, k, 2).bitwise_left_shift(4).bitwise_or(q.slice(1, 1, k, 2)).to(at::kByte);
  Int4Cuda out;
  out.packed = at::_convert_weight_to_int4pack(bytes.contiguous(), tiles);
  out.scales_and_zeros = sz;
  return out;
}

at::Tensor dequantize_int4_cuda(const Int4Weight& w) {
  const int64_t n = w.q.size(0), k = w.q.size(1);
  const at::Tensor sz = int4_cuda_scales_and_zeros(w).to(at::kFloat).transpose(0, 1);  // [n, g, 2]
  const at::Tensor q = w.q.to(at::kFloat).reshape({n, k / w.group, w.group});
  return ((q - 8.0) * sz.select(-1, 0).unsqueeze(-1) + sz.select(-1, 1).unsqueeze(-1))
      .reshape({n, k});
}

at::Tensor dequantize_int4(const Int4Weight& w) {
  const int64_t n = w.q.size(0), k = w.q.size(1);
  return (w.q.to(at::kFloat).reshape({n, k / w.group, w.group}) *
              w.scales.to(at::kFloat).unsqueeze(-1) +
          w.zeros.to(at::kFloat).unsqueeze(-1))
      .reshape({n, k});
}

Projection::Projection(at::Tensor w, at::Tensor b, const WeightFormat& f)
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
      Int8Weight q = quantize_int8(weight);
      qweight = std::move(q.q);
      // gengraph's CPU kernel takes float32 scales; LibTorch's CUDA kernel the activations' dtype.
      scales = weight.is_cpu() ? q.scales.to(at::kFloat).contiguous() : std::move(q.scales);
      break;
    }
    case WeightFormat::Kind::kInt4: {
      if (weight.size(1) % format.group_size != 0) {
        throw Error("model.weights int4: a projection's " + std::to_string(weight.size(1)) +
                    " input channels are not a multiple of group_size " +
                    std::to_string(format.group_size) + " (choose one that divides them)");
      }
      if (!weight.device().is_cpu()) {
        const Int4Cuda packed = pack_int4_cuda(quantize_int4(weight, format.group_size));
        qweight = packed.packed;
        scales = packed.scales_and_zeros;
        break;
      }
      Int4Weight q = quantize_int4(weight, format.group_size);
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
         x.numel() / x.size(-1) < kernels::kStreamRows;
}

at::Tensor Projection::operator()(const at::Tensor& x) const {
  if (format.quantized()) {
    const at::Tensor x2 = rows_of(x).contiguous();
    at::Tensor y;
    if (qweight.is_cpu()) {
      // gengraph's kernels (framework/kernels/weight_only.h): float32 activations.
      const at::Tensor xf = x2.scalar_type() == at::kFloat ? x2 : x2.to(at::kFloat);
      switch (format.kind) {
        case WeightFormat::Kind::kInt8:
          y = format.int8_activation_rows > 0 && xf.size(0) >= format.int8_activation_rows
                  ? kernels::linear_w8a8(xf, qweight, scales, format.int8_activation_block)
                  : kernels::linear_int8(xf, qweight, scales);
          break;
        case WeightFormat::Kind::kInt4:
          y = format.int8_activation_rows > 0 && xf.size(0) >= format.int8_activation_rows
                  ? kernels::linear_w4a8(xf, qweight, scales, zeros, format.group_size)
                  : kernels::linear_int4(xf, qweight, scales, zeros, format.group_size);
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
      y = at::_weight_int4pack_mm(x2.to(at::kBFloat16), qweight, format.group_size, scales);
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

at::Tensor activate_fused(const at::Tensor& x, Activation a) {
  if (a == Activation::kGeluNew) return at::gelu(x, "tanh");
  return activate(x, a);
}

at::Tensor rotate_fused(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin_signed,
                        RotaryPairs pairs) {
  const int64_t rows = x.size(0), t = x.size(1), heads = x.size(2), hd = x.size(3);
  const at::Tensor swapped =
      pairs == RotaryPairs::kNeighbours
          ? x.reshape({rows, t, heads, hd / 2, 2}).flip(-1).view({rows, t, heads, hd})
          : x.reshape({rows, t, heads, 2, hd / 2}).flip(-2).view({rows, t, heads, hd});
  return x * cos + swapped * sin_signed;
}

AttentionInputs rotate_and_store(const at::Tensor& y, const at::Tensor& cos,
                                 const at::Tensor& sin_signed, int64_t heads, int64_t kv_heads,
                                 RotaryPairs pairs, KVCache& cache, int64_t layer,
                                 const at::Tensor& slots) {
  const int64_t rows = y.size(0), t = y.size(1), hd = cos.size(-1);
  AttentionInputs a;
  if (kernels::rotary_qkv_applies(y, cos, heads, kv_heads)) {
    const auto layout = pairs == RotaryPairs::kNeighbours ? kernels::RotaryLayout::kNeighbours
                                                          : kernels::RotaryLayout::kHalves;
    if (auto buffers = cache.layer_buffers(layer)) {
      std::tie(a.keys, a.values) = *buffers;
      a.q = kernels::rotary_qkv_into(y, cos, sin_signed, heads, kv_heads, layout, a.keys, a.values,
                                     slots);
    } else {
      auto [q, k, v] = kernels::rotary_qkv(y, cos, sin_signed, heads, kv_heads, layout);
      a.q = q;
      std::tie(a.keys, a.values) = cache.update(layer, k, v, slots);
    }
    return a;
  }
  const at::Tensor qk =
      rotate_fused(y.narrow(-1, 0, (heads + kv_heads) * hd).view({rows, t, heads + kv_heads, hd}),
                   cos, sin_signed, pairs);
  a.q = qk.narrow(2, 0, heads).transpose(1, 2);
  const at::Tensor k = qk.narrow(2, heads, kv_heads).transpose(1, 2);
  const at::Tensor v = y.narrow(-1, (heads + kv_heads) * hd, kv_heads * hd)
                           .view({rows, t, kv_heads, hd})
                           .transpose(1, 2);
  std::tie(a.keys, a.values) = cache.update(layer, k, v, slots);
  return a;
}

}  // namespace gengraph

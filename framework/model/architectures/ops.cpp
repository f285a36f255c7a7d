#include "framework/model/architectures/ops.h"

#include <ATen/ATen.h>
#include <ATen/TracerMode.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <cmath>
#include <limits>
#include <map>

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

Projection::Projection(at::Tensor w, at::Tensor b)
    : weight(std::move(w)), bias(std::move(b)), onednn(onednn_gemm(weight)) {
  TORCH_CHECK(weight.dim() == 2 && weight.is_contiguous(), "Projection: a contiguous 2-D weight");
}

// TorchScript's tracer cannot record the oneDNN operator's Scalar?[] argument: a model being
// traced takes at::linear (a frozen CPU trace then gets oneDNN from optimize_for_inference).
bool tracing() { return at::tracer::impl::is_dispatch_enabled(); }

at::Tensor Projection::operator()(const at::Tensor& x) const {
  if (onednn && !tracing()) {
    return shaped(onednn_linear().call(rows_of(x), weight, optional(bias), "none",
                                       c10::List<std::optional<c10::Scalar>>(), ""),
                  x);
  }
  return bias.defined() ? at::linear(x, weight, bias) : at::linear(x, weight);
}

at::Tensor Projection::add_to(const at::Tensor& residual, const at::Tensor& x) const {
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

}  // namespace gengraph

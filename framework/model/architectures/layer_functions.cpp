#include "framework/model/architectures/layer_functions.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "framework/cache/kv_cache.h"
#include "framework/kernels/layer_ops.h"
#include "framework/model/causal_lm.h"
#include "framework/util/error.h"
#include "framework/util/strings.h"

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

at::Tensor attend_cached(KVCache& cache, int64_t layer, const at::Tensor& q, const at::Tensor& k,
                         const at::Tensor& v, const at::Tensor& mask, double scale,
                         int64_t window) {
  if (cache.attends()) return cache.attend(layer, q, scale, window);
  return attend(q, k, v, mask, scale);
}

at::Tensor output_positions(const at::Tensor& h, const ForwardBatch& b) {
  if (b.all_positions) return h;
  if (b.logit_positions.defined()) return h.index_select(1, b.logit_positions);
  return h.select(1, h.size(1) - 1);
}

at::Tensor additive_mask(const at::Tensor& mask, at::ScalarType dtype) {
  if (!mask.defined()) return {};
  return at::full(mask.sizes(), -std::numeric_limits<double>::infinity(),
                  mask.options().dtype(dtype))
      .masked_fill_(mask, 0.0);
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

at::Tensor linear_maybe_bias(const at::Tensor& x, const at::Tensor& weight,
                             const at::Tensor& bias) {
  return bias.defined() ? at::linear(x, weight, bias) : at::linear(x, weight);
}

at::Tensor sliding_window_mask(const at::Tensor& mask, const at::Tensor& slots, int64_t window) {
  const at::Tensor keys = at::arange(mask.size(-1), slots.options());  // [L]
  return mask.logical_and(slots.unsqueeze(1) - keys.unsqueeze(0) < window);
}

at::Tensor window_layer_mask(const ForwardBatch& b, int64_t window) {
  if (b.window_mask.defined()) return b.window_mask;
  if (window > 0 && b.attn_mask.defined()) return sliding_window_mask(b.attn_mask, b.slots, window);
  return b.attn_mask;
}

}  // namespace gengraph

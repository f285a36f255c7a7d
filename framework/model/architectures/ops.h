// Small tensor functions shared by architectures.
#pragma once

#include <ATen/Tensor.h>

#include <string>

namespace gengraph {

enum class Activation { kGeluNew, kGeluExact, kRelu, kSilu, kQuickGelu };

// Maps transformers' activation names (ACT2FN keys); throws naming `source` for unknown ones.
Activation parse_activation(const std::string& name, const std::string& source);
at::Tensor activate(const at::Tensor& x, Activation a);

// transformers' Conv1D: x @ weight + bias with weight stored [in, out].
//   x: [..., in] -> [..., out]
at::Tensor conv1d_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// Checkpoint keys of the GPT-2 family (GPT-2, GPT-J) that are not weights: the causal-mask
// buffers of older checkpoints, and a tied head weight saved anyway.
bool gpt2_family_ignorable(const std::string& key);

// Scaled dot-product attention of q over the cache.
//   q: [rows, heads, T, hd]; k, v: [rows, kv_heads, L, hd]; mask: [rows, 1, T, L] bool
//   -> [rows, T, heads * hd]
at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const at::Tensor& mask, double scale);

}  // namespace gengraph

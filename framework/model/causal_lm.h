// The model side of a forward step: a causal language model reading and writing a KV cache.
// What a backend reads of it (ForwardBatch, ModelShape, run_forward_step) is public:
// <gengraph/ext/model.h>; the class itself, with its weights and configuration, is internal.
#pragma once

#include <ATen/Tensor.h>
#include <gengraph/ext/model.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "framework/cache/kv_cache.h"
#include "framework/model/model_config.h"
#include "framework/model/weights.h"
#include "framework/quant/projection.h"

namespace gengraph {

class CausalLM {
 public:
  CausalLM(ModelConfig config, WeightMap weights)
      : config_(std::move(config)), weights_(std::move(weights)) {
    take_stored();
  }
  virtual ~CausalLM() = default;
  // Drops the file's stored levels (ModelConfig::stored) once the architecture has built its
  // projections from them: the loader calls it, so they are not held beside the packed weights.
  void release_stored();

  const ModelConfig& config() const { return config_; }
  const WeightMap& weights() const { return weights_; }
  at::ScalarType dtype() const;
  at::Device device() const;
  int64_t parameter_count() const;
  // The weight bytes a decode step reads: every tensor of weights() as held, except that the
  // projections a quantized WeightFormat stores count at their stored size (int8, int4 with
  // scales and zeros, bfloat16) instead of the checkpoint's.
  double decode_weight_bytes() const;
  // ring_spare >= 0: the sliding-window layers in rings (model_cache_shape,
  // <gengraph/ext/model.h>).
  CacheShape cache_shape(int64_t rows, int64_t max_len, int64_t ring_spare = -1) const;
  WindowLayout window_layout(int64_t max_len, int64_t ring_spare) const;
  // The scaled-dot-product-attention kernel LibTorch picks for this model's decode step (one query
  // per row over max_len cache slots, the mask this form passes) on its device and dtype, as
  // at::SDPBackend numbers it: 0 math, 1 flash, 2 memory-efficient, 3 cuDNN, -1 none; or
  // kGengraphDecodeAttention where gengraph's own kernel takes it (kernels::decode_attention:
  // float32 on CPU).
  static constexpr int64_t kGengraphDecodeAttention = 5;
  int64_t decode_attention_kernel(int64_t rows, int64_t max_len) const;

  // Runs the decoder over `batch`, writing its keys/values into `cache` (the caller has already
  // recorded the slots' validity and built attn_mask). Returns the last position's logits,
  // [rows, vocab], in the model dtype (every position's, [rows, T, vocab], with all_positions).
  virtual at::Tensor forward(const ForwardBatch& batch, KVCache& cache) const = 0;

 protected:
  const at::Tensor& w(const std::string& name) const;
  // Concatenates the named weights along `dim` into one contiguous tensor, once, and replaces each
  // of them in weights() by a view of it, so the model holds one copy. With `transpose` the result
  // is stored transposed (a 2-D weight [a, b] becomes a contiguous [b, a]). Returns the fused
  // tensor (transposed when asked).
  at::Tensor fuse(const std::vector<std::string>& names, int64_t dim, bool transpose = false);
  // The named 2-D weight stored transposed and contiguous; weights() then holds a view of it.
  at::Tensor transposed(const std::string& name) { return fuse({name}, 0, true); }
  // A Projection of `weight` (a tensor of weights(), or one fused from them) in `format`; a
  // quantized one's stored size replaces the weight's in decode_weight_bytes(). A weight fuse()
  // made from weights the file stored as int4 on `format`'s grid takes those levels as they are.
  Projection project(const at::Tensor& weight, const at::Tensor& bias, const WeightFormat& format);

 private:
  ModelConfig config_;
  WeightMap weights_;
  double quantized_bytes_saved_ = 0;  // checkpoint bytes minus stored bytes, quantized projections
  // fuse()'s results whose parts the file stored quantized (ModelConfig::stored): their levels
  // concatenated as the floats were, for project() to take, keyed by the fused tensor's data
  // (the weights themselves too, from construction, for projections made of one weight as it
  // is). project() also checks the shape; an entry is dropped once used or fused.
  std::map<const void*, Int4Weight> stored_int4_;
  std::map<const void*, Int8Blocks> stored_int8_;
  // Files' stored levels for weights projected as they are (an output head, a tied embedding):
  // keyed by the weight's data as fuse() keys its results.
  void take_stored();
};

// A stable identifier of a model's weights and shape (config, tensor names/shapes, value samples):
// what traces and compiled packages record so that one made for other weights is refused.
std::string model_fingerprint(const CausalLM& model);

}  // namespace gengraph

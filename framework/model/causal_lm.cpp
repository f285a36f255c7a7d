#include "framework/model/causal_lm.h"

#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <optional>
#include <sstream>

#include "framework/kernels/layer_ops.h"
#include "framework/model/stored_weights.h"
#include "framework/util/error.h"

namespace gengraph {
namespace {

int64_t grid(const Int4Weight& l) { return l.group; }
int64_t grid(const Int8Blocks& l) { return l.block; }
void append_zeros(const Int4Weight& l, std::vector<at::Tensor>& z) { z.push_back(l.zeros); }
void append_zeros(const Int8Blocks&, std::vector<at::Tensor>&) {}
void set_zeros(Int4Weight& l, const std::vector<at::Tensor>& z) { l.zeros = at::cat(z, 0); }
void set_zeros(Int8Blocks&, const std::vector<at::Tensor>&) {}

// The named weights' stored levels joined along their rows, as fuse() joins the floats; nullopt
// unless every one has them on one grid.
template <typename Levels>
std::optional<Levels> joined(const std::map<std::string, Levels>& stored,
                             const std::vector<std::string>& names) {
  std::vector<at::Tensor> q, s, z;
  std::optional<Levels> out;
  for (const auto& n : names) {
    const auto it = stored.find(n);
    if (it == stored.end() || (out && grid(it->second) != grid(*out))) return std::nullopt;
    if (!out) out = it->second;
    q.push_back(it->second.q);
    s.push_back(it->second.scales);
    append_zeros(it->second, z);
  }
  if (out && names.size() > 1) {
    out->q = at::cat(q, 0);
    out->scales = at::cat(s, 0);
    set_zeros(*out, z);
  }
  return out;
}

}  // namespace

at::ScalarType CausalLM::dtype() const { return weights_.begin()->second.scalar_type(); }
at::Device CausalLM::device() const { return weights_.begin()->second.device(); }

int64_t CausalLM::parameter_count() const {
  int64_t n = 0;
  for (const auto& [name, t] : weights_) n += t.numel();
  return n;
}

double CausalLM::decode_weight_bytes() const {
  double bytes = 0;
  for (const auto& [name, t] : weights_) bytes += static_cast<double>(t.nbytes());
  return bytes - quantized_bytes_saved_;
}

void CausalLM::release_stored() {
  config_.stored.reset();
  stored_int4_.clear();
  stored_int8_.clear();
}

void CausalLM::take_stored() {
  if (!config_.stored) return;
  for (const auto& [name, l] : config_.stored->int4) {
    if (const auto it = weights_.find(name); it != weights_.end()) {
      stored_int4_[it->second.data_ptr()] = l;
    }
  }
  for (const auto& [name, l] : config_.stored->int8) {
    if (const auto it = weights_.find(name); it != weights_.end()) {
      stored_int8_[it->second.data_ptr()] = l;
    }
  }
}

Projection CausalLM::project(const at::Tensor& weight, const at::Tensor& bias,
                             const WeightFormat& format) {
  const double checkpoint = static_cast<double>(weight.nbytes());
  const auto int4 = stored_int4_.find(weight.data_ptr());
  const auto int8 = stored_int8_.find(weight.data_ptr());
  const bool take4 = int4 != stored_int4_.end() && format.kind == WeightFormat::Kind::kInt4 &&
                     int4->second.group == format.int4_group();
  const bool take8 =
      int8 != stored_int8_.end() && format.int8_blocks() && int8->second.block == format.group_size;
  Projection p(weight, bias, format, take4 ? &int4->second : nullptr,
               take8 ? &int8->second : nullptr);
  if (int4 != stored_int4_.end()) stored_int4_.erase(int4);
  if (int8 != stored_int8_.end()) stored_int8_.erase(int8);
  if (format.quantized()) {
    double held = 0;
    for (const at::Tensor* t : {&p.qweight, &p.scales, &p.zeros})
      if (t->defined()) held += static_cast<double>(t->nbytes());
    quantized_bytes_saved_ += checkpoint - held;
  }
  return p;
}

CacheShape CausalLM::cache_shape(int64_t rows, int64_t max_len, int64_t ring_spare) const {
  return CacheShape{config_.num_layers,   rows,
                    config_.num_kv_heads, max_len,
                    config_.head_dim,     window_layout(max_len, ring_spare)};
}

WindowLayout CausalLM::window_layout(int64_t max_len, int64_t ring_spare) const {
  const ModelConfig& c = config_;
  WindowLayout w;
  if (ring_spare < 0 || c.sliding_window <= 0 || c.sliding_layers.empty()) return w;
  // A ring no smaller than the whole cache saves nothing.
  if (c.sliding_window + ring_spare >= max_len) return w;
  w.window = c.sliding_window;
  w.spare = ring_spare;
  w.layers = c.sliding_layers;
  return w;
}

int64_t CausalLM::decode_attention_kernel(int64_t rows, int64_t max_len) const {
  const auto& c = config_;
  const auto f = at::TensorOptions().dtype(dtype()).device(device());
  // The choice reads shapes, dtypes and strides only: the tensors are left unfilled.
  const auto q = at::empty({rows, c.num_heads, 1, c.head_dim}, f);
  const auto kv = at::empty({rows, c.num_kv_heads, max_len, c.head_dim}, f);
  // The fused form passes an additive mask in the compute dtype, the unfused one a boolean mask.
  const auto mask = at::empty({rows, 1, 1, max_len}, c.fused ? f : f.dtype(at::kBool));
  if (kernels::decode_attention_applies(q, kv, kv, mask)) return kGengraphDecodeAttention;
  return at::_fused_sdp_choice(q, kv, kv, mask, 0.0, false, std::nullopt,
                               c.num_kv_heads != c.num_heads);
}

const at::Tensor& CausalLM::w(const std::string& name) const {
  auto it = weights_.find(name);
  if (it == weights_.end()) throw Error("model has no weight '" + name + "'");
  return it->second;
}

at::Tensor CausalLM::fuse(const std::vector<std::string>& names, int64_t dim, bool transpose) {
  std::vector<at::Tensor> parts;
  for (const auto& n : names) parts.push_back(w(n));
  at::Tensor fused = parts.size() == 1 ? parts[0] : at::cat(parts, dim);
  if (transpose) fused = fused.t().contiguous();
  // Rows of the fused projection ([out, in]) are the parts' output rows in order when the parts
  // are [out_i, in] joined along 0, or Conv1D's [in, out_i] joined along 1 and transposed (a
  // single part transposed is its own [out, in]).
  // The parts' own entries go (their tensors may be freed and the addresses reused), then the
  // fused tensor gets its joined levels, or none.
  for (const at::Tensor& p : parts) {
    stored_int4_.erase(p.data_ptr());
    stored_int8_.erase(p.data_ptr());
  }
  if (config_.stored && (names.size() == 1 || (transpose ? dim == 1 : dim == 0))) {
    if (auto l = joined(config_.stored->int4, names)) stored_int4_[fused.data_ptr()] = *l;
    if (auto l = joined(config_.stored->int8, names)) stored_int8_[fused.data_ptr()] = *l;
  }
  const at::Tensor logical = transpose ? fused.t() : fused;
  int64_t offset = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    const int64_t n = parts[i].size(dim);
    weights_[names[i]] = logical.narrow(dim, offset, n);
    offset += n;
  }
  return fused;
}

at::Tensor run_forward_step(const CausalLM& model, KVCache& cache, const at::Tensor& input_ids,
                            const at::Tensor& positions, const at::Tensor& slots,
                            const at::Tensor& token_valid, bool all_positions) {
  cache.write_validity(slots, token_valid);
  ForwardBatch b;
  b.input_ids = input_ids;
  b.positions = positions;
  b.slots = slots;
  b.attn_mask = attention_mask(cache.validity(), slots);
  b.window_mask = cache.window_mask();
  b.all_positions = all_positions;
  return model.forward(b, cache);
}

ModelShape model_shape(const CausalLM& model) {
  const ModelConfig& c = model.config();
  ModelShape s;
  s.model_type = c.model_type;
  s.vocab_size = c.vocab_size;
  s.hidden_size = c.hidden_size;
  s.num_layers = c.num_layers;
  s.num_heads = c.num_heads;
  s.num_kv_heads = c.num_kv_heads;
  s.head_dim = c.head_dim;
  s.max_positions = c.max_positions;
  return s;
}

at::ScalarType model_dtype(const CausalLM& model) { return model.dtype(); }
at::Device model_device(const CausalLM& model) { return model.device(); }

CacheShape model_cache_shape(const CausalLM& model, int64_t rows, int64_t max_len,
                             int64_t ring_spare) {
  return model.cache_shape(rows, max_len, ring_spare);
}

WindowLayout model_window_layout(const CausalLM& model, int64_t max_len, int64_t ring_spare) {
  return model.window_layout(max_len, ring_spare);
}

at::Tensor model_forward(const CausalLM& model, const ForwardBatch& batch, KVCache& cache) {
  return model.forward(batch, cache);
}

std::string model_fingerprint(const CausalLM& model) {
  std::ostringstream o;
  const auto& c = model.config();
  o << c.model_type << c.vocab_size << c.hidden_size << c.num_layers << c.num_heads
    << c.num_kv_heads << c.head_dim << c.intermediate_size << c.max_positions << c.norm_eps
    << c.activation;
  for (const auto& [name, t] : model.weights()) {
    o << name << t.sizes();
    const at::Tensor flat = t.reshape({-1});
    o << flat.narrow(0, 0, std::min<int64_t>(flat.numel(), 64))
             .to(at::kDouble)
             .sum()
             .item<double>();
  }
  return std::to_string(std::hash<std::string>{}(o.str()));
}

}  // namespace gengraph

#include "backends/eager/eager_backend.h"

#include <ATen/ATen.h>

#include <optional>

#include "framework/backend/model_step.h"
#include "framework/backend/options.h"
#include "framework/cache/kv_cache.h"
#include "framework/model/causal_lm.h"

namespace gengraph {
namespace {

class EagerBackend final : public ForwardBackend {
 public:
  EagerBackend(std::shared_ptr<const CausalLM> model, bool static_cache, bool share_prefill)
      : ForwardBackend(std::move(model)),
        static_cache_(static_cache),
        share_prefill_(share_prefill) {}

  std::string name() const override { return "eager"; }

  BackendReport report() const override {
    return {{"static_cache", static_cache_ ? 1.0 : 0.0},
            {"sdpa_kernel",
             rows() > 0 ? double(model().decode_attention_kernel(rows(), max_length())) : -1.0},
            {"reorder_bytes_per_step", cache_ ? cache_->reorder_bytes_per_step() : 0.0}};
  }

 protected:
  void do_prepare(int64_t rows, int64_t max_length) override {
    if (!static_cache_) {
      growing_ = std::make_unique<GrowingCache>(model().config().num_layers, max_length);
      cache_ = growing_.get();
      return;
    }
    const auto options = at::TensorOptions().dtype(model().dtype()).device(model().device());
    cache_ =
        &reuse_or_allocate(static_, model().cache_shape(rows, max_length), options, Reorder::kSwap);
  }

  bool shares_prefill() const override { return share_prefill_; }

  at::Tensor do_prefill(const StepInputs& in, const at::Tensor& slots) override {
    if (in.copies == 1) {
      return run_forward_step(model(), *cache_, in.input_ids, in.positions, slots, in.token_valid);
    }
    // The prompt once per input, then its cache copied to the input's other rows. A static cache
    // takes it in its first `inputs` rows, written in place; a growing one holds just those rows.
    const int64_t inputs = in.input_ids.size(0);
    std::optional<StaticCache> first;
    if (static_cache_) first.emplace(static_->first_rows(inputs));
    const at::Tensor logits =
        run_forward_step(model(), first ? static_cast<KVCache&>(*first) : *cache_, in.input_ids,
                         in.positions, slots, in.token_valid);
    return cache_->expand_prefill(logits, in.copies, in.input_ids.size(1), rows());
  }

  at::Tensor do_decode(const StepInputs& in, const at::Tensor& slots) override {
    if (in.parent_rows.defined()) cache_->reorder(in.parent_rows, length());
    return run_forward_step(model(), *cache_, in.input_ids, in.positions, slots, in.token_valid);
  }

  // Speculative decoding: the candidates in one forward, every position's logits.
  bool verifies_at_once() const override { return true; }
  at::Tensor do_verify(const StepInputs& in, const at::Tensor& slots) override {
    return run_forward_step(model(), *cache_, in.input_ids, in.positions, slots, in.token_valid,
                            /*all_positions=*/true);
  }
  void do_rewind(int64_t length) override { cache_->truncate(length); }

 private:
  bool static_cache_;
  bool share_prefill_;
  std::unique_ptr<GrowingCache> growing_;
  std::unique_ptr<StaticCache> static_;
  KVCache* cache_ = nullptr;  // the one of the two in use
};

// The model's own forward as a model step.
class EagerStep final : public ModelStep {
 public:
  explicit EagerStep(const CausalLM& model) : model_(model) {}
  std::string kind() const override { return "eager"; }
  at::Tensor prefill(const StepArgs& a) override { return decode(a); }
  at::Tensor decode(const StepArgs& a) override {
    return run_forward_step(model_, *a.cache, a.input_ids, a.positions, a.slots, a.token_valid);
  }
  bool verifies() const override { return true; }
  at::Tensor verify(const StepArgs& a) override {
    return run_forward_step(model_, *a.cache, a.input_ids, a.positions, a.slots, a.token_valid,
                            /*all_positions=*/true);
  }

 private:
  const CausalLM& model_;
};

}  // namespace

ModelStepInfo eager_step_info() {
  ModelStepInfo info;
  info.name = "eager";
  info.description = "the model's ATen ops, run directly";
  info.check_options = [](const BackendOptions&) {};
  info.create = [](const CausalLM& model, const BackendOptions&, int64_t) {
    return std::make_unique<EagerStep>(model);
  };
  return info;
}

BackendInfo eager_backend_info() {
  BackendInfo info;
  info.name = "eager";
  info.description =
      "ATen ops run directly; options cache: growing (default) | static, share_prefill (true)";
  auto static_cache = [](const BackendOptions& o) {
    return o.get_string("cache", "growing", {"growing", "static"}) == "static";
  };
  info.check_options = [static_cache](const BackendOptions& o, const c10::Device&) {
    static_cache(o);
    read_share_prefill(o);
  };
  info.create = [static_cache](std::shared_ptr<const CausalLM> model,
                               const BackendOptions& options) {
    return std::make_unique<EagerBackend>(std::move(model), static_cache(options),
                                          read_share_prefill(options));
  };
  return info;
}

}  // namespace gengraph

#include "recompute_backend.h"

#include <ATen/ATen.h>
#include <gengraph/extension.h>

namespace example {
namespace {

using gengraph::StepInputs;

class RecomputeBackend final : public gengraph::ForwardBackend {
 public:
  using ForwardBackend::ForwardBackend;
  std::string name() const override { return "recompute"; }

 protected:
  void do_prepare(int64_t, int64_t) override { ids_ = pos_ = valid_ = at::Tensor(); }

  at::Tensor do_prefill(const StepInputs& in, const at::Tensor&) override {
    ids_ = in.input_ids;
    pos_ = in.positions;
    valid_ = in.token_valid;
    return run();
  }

  at::Tensor do_decode(const StepInputs& in, const at::Tensor&) override {
    if (in.parent_rows.defined()) {  // beams: each row continues its parent's history
      ids_ = ids_.index_select(0, in.parent_rows);
      pos_ = pos_.index_select(0, in.parent_rows);
      valid_ = valid_.index_select(0, in.parent_rows);
    }
    ids_ = at::cat({ids_, in.input_ids}, 1);
    pos_ = at::cat({pos_, in.positions}, 1);
    valid_ = at::cat({valid_, in.token_valid}, 1);
    return run();
  }

 private:
  at::Tensor run() {
    // A cache thrown away after the step.
    gengraph::GrowingCache fresh(gengraph::model_shape(model()).num_layers);
    const auto slots = at::arange(ids_.size(1), ids_.options());
    return gengraph::run_forward_step(model(), fresh, ids_, pos_, slots, valid_);
  }

  at::Tensor ids_, pos_, valid_;  // [rows, length] the whole history
};

}  // namespace

void register_recompute_backend() {
  gengraph::BackendInfo info;
  info.name = "recompute";
  info.description = "example plug-in: re-runs the whole sequence every step (no KV cache)";
  info.create = [](std::shared_ptr<const gengraph::CausalLM> model,
                   const gengraph::BackendOptions&) {
    return std::make_unique<RecomputeBackend>(std::move(model));
  };
  gengraph::BackendRegistry::instance().add(std::move(info));
}

}  // namespace example

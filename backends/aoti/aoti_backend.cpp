#include "backends/aoti/aoti_backend.h"

#include <ATen/ATen.h>

#include "backends/aoti/aoti_step.h"
#include "framework/backend/options.h"
#include "framework/cache/kv_cache.h"
#include "framework/model/causal_lm.h"
#include "framework/util/error.h"

namespace gengraph {
namespace {

class AotiBackend final : public ForwardBackend {
 public:
  AotiBackend(std::shared_ptr<const CausalLM> model, const AotiStepOptions& o, bool share_prefill)
      : ForwardBackend(std::move(model)),
        step_(this->model(), o, "aoti"),
        share_prefill_(share_prefill) {}

  std::string name() const override { return "aoti"; }

  // Continuous batching: a package of the ragged form (option ragged: true) runs the scheduler's
  // ragged batches over its paged cache (backends/aoti/aoti_ragged.cpp).
  bool runs_ragged() const override { return step_.meta().form == "ragged"; }
  at::Tensor forward_ragged(const RaggedBatch& batch, PagedCache& cache) override {
    return step_.run_ragged(batch, cache);
  }

  BackendReport report() const override {
    BackendReport r = step_.report();
    r["reorder_bytes_per_step"] = cache_ ? cache_->reorder_bytes_per_step() : 0.0;
    return r;
  }

 protected:
  void do_prepare(int64_t rows, int64_t max_length) override {
    if (runs_ragged()) {
      throw Error("backend 'aoti': package '" + step_.path().string() +
                  "' holds the ragged form (option ragged: true), which runs continuous "
                  "batching's ragged batches only; generate with a package of the step form "
                  "(ragged: false)");
    }
    const auto f = at::TensorOptions().dtype(model().dtype()).device(model().device());
    reuse_or_allocate(cache_, model().cache_shape(rows, max_length), f, Reorder::kSwap);
  }

  // The package takes any row count, so the beams of one input share their prompt: it runs once
  // per input, in the cache's first rows, and its cache is copied to the rows each stands for.
  bool shares_prefill() const override { return share_prefill_; }

  at::Tensor do_prefill(const StepInputs& in, const at::Tensor& slots) override {
    if (in.copies == 1) {
      return step_.run(in.input_ids, in.positions, slots, in.token_valid, cache_->validity(),
                       cache_->keys(), cache_->values());
    }
    const StaticCache first = cache_->first_rows(in.input_ids.size(0));
    const at::Tensor logits = step_.run(in.input_ids, in.positions, slots, in.token_valid,
                                        first.validity(), first.keys(), first.values());
    return cache_->expand_prefill(logits, in.copies, in.input_ids.size(1), rows());
  }

  at::Tensor do_decode(const StepInputs& in, const at::Tensor& slots) override {
    if (in.parent_rows.defined()) cache_->reorder(in.parent_rows, length());
    return step_.run(in.input_ids, in.positions, slots, in.token_valid, cache_->validity(),
                     cache_->keys(), cache_->values());
  }

  // Speculative decoding: the same program keeps every position's logits (its `keep` input), so
  // the last token and its candidates are one forward of any length; no bucket, no second package.
  bool verifies_at_once() const override { return true; }
  at::Tensor do_verify(const StepInputs& in, const at::Tensor& slots) override {
    return step_.run(in.input_ids, in.positions, slots, in.token_valid, cache_->validity(),
                     cache_->keys(), cache_->values(), /*all_positions=*/true);
  }
  void do_rewind(int64_t length) override { cache_->truncate(length); }

 private:
  AotiStep step_;
  bool share_prefill_;
  std::unique_ptr<StaticCache> cache_;  // what the compiled step reads and writes in place
};

// Options ragged and invariant (the aoti backend's own; cuda_graph's aoti step has neither).
void read_ragged_options(const BackendOptions& o, AotiStepOptions& s) {
  s.ragged = o.get_bool("ragged", false);
  s.invariant = o.get_bool("invariant", false);
  if (s.invariant && !s.ragged) {
    throw Error("backend 'aoti': option 'invariant' applies to the ragged form; set ragged: true");
  }
}

}  // namespace

BackendInfo aoti_backend_info() {
  BackendInfo info;
  info.name = "aoti";
  info.description =
      "the step compiled ahead of time by AOTInductor (torch.export; tools/export_aoti.py) over a "
      "static cache; options package, cache_dir, freezing, max_rows, share_prefill (true), ragged "
      "(false: the ragged form for continuous batching), invariant (false)";
  info.check_options = [](const BackendOptions& o, const c10::Device&) {
    AotiStepOptions s;
    read_aoti_options(o, s);
    read_ragged_options(o, s);
    read_share_prefill(o);
    if (!s.package.empty()) {
      // The package's structure and metadata now (cheap), so that `validate` refuses a damaged
      // one; its checksums are compared when it is loaded.
      try {
        AotiMeta::read(s.package);
      } catch (const Error& e) {
        throw Error("backend 'aoti' option 'package': " + std::string(e.what()));
      }
    }
  };
  info.create = [](std::shared_ptr<const CausalLM> model, const BackendOptions& o) {
    // A quantized model (model.weights) is exported with its projections quantized as gengraph
    // quantizes them, calling gengraph's operators (CPU only: AotiStep refuses it elsewhere).
    AotiStepOptions s;
    read_aoti_options(o, s);
    read_ragged_options(o, s);
    if (s.invariant && (model->config().weights.quantized() || model->dtype() != at::kFloat ||
                        !model->device().is_cpu())) {
      throw Error(
          "backend 'aoti' option 'invariant': the invariant projections "
          "(gengraph::linear_f32) take float32 weights on CPU, but the model is " +
          std::string(c10::toString(model->dtype())) + " on " + model->device().str() +
          " with model.weights " + model->config().weights.name() +
          " (quantized ragged packages call gengraph's row-invariant kernels already)");
    }
    return std::make_unique<AotiBackend>(std::move(model), s, read_share_prefill(o));
  };
  return info;
}

}  // namespace gengraph

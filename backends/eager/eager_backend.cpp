#include "backends/eager/eager_backend.h"

#include <ATen/ATen.h>
#include <gengraph/ext/paged_cache.h>

#include <optional>
#include <string>

#include "framework/backend/model_step.h"
#include "framework/backend/options.h"
#include "framework/cache/kv_cache.h"
#include "framework/model/causal_lm.h"
#include "framework/quant/kernels.h"
#include "framework/util/error.h"

namespace gengraph {
namespace {

enum class EagerCache { kGrowing, kStatic, kPaged };

class EagerBackend final : public ForwardBackend {
 public:
  EagerBackend(std::shared_ptr<const CausalLM> model, EagerCache cache, bool share_prefill,
               int64_t block_size, int64_t ring_spare)
      : ForwardBackend(std::move(model)),
        kind_(cache),
        share_prefill_(share_prefill),
        block_size_(block_size),
        ring_spare_(ring_spare) {}

  std::string name() const override { return "eager"; }

  BackendReport report() const override {
    BackendReport r = {
        {"static_cache", kind_ == EagerCache::kGrowing ? 0.0 : 1.0},
        {"sdpa_kernel",
         rows() > 0 ? double(model().decode_attention_kernel(rows(), max_length())) : -1.0},
        {"reorder_bytes_per_step", cache_ ? cache_->reorder_bytes_per_step() : 0.0}};
    // What the cache holds (after a run: a growing cache grows), rings included.
    if (kind_ == EagerCache::kGrowing && growing_) r["kv_cache_bytes"] = double(growing_->bytes());
    if (kind_ == EagerCache::kStatic && static_) r["kv_cache_bytes"] = double(static_->bytes());
    if (kind_ != EagerCache::kPaged) {
      r["window_rings"] = window_rings_;
      r["ring_spare"] = double(ring_spare_);
    }
    if (kind_ == EagerCache::kPaged) r["paged_block_size"] = static_cast<double>(block_size_);
    return r;
  }

  // Continuous batching: the model's forward over the scheduler's paged cache.
  bool runs_ragged() const override { return true; }
  at::Tensor forward_ragged(const RaggedBatch& batch, PagedCache& cache) override {
    ForwardBatch b;
    b.input_ids = batch.input_ids.unsqueeze(0);
    b.positions = batch.positions.unsqueeze(0);
    b.logit_positions = batch.logit_rows;
    return model_forward(model(), b, cache).select(0, 0);  // [K, vocab]
  }

 protected:
  void do_prepare(int64_t rows, int64_t max_length) override {
    const auto options = at::TensorOptions().dtype(model().dtype()).device(model().device());
    switch (kind_) {
      case EagerCache::kGrowing: {
        WindowLayout windows = model().window_layout(max_length, ring_spare_);
        window_rings_ = double(windows.count());
        growing_ = std::make_unique<GrowingCache>(model().config().num_layers, max_length,
                                                  std::move(windows));
        cache_ = growing_.get();
        return;
      }
      case EagerCache::kStatic:
        cache_ = &reuse_or_allocate(static_, model().cache_shape(rows, max_length, ring_spare_),
                                    options, Reorder::kSwap);
        window_rings_ = double(static_->shape().windows.count());
        return;
      case EagerCache::kPaged: {
        const ModelShape s = model_shape(model());
        const int64_t per_row = (max_length + block_size_ - 1) / block_size_;
        const PagedLayout layout{s.num_layers, s.num_kv_heads, s.head_dim, rows * per_row,
                                 block_size_};
        if (!paged_ || paged_->layout().blocks != layout.blocks ||
            paged_->keys().scalar_type() != options.dtype().toScalarType()) {
          paged_ = std::make_unique<PagedCache>(layout, options);
        }
        paged_->set_row_blocks(per_row);
        row_room_ = per_row * block_size_;
        cache_ = paged_.get();
        return;
      }
    }
  }

  bool shares_prefill() const override { return share_prefill_; }

  at::Tensor do_prefill(const StepInputs& in, const at::Tensor& slots) override {
    if (kind_ == EagerCache::kPaged) {
      // Left padding: each row reads from its first valid slot on.
      first_ = in.token_valid.logical_not().sum(1);  // [rows]
      return paged_step(in, slots);
    }
    if (in.copies == 1) {
      return run_forward_step(model(), *cache_, in.input_ids, in.positions, slots, in.token_valid);
    }
    // The prompt once per input, then its cache copied to the input's other rows. A static cache
    // takes it in its first `inputs` rows, written in place; a growing one holds just those rows.
    const int64_t inputs = in.input_ids.size(0);
    std::optional<StaticCache> first;
    if (kind_ == EagerCache::kStatic) first.emplace(static_->first_rows(inputs));
    const at::Tensor logits =
        run_forward_step(model(), first ? static_cast<KVCache&>(*first) : *cache_, in.input_ids,
                         in.positions, slots, in.token_valid);
    return cache_->expand_prefill(logits, in.copies, in.input_ids.size(1), rows());
  }

  at::Tensor do_decode(const StepInputs& in, const at::Tensor& slots) override {
    if (in.parent_rows.defined()) {
      cache_->reorder(in.parent_rows, length());
      if (kind_ == EagerCache::kPaged) first_ = first_.index_select(0, in.parent_rows);
    }
    if (kind_ == EagerCache::kPaged) return paged_step(in, slots);
    return run_forward_step(model(), *cache_, in.input_ids, in.positions, slots, in.token_valid);
  }

  // Speculative decoding: the candidates in one forward, every position's logits.
  bool verifies_at_once() const override { return true; }
  int64_t max_verify_candidates() const override {
    return window_rings_ > 0 ? ring_spare_ : ForwardBackend::max_verify_candidates();
  }
  at::Tensor do_verify(const StepInputs& in, const at::Tensor& slots) override {
    if (kind_ == EagerCache::kPaged) return paged_step(in, slots, /*all_positions=*/true);
    return run_forward_step(model(), *cache_, in.input_ids, in.positions, slots, in.token_valid,
                            /*all_positions=*/true);
  }
  void do_rewind(int64_t length) override { cache_->truncate(length); }

 private:
  // A step over the paged cache, row r in its own blocks (r * per_row ..), with the kernels that
  // give a row the same floats whatever its batch (kernels::BatchInvariant): what a request
  // gives alone, against which the scheduler's batched runs are checked.
  at::Tensor paged_step(const StepInputs& in, const at::Tensor& slots, bool all_positions = false) {
    const int64_t rows = in.input_ids.size(0), t = in.input_ids.size(1);
    const auto l = slots.options();
    const at::Tensor row = at::arange(rows, l).unsqueeze(1).expand({rows, t});
    const at::Tensor pos = slots.unsqueeze(0).expand({rows, t});
    PagedCache::Step step;
    step.write_slots = (row * row_room_ + pos).reshape({-1});
    step.block_tables = at::arange(rows * (row_room_ / block_size_), l).view({rows, -1});
    step.seq = row.reshape({-1});
    step.last = pos.reshape({-1});
    step.first = at::minimum(first_.to(l).unsqueeze(1).expand({rows, t}), pos).reshape({-1});
    paged_->set_step(std::move(step));
    const kernels::BatchInvariant invariant;
    ForwardBatch b;
    b.input_ids = in.input_ids;
    b.positions = in.positions;
    b.slots = slots;
    b.all_positions = all_positions;
    return model_forward(model(), b, *paged_);
  }

  EagerCache kind_;
  bool share_prefill_;
  int64_t block_size_;
  int64_t ring_spare_;       // -1: sliding-window layers at the whole length
  double window_rings_ = 0;  // layers the cache holds in rings
  std::unique_ptr<GrowingCache> growing_;
  std::unique_ptr<StaticCache> static_;
  std::unique_ptr<PagedCache> paged_;
  int64_t row_room_ = 0;      // the paged cache's positions per row
  at::Tensor first_;          // the paged cache: each row's first valid slot (past its padding)
  KVCache* cache_ = nullptr;  // the one in use
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
  bool reads_window_rings() const override { return true; }
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
      "ATen ops run directly; options cache: growing (default) | static | paged (blocks of "
      "block_size positions, 16, with the batch-invariant kernels: a request's solo run for the "
      "scheduler), share_prefill (true; not with paged), window_rings (true: a model's "
      "sliding-window layers held in rings of window + ring_spare slots, 64; not with paged)";
  struct Settings {
    EagerCache cache;
    bool share_prefill;
    int64_t block_size;
    int64_t ring_spare;
  };
  auto read = [](const BackendOptions& o) {
    Settings s;
    const std::string cache = o.get_string("cache", "growing", {"growing", "static", "paged"});
    s.cache = cache == "static"  ? EagerCache::kStatic
              : cache == "paged" ? EagerCache::kPaged
                                 : EagerCache::kGrowing;
    const bool paged = s.cache == EagerCache::kPaged;
    s.share_prefill = paged ? o.get_bool("share_prefill", false) : read_share_prefill(o);
    if (paged && s.share_prefill) {
      throw Error(
          "backend 'eager': option share_prefill: true does not apply to cache: paged "
          "(each row prefills its own blocks); leave it out");
    }
    s.block_size = o.get_int("block_size", 16, 1, 4096);
    if (!paged && o.values().count("block_size")) {
      throw Error("backend 'eager': option block_size applies to cache: paged, found cache: " +
                  cache);
    }
    s.ring_spare = -1;
    if (!paged) {
      s.ring_spare = read_ring_spare(o);
    } else {
      refuse_ring_options(o, "cache: growing or static",
                          "cache: paged (the pool's blocks are shared by every layer)");
    }
    return s;
  };
  info.check_options = [read](const BackendOptions& o, const c10::Device&) { read(o); };
  info.create = [read](std::shared_ptr<const CausalLM> model, const BackendOptions& options) {
    const Settings s = read(options);
    return std::make_unique<EagerBackend>(std::move(model), s.cache, s.share_prefill, s.block_size,
                                          s.ring_spare);
  };
  return info;
}

}  // namespace gengraph

#include "backends/cuda_graph/cuda_graph_backend.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <chrono>
#include <map>
#include <sstream>

#include "backends/cuda_graph/ragged_graphs.h"
#include "framework/backend/model_step.h"
#include "framework/cache/kv_cache.h"
#include "framework/model/causal_lm.h"
#include "framework/util/clock.h"
#include "framework/util/device.h"
#include "framework/util/error.h"

namespace gengraph {
namespace {

struct Settings {
  std::vector<int64_t> buckets;
  int64_t max_length = 0;
  std::string step = "eager";  // a model step kind (framework/backend/model_step.h)
  int64_t warmup = 3;
  bool capture = true;  // false: the same static-buffer step, run eagerly (debugging; any device)
  bool share_prefill = true;  // the eager and compiled steps run a shared prompt once per input
  int64_t ring_spare = kDefaultRingSpare;  // -1: sliding-window layers at the whole length
  int64_t verify_bucket = 4;  // speculative decoding: verify graphs per multiple of this many
  RaggedSettings ragged;      // continuous batching (ragged_graphs.h)
};

std::vector<int64_t> parse_buckets(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v <= 0) {
      throw Error(
          "backend 'cuda_graph' option 'buckets': expected comma-separated positive row counts, "
          "found '" +
          text + "'");
    }
    out.push_back(v);
  }
  if (out.empty()) throw Error("backend 'cuda_graph' option 'buckets': no bucket given");
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

int64_t reserved_bytes(const c10::Device& d) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(d.index());
  return stats.reserved_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
      .current;
}

// Device memory held by the graphs' private pool: the caching allocator's segments it owns.
int64_t pool_bytes(const at::cuda::MempoolId_t& pool, const c10::Device& d) {
  int64_t total = 0;
  for (const auto& seg : c10::cuda::CUDACachingAllocator::snapshot({0, 0}, false).segments) {
    if (seg.owner_private_pool_id == pool && seg.device == d.index())
      total += static_cast<int64_t>(seg.total_size);
  }
  return total;
}

// Speculative decoding's verify step for one count of positions: its static inputs, its output
// and its graph.
struct VerifyStep {
  at::Tensor ids, positions, token_valid, slots;  // [rows, T] x3, [T]
  at::Tensor logits;                              // [rows, T, vocab]
  std::unique_ptr<at::cuda::CUDAGraph> graph;
};

// One bucket: static cache, static inputs, the captured decode step.
struct Bucket {
  int64_t rows = 0;
  std::unique_ptr<StaticCache> cache;                     // the graph reads and writes it in place
  at::Tensor ids, positions, token_valid, slot, parents;  // decode inputs [rows,1] x3, [1], [rows]
  at::Tensor logits;  // [rows, vocab] output of the captured step
  // The step without a reorder (greedy, sampling) and with one (beams): a step without beams
  // moves no cache bytes besides its own slot.
  std::unique_ptr<at::cuda::CUDAGraph> graph, graph_reorder;
  std::map<int64_t, VerifyStep> verify;  // by positions, made on first use
};

class CudaGraphBackend final : public ForwardBackend, public StaticDecode {
 public:
  CudaGraphBackend(std::shared_ptr<const CausalLM> model, Settings s, const BackendOptions& o)
      : ForwardBackend(std::move(model)), s_(std::move(s)), pool_(at::cuda::graph_pool_handle()) {
    step_ = ModelStepRegistry::instance()
                .get(s_.step, "backend 'cuda_graph' option 'step'")
                .create(this->model(), o, s_.warmup);
    if (!step_->reads_window_rings()) {
      refuse_ring_options(
          o, "step: eager",
          "step: " + s_.step + " (its graph takes every layer at the cache's whole length)");
      s_.ring_spare = -1;
    }
  }

  std::string name() const override { return "cuda_graph"; }

  BackendReport report() const override {
    BackendReport r = step_->report();
    r.merge(BackendReport{{"capture_seconds", capture_s_},
                          {"buckets", double(buckets_.size())},
                          {"graphs", double(graphs_)},
                          {"verify_graphs", double(verify_graphs_)},
                          {"graph_pool_bytes", double(pool_bytes_)},
                          {"capture_reserved_bytes", double(reserved_growth_)},
                          {"max_length", double(max_length_)},
                          {"kv_cache_bytes", double(cache_bytes())},
                          {"ring_spare", double(s_.ring_spare)},
                          {"captured", s_.capture ? 1.0 : 0.0}});
    if (ragged_) r.merge(ragged_->report());
    for (const std::string& kind : ModelStepRegistry::instance().names()) {  // step_is_trace, ...
      if (kind != "eager") r["step_is_" + kind] = kind == s_.step ? 1.0 : 0.0;
    }
    // A beam step reorders its bucket's whole cache in place; a replay moves what the captured
    // call did. 0 when no step reordered.
    double reorder_bytes = 0;
    for (const auto& [rows, b] : buckets_) {
      reorder_bytes = std::max(reorder_bytes, b.cache->reorder_bytes_per_step());
    }
    r["reorder_bytes_per_step"] = reorder_bytes;
    if (!buckets_.empty() && step_->runs_own_attention()) {  // the kernel gengraph's attention gets
      r["sdpa_kernel"] =
          double(model().decode_attention_kernel(buckets_.rbegin()->first, max_length_));
    }
    return r;
  }

  // The whole-step loop's forward: the bucket's step over its own buffers, uncaptured (the loop
  // captures it together with the decoding parts when it captures).
  StaticDecode* static_decode() override { return bucket_ ? this : nullptr; }
  void start() override {
    Bucket& b = *bucket_;
    b.slot.fill_(length());
    b.parents.copy_(at::arange(b.rows, b.parents.options()));
    b.token_valid.fill_(true);
  }
  void run(bool reorder) override { step(*bucket_, reorder); }

  // Continuous batching: with the eager step (the model's own ops over the scheduler's paged
  // cache), the step padded to a bucket of tokens and replayed as that bucket's graph
  // (ragged_graphs.h). The other step kinds run a static cache of their own.
  bool runs_ragged() const override { return s_.step == "eager"; }
  at::Tensor forward_ragged(const RaggedBatch& batch, PagedCache& cache) override {
    if (!runs_ragged()) {
      throw Error(
          "backend 'cuda_graph': a ragged batch (continuous batching) runs with step: "
          "eager only, found step: " +
          s_.step + "; leave the option 'step' out");
    }
    if (!ragged_) ragged_ = std::make_unique<RaggedGraphs>(model(), s_.ragged, pool_);
    return ragged_->forward(batch, cache);
  }

 protected:
  void do_prepare(int64_t rows, int64_t max_length) override {
    if (max_length_ == 0) max_length_ = s_.max_length > 0 ? s_.max_length : max_length;
    if (max_length > max_length_) {
      throw Error("backend 'cuda_graph': this request needs " + std::to_string(max_length) +
                  " cache positions but the static cache holds " + std::to_string(max_length_) +
                  "; raise the backend option 'max_length'");
    }
    auto it = std::lower_bound(s_.buckets.begin(), s_.buckets.end(), rows);
    if (it == s_.buckets.end()) {
      throw Error("backend 'cuda_graph': " + std::to_string(rows) +
                  " rows (batch x beams) exceed the largest bucket " +
                  std::to_string(s_.buckets.back()) + "; add a larger one to the option 'buckets'");
    }
    bucket_ = &bucket_for(*it);
    bucket_->cache->reset();
    // The static decode step's buffers: the bucket's, narrowed to the prepared rows.
    Bucket& b = *bucket_;
    ids = b.ids.narrow(0, 0, rows);
    positions = b.positions.narrow(0, 0, rows);
    slot = b.slot;
    parents = b.parents.narrow(0, 0, rows);
    logits = b.logits.narrow(0, 0, rows);
  }

  // The eager and the compiled step run a shared prompt once per input (as the eager and aoti
  // backends do); a traced prefill is traced per row count, so it gets every row.
  bool shares_prefill() const override { return s_.share_prefill && step_->shares_prefill(); }

  at::Tensor do_prefill(const StepInputs& in, const at::Tensor& slots) override {
    Bucket& b = *bucket_;
    if (in.copies > 1) {
      // The prompt in the bucket's first `inputs` rows, then their cache copied to the rows each
      // stands for; padding rows keep themselves (reset: no valid slot, as a padded prefill
      // leaves them).
      StaticCache first = b.cache->first_rows(in.input_ids.size(0));
      const at::Tensor logits = step_->prefill(
          StepArgs{in.input_ids, in.positions, slots, in.token_valid, &first, current_stream()});
      return b.cache->expand_prefill(logits, in.copies, in.input_ids.size(1), b.rows);
    }
    const int64_t rows = in.input_ids.size(0), extra = b.rows - rows;
    // Padding rows are pure padding: they attend only to themselves and are never read.
    at::Tensor ids = pad_rows(in.input_ids, extra, 0), pos = pad_rows(in.positions, extra, 0);
    at::Tensor tv = pad_rows(in.token_valid, extra, false);
    const at::Tensor logits =
        step_->prefill(StepArgs{ids, pos, slots, tv, b.cache.get(), current_stream()});
    return logits.narrow(0, 0, rows);
  }

  at::Tensor do_decode(const StepInputs& in, const at::Tensor& slots) override {
    Bucket& b = *bucket_;
    const int64_t rows = in.input_ids.size(0);
    b.ids.narrow(0, 0, rows).copy_(in.input_ids);
    b.positions.narrow(0, 0, rows).copy_(in.positions);
    b.token_valid.narrow(0, 0, rows).copy_(in.token_valid);
    b.slot.copy_(slots);
    const bool reorder = in.parent_rows.defined();
    if (reorder) b.parents.narrow(0, 0, rows).copy_(in.parent_rows);
    if (b.graph) {
      (reorder ? b.graph_reorder : b.graph)->replay();
    } else {
      step(b, reorder);
    }
    return b.logits.narrow(0, 0, rows).clone();
  }

  // Speculative decoding: with a step that verifies (eager, trace), the last token and its
  // candidates in one forward, through a verify step per count of positions, rounded up to a
  // multiple of verify_bucket (default 4; capped by the cache's room) and captured on its first
  // use as a graph of its own. The filler positions repeat the last token; their logits are
  // dropped and their slots forgotten at once. Padding rows are pure padding, as in prefill.
  // Another step verifies one (captured) decode step per position (the base class's way).
  bool verifies_at_once() const override { return step_->verifies(); }
  int64_t max_verify_candidates() const override {
    return rings() ? s_.ring_spare : ForwardBackend::max_verify_candidates();
  }
  at::Tensor do_verify(const StepInputs& in, const at::Tensor& slots) override {
    Bucket& b = *bucket_;
    const int64_t rows = in.input_ids.size(0), t = in.input_ids.size(1);
    // Rings are rewritten in place by steps of up to ring_spare + 1 positions: the cap.
    const int64_t room =
        rings() ? std::min(max_length_ - length(), s_.ring_spare + 1) : max_length_ - length();
    const int64_t positions = verify_positions(t, s_.verify_bucket, room);
    VerifyStep& v = verify_for(b, positions);
    const StepInputs padded = pad_verify_inputs(in, positions);
    v.ids.zero_();
    v.positions.zero_();
    v.token_valid.fill_(false);
    v.ids.narrow(0, 0, rows).copy_(padded.input_ids);
    v.positions.narrow(0, 0, rows).copy_(padded.positions);
    v.token_valid.narrow(0, 0, rows).copy_(padded.token_valid);
    v.slots.copy_(at::arange(length(), length() + positions, v.slots.options()));
    if (s_.capture && !v.graph) capture_verify(b, v);
    if (v.graph) {
      v.graph->replay();
    } else {
      run_verify(b, v);
    }
    if (positions > t) b.cache->truncate(length() + t);  // the filler is not history
    return v.logits.narrow(0, 0, rows).narrow(1, 0, t).clone();
  }
  void do_rewind(int64_t length) override { bucket_->cache->truncate(length); }

 private:
  static at::Tensor pad_rows(const at::Tensor& x, int64_t extra, const c10::Scalar& fill) {
    if (extra == 0) return x;
    auto sizes = x.sizes().vec();
    sizes[0] = extra;
    return at::cat({x, at::full(sizes, fill, x.options())}, 0);
  }

  // The captured step: reorder the cache by parent rows (beams only), then one decode step. The
  // reorder moves the whole cache: a graph cannot know how much of it is written.
  void step(Bucket& b, bool reorder) {
    if (reorder) b.cache->reorder(b.parents);
    b.logits.copy_(step_->decode(
        StepArgs{b.ids, b.positions, b.slot, b.token_valid, b.cache.get(), current_stream()}));
  }

  // The stream a CUDA step runs on (the capture's side stream while capturing); none on CPU.
  void* current_stream() const {
    if (!model().device().is_cuda()) return nullptr;
    return c10::cuda::getCurrentCUDAStream(model().device().index()).stream();
  }

  void run_verify(Bucket& b, VerifyStep& v) {
    v.logits.copy_(step_->verify(
        StepArgs{v.ids, v.positions, v.slots, v.token_valid, b.cache.get(), current_stream()}));
  }

  VerifyStep& verify_for(Bucket& b, int64_t positions) {
    auto found = b.verify.find(positions);
    if (found != b.verify.end()) return found->second;
    const auto f = at::TensorOptions().dtype(model().dtype()).device(model().device());
    const auto l = f.dtype(at::kLong);
    VerifyStep v;
    v.ids = at::zeros({b.rows, positions}, l);
    v.positions = at::zeros({b.rows, positions}, l);
    v.token_valid = at::zeros({b.rows, positions}, f.dtype(at::kBool));
    v.slots = at::zeros({positions}, l);
    v.logits = at::zeros({b.rows, positions, model().config().vocab_size}, f);
    return b.verify.emplace(positions, std::move(v)).first->second;
  }

  // Captured in the middle of a generation, with this verify's own inputs: the warm-up calls
  // write the slots the verify writes, with the same values, so the cache stays as it would.
  void capture_verify(Bucket& b, VerifyStep& v) {
    const auto dev = model().device();
    c10::cuda::CUDAGuard guard(dev);
    const auto t0 = Clock::now();
    const int64_t before = reserved_bytes(dev);
    auto stream = c10::cuda::getStreamFromPool(false, dev.index());
    synchronize(dev);
    {
      c10::cuda::CUDAStreamGuard sg(stream);
      for (int64_t i = 0; i < s_.warmup; ++i) run_verify(b, v);
      v.graph = std::make_unique<at::cuda::CUDAGraph>();
      v.graph->capture_begin(pool_);
      run_verify(b, v);
      v.graph->capture_end();
    }
    synchronize(dev);
    capture_s_ += since(t0);
    reserved_growth_ += reserved_bytes(dev) - before;
    pool_bytes_ = pool_bytes(pool_, dev);
    graphs_ += 1;
    ++verify_graphs_;
  }

  // Whether the prepared bucket's cache holds sliding-window layers in rings.
  bool rings() const { return bucket_ && bucket_->cache->shape().windows.count() > 0; }

  // The buckets' static caches, rings included.
  int64_t cache_bytes() const {
    int64_t n = 0;
    for (const auto& [rows, b] : buckets_) n += b.cache->bytes();
    return n;
  }

  Bucket& bucket_for(int64_t rows) {
    auto found = buckets_.find(rows);
    if (found != buckets_.end()) return found->second;
    const auto dev = model().device();
    const auto& c = model().config();
    const auto f = at::TensorOptions().dtype(model().dtype()).device(dev);
    const auto l = f.dtype(at::kLong);
    Bucket b;
    b.rows = rows;
    reuse_or_allocate(b.cache, model().cache_shape(rows, max_length_, s_.ring_spare), f);
    b.ids = at::zeros({rows, 1}, l);
    b.positions = at::zeros({rows, 1}, l);
    b.token_valid = at::ones({rows, 1}, f.dtype(at::kBool));
    b.slot = at::zeros({1}, l);
    b.parents = at::arange(rows, l);  // padding rows continue themselves
    b.logits = at::zeros({rows, c.vocab_size}, f);
    step_->prepare_rows(rows, max_length_);
    if (s_.capture) capture(b);
    return buckets_.emplace(rows, std::move(b)).first->second;
  }

  void capture(Bucket& b) {
    const auto dev = model().device();
    c10::cuda::CUDAGuard guard(dev);
    const auto t0 = Clock::now();
    const int64_t before = reserved_bytes(dev);
    // Warm up on a side stream so library handles and workspaces exist before capture.
    auto stream = c10::cuda::getStreamFromPool(false, dev.index());
    synchronize(dev);  // the buffers above were filled on the current stream
    {
      c10::cuda::CUDAStreamGuard sg(stream);
      for (const bool reorder : {false, true}) {
        for (int64_t i = 0; i < s_.warmup; ++i) step(b, reorder);
        auto& graph = reorder ? b.graph_reorder : b.graph;
        graph = std::make_unique<at::cuda::CUDAGraph>();
        graph->capture_begin(pool_);
        step(b, reorder);
        graph->capture_end();
      }
    }
    synchronize(dev);  // before the current stream uses what the side stream wrote
    b.cache->reset();  // warm-up and capture wrote slot 0 of every row
    capture_s_ += since(t0);
    reserved_growth_ += reserved_bytes(dev) - before;
    pool_bytes_ = pool_bytes(pool_, dev);
    graphs_ += 2;
  }

  Settings s_;
  std::unique_ptr<ModelStep> step_;  // one for every bucket and prompt length
  at::cuda::MempoolId_t pool_;
  std::map<int64_t, Bucket> buckets_;
  Bucket* bucket_ = nullptr;
  int64_t max_length_ = 0;
  double capture_s_ = 0;
  int64_t pool_bytes_ = 0;       // the shared graph pool, after the last capture
  int64_t reserved_growth_ = 0;  // growth of all reserved memory over warm-ups and captures
  int64_t graphs_ = 0;
  int64_t verify_graphs_ = 0;             // of graphs_, the verify steps'
  std::unique_ptr<RaggedGraphs> ragged_;  // made by the first forward_ragged
};

Settings read_settings(const BackendOptions& o) {
  Settings s;
  s.buckets = parse_buckets(o.get_string("buckets", "1,2,4,8,16,32,64"));
  s.max_length = o.get_int("max_length", 0, 0, 1 << 20);
  const ModelStepRegistry& steps = ModelStepRegistry::instance();
  s.step = o.get_string("step", "eager", steps.names());
  steps.get(s.step, "backend 'cuda_graph' option 'step'").check_options(o);
  // Options another step kind reads: say which, rather than "unknown option".
  for (const auto& [key, value] : o.values()) {
    const std::string owner = steps.owner_of(key);
    if (!owner.empty() && owner != s.step) {
      throw Error("backend 'cuda_graph': option '" + key + "' applies to the " + owner +
                  " step; set step: " + owner);
    }
  }
  s.warmup = o.get_int("warmup", 3, 1, 100);
  s.capture = o.get_bool("capture", true);
  s.share_prefill = read_share_prefill(o);
  s.verify_bucket = o.get_int("verify_bucket", 4, 1, 1024);
  s.ring_spare = read_ring_spare(o);
  s.ragged = read_ragged_settings(o);
  s.ragged.warmup = s.warmup;
  s.ragged.capture = s.capture;
  return s;
}

}  // namespace

BackendInfo cuda_graph_backend_info() {
  BackendInfo info;
  info.name = "cuda_graph";
  info.description =
      "decode step (beam reorder included) captured as CUDA graphs per batch bucket over a static "
      "cache; "
      "options buckets, max_length, step (a model step: eager|trace|aoti or a registered one, "
      "with its own options: freeze and fuser for trace, package, cache_dir, freezing and "
      "max_rows for aoti), "
      "warmup, capture (true|false: false runs the same "
      "static-buffer step uncaptured, on any device), share_prefill (true: the eager and aoti "
      "steps run the prompt of an input's beams once), verify_bucket (speculative decoding: "
      "verify steps per multiple of this many positions, each captured), ragged_max_tokens (256: "
      "continuous batching's steps padded to a power of two of tokens up to this many, each "
      "captured; larger ones run uncaptured), ragged_max_blocks (0: the model's max_positions; "
      "the static block table's width in blocks), window_rings and ring_spare (as eager's, "
      "step: eager)";
  info.unavailable_reason = [](const BackendOptions& o) -> std::string {
    if (cuda_available() || !o.get_bool("capture", true)) return "";
    return "capture needs a CUDA device, and none is visible here (capture: false runs the step "
           "uncaptured)";
  };
  // Capture needs the model on CUDA (whether this machine has one is unavailable_reason's concern).
  auto settings_for = [](const BackendOptions& o, const c10::Device& device) {
    Settings s = read_settings(o);
    if (s.capture && !device.is_cuda()) {
      throw Error(
          "backend 'cuda_graph' needs the model on a CUDA device; set model.device: cuda (found " +
          device.str() + "), or capture: false to run its static-buffer step uncaptured");
    }
    return s;
  };
  info.check_options = [settings_for](const BackendOptions& o, const c10::Device& device) {
    settings_for(o, device);
  };
  info.create = [settings_for](std::shared_ptr<const CausalLM> model, const BackendOptions& o) {
    Settings s = settings_for(o, model->device());
    return std::make_unique<CudaGraphBackend>(std::move(model), std::move(s), o);
  };
  return info;
}

}  // namespace gengraph

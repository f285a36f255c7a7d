#include "backends/cuda_graph/ragged_graphs.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <string>
#include <utility>

#include "framework/model/causal_lm.h"
#include "framework/util/clock.h"
#include "framework/util/device.h"
#include "framework/util/error.h"

namespace gengraph {
namespace {

// The rows of the static token inputs.
enum Row : int64_t { kIds, kPositions, kSlots, kSeq, kFirst, kLast, kRows };

int64_t bucket_of(int64_t n) {
  int64_t t = 1;
  while (t < n) t *= 2;
  return t;
}

// dst [r, T] <- src [r, n] (n <= T), its last column repeated over dst's last T - n.
void pad_into(const at::Tensor& dst, const at::Tensor& src) {
  const int64_t n = src.size(1), t = dst.size(1);
  dst.narrow(1, 0, n).copy_(src);
  if (t > n) dst.narrow(1, n, t - n).copy_(src.narrow(1, n - 1, 1).expand({src.size(0), t - n}));
}

// Sets a step on the cache and puts back the one it found on the way out, thrown or not.
class StepScope {
 public:
  StepScope(PagedCache& cache, PagedCache::Step step) : cache_(cache), saved_(cache.step()) {
    cache_.set_step(std::move(step));
  }
  ~StepScope() {
    if (saved_.write_slots.defined()) cache_.set_step(std::move(saved_));
  }
  StepScope(const StepScope&) = delete;
  StepScope& operator=(const StepScope&) = delete;

 private:
  PagedCache& cache_;
  PagedCache::Step saved_;
};

}  // namespace

RaggedSettings read_ragged_settings(const BackendOptions& o) {
  RaggedSettings s;
  s.max_tokens = o.get_int("ragged_max_tokens", 256, 1, 1 << 16);
  if ((s.max_tokens & (s.max_tokens - 1)) != 0) {
    throw Error(
        "backend 'cuda_graph' option 'ragged_max_tokens': expected a power of two (the largest "
        "bucket of tokens a ragged step is padded to and captured at), found " +
        std::to_string(s.max_tokens));
  }
  s.max_blocks = o.get_int("ragged_max_blocks", 0, 0, 1 << 20);
  return s;
}

RaggedGraphs::RaggedGraphs(const CausalLM& model, RaggedSettings settings,
                           at::cuda::MempoolId_t pool)
    : model_(model), s_(settings), pool_(pool) {}

RaggedGraphs::~RaggedGraphs() = default;

BackendReport RaggedGraphs::report() const {
  return {{"ragged_graphs", double(graphs_)},
          {"ragged_capture_seconds", capture_s_},
          {"ragged_replays", double(replays_)},
          {"ragged_padded_tokens", double(padded_)},
          {"ragged_uncaptured_steps", double(uncaptured_)},
          {"ragged_recaptures", double(recaptures_)},
          {"ragged_max_tokens", double(s_.max_tokens)},
          {"ragged_max_blocks", double(width_)}};
}

// The graphs read and write the pool where it was when they were captured: another pool (a new
// PagedCache, or one of another layout) drops them, and the static buffers are made again for its
// table width.
void RaggedGraphs::bind(const PagedCache& cache) {
  const PagedLayout& l = cache.layout();
  if (inputs_.defined() && cache.keys().data_ptr() == keys_ &&
      cache.values().data_ptr() == values_ && l.block_size == block_size_ && l.blocks == blocks_) {
    return;
  }
  if (!buckets_.empty()) ++recaptures_;
  buckets_.clear();
  keys_ = cache.keys().data_ptr();
  values_ = cache.values().data_ptr();
  block_size_ = l.block_size;
  blocks_ = l.blocks;
  const int64_t max_positions = model_shape(model_).max_positions;
  width_ = s_.max_blocks;
  if (width_ == 0) {
    width_ = max_positions > 0
                 ? std::min(l.blocks, (max_positions + l.block_size - 1) / l.block_size)
                 : l.blocks;
  }
  const auto opts = at::TensorOptions().dtype(at::kLong).device(cache.keys().device());
  inputs_ = at::zeros({kRows, s_.max_tokens}, opts);
  logit_rows_ = at::zeros({s_.max_tokens}, opts);
  table_ = at::zeros({s_.max_tokens, width_}, opts);
}

at::Tensor RaggedGraphs::forward(const RaggedBatch& batch, PagedCache& cache) {
  bind(cache);
  const PagedCache::Step& step = cache.step();
  const int64_t n = batch.input_ids.numel(), k = batch.logit_rows.numel();
  const int64_t tokens = bucket_of(n);
  // Past the largest bucket, or a table wider than the static one (or with more sequences than
  // the bucket has rows): the model's forward over the scheduler's own tensors.
  if (n == 0 || n > s_.max_tokens || step.block_tables.size(1) > width_ ||
      step.block_tables.size(0) > tokens) {
    ++uncaptured_;
    return direct(batch, cache);
  }
  fill(batch, step, tokens);
  padded_ += tokens - n;
  if (!s_.capture) return run_static(tokens, cache).narrow(0, 0, k);
  Bucket& b = buckets_[tokens];
  if (!b.graph) capture(b, tokens, cache);
  b.graph->replay();
  ++replays_;
  // The graph's output is overwritten by its next replay.
  return b.logits.narrow(0, 0, k).clone();
}

// The step's inputs into the static buffers, padded to `tokens` with copies of the last token,
// the logit rows with copies of the last one, and its block table into the static table's top
// left corner (entries outside a query's blocks are never read, whatever they hold).
void RaggedGraphs::fill(const RaggedBatch& batch, const PagedCache::Step& step, int64_t tokens) {
  const at::Tensor real = at::stack({batch.input_ids, batch.positions, step.write_slots, step.seq,
                                     step.first, step.last})
                              .to(inputs_.options());  // [kRows, n]
  pad_into(inputs_.narrow(1, 0, tokens), real);
  const at::Tensor rows = logit_rows_.narrow(0, 0, tokens);
  if (batch.logit_rows.numel() == 0) {
    rows.zero_();  // no logits come back; token 0's are computed and dropped
  } else {
    pad_into(rows.unsqueeze(0), batch.logit_rows.to(rows.options()).unsqueeze(0));
  }
  const at::Tensor& t = step.block_tables;
  table_.narrow(0, 0, t.size(0)).narrow(1, 0, t.size(1)).copy_(t);
}

// The model's forward over the static buffers of a bucket: what a graph captures and replays.
at::Tensor RaggedGraphs::run_static(int64_t tokens, PagedCache& cache) const {
  const auto row = [&](Row r) { return inputs_.select(0, r).narrow(0, 0, tokens); };
  PagedCache::Step st;
  st.write_slots = row(kSlots);
  st.block_tables = table_.narrow(0, 0, tokens);
  st.seq = row(kSeq);
  st.first = row(kFirst);
  st.last = row(kLast);
  const StepScope scope(cache, std::move(st));
  ForwardBatch b;
  b.input_ids = row(kIds).unsqueeze(0);
  b.positions = row(kPositions).unsqueeze(0);
  b.logit_positions = logit_rows_.narrow(0, 0, tokens);
  return model_forward(model_, b, cache).select(0, 0);  // [tokens, vocab]
}

// Captured with this step's own inputs in the buffers: the warm-up runs write the step's slots
// with the values the replay writes again, so the cache ends as one forward leaves it.
void RaggedGraphs::capture(Bucket& b, int64_t tokens, PagedCache& cache) {
  const c10::Device dev = cache.keys().device();
  c10::cuda::CUDAGuard guard(dev);
  const auto t0 = Clock::now();
  // Warm up and capture on a side stream (library handles and workspaces exist before capture);
  // what the current stream wrote into the buffers is complete before, and the other way round.
  auto stream = c10::cuda::getStreamFromPool(false, dev.index());
  synchronize(dev);
  {
    c10::cuda::CUDAStreamGuard sg(stream);
    for (int64_t i = 0; i < s_.warmup; ++i) run_static(tokens, cache);
    auto graph = std::make_unique<at::cuda::CUDAGraph>();
    graph->capture_begin(pool_);
    at::Tensor logits = run_static(tokens, cache);
    graph->capture_end();
    b.graph = std::move(graph);  // only a complete capture is kept
    b.logits = std::move(logits);
  }
  synchronize(dev);
  capture_s_ += since(t0);
  ++graphs_;
}

at::Tensor RaggedGraphs::direct(const RaggedBatch& batch, PagedCache& cache) const {
  ForwardBatch b;
  b.input_ids = batch.input_ids.unsqueeze(0);
  b.positions = batch.positions.unsqueeze(0);
  b.logit_positions = batch.logit_rows;
  return model_forward(model_, b, cache).select(0, 0);  // [K, vocab]
}

}  // namespace gengraph

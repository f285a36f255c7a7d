// cuda_graph's continuous-batching step (ForwardBackend::forward_ragged, docs/serving.md): a
// ragged batch padded to a bucket of tokens (powers of two up to ragged_max_tokens) and run as a
// CUDA graph captured once per bucket over static input buffers, the block table among them (a
// fixed width of ragged_max_blocks), as vLLM captures its decode steps. Larger steps, and steps
// whose block table is wider, run uncaptured through the model directly.
//
// Padding tokens copy the step's last real token (id, position, write slot, sequence, first,
// last): they compute and write the same key and value to the same slot, so the cache holds what
// the unpadded step would leave. Padding logit rows repeat the last real one; the result is cut to
// the real rows. A graph holds the addresses of the PagedCache's pool, so every graph is dropped
// (and captured again on use) when the step's cache is another pool.
#pragma once

#include <ATen/Tensor.h>
#include <ATen/cuda/CUDAGraph.h>
#include <gengraph/ext/backend.h>
#include <gengraph/ext/paged_cache.h>

#include <cstdint>
#include <map>
#include <memory>

namespace gengraph {

class CausalLM;

struct RaggedSettings {
  int64_t max_tokens = 256;  // ragged_max_tokens: the largest bucket, a power of two
  int64_t max_blocks = 0;    // ragged_max_blocks: the static table's width; 0 = max_positions /
                             // block_size rounded up (at most the pool's blocks)
  int64_t warmup = 3;        // uncaptured runs on the capture stream before capturing
  bool capture = true;       // false: the same padded static-buffer step, run uncaptured
};

// Reads ragged_max_tokens and ragged_max_blocks (warmup and capture are the backend's options),
// throwing an Error that names the option for a bad value.
RaggedSettings read_ragged_settings(const BackendOptions& options);

class RaggedGraphs {
 public:
  // `pool`: the graph memory pool the backend's other graphs share.
  RaggedGraphs(const CausalLM& model, RaggedSettings settings, at::cuda::MempoolId_t pool);
  ~RaggedGraphs();
  RaggedGraphs(const RaggedGraphs&) = delete;
  RaggedGraphs& operator=(const RaggedGraphs&) = delete;

  // forward_ragged: the logits of batch.logit_rows, [K, vocab], for the step `cache` holds.
  at::Tensor forward(const RaggedBatch& batch, PagedCache& cache);
  // ragged_graphs, ragged_capture_seconds, ragged_replays, ragged_padded_tokens,
  // ragged_uncaptured_steps, ragged_recaptures, ragged_max_tokens, ragged_max_blocks.
  BackendReport report() const;

 private:
  struct Bucket {
    std::unique_ptr<at::cuda::CUDAGraph> graph;
    at::Tensor logits;  // the captured forward's output, [tokens, vocab]
  };
  void bind(const PagedCache& cache);
  void fill(const RaggedBatch& batch, const PagedCache::Step& step, int64_t tokens);
  at::Tensor run_static(int64_t tokens, PagedCache& cache) const;
  void capture(Bucket& b, int64_t tokens, PagedCache& cache);
  at::Tensor direct(const RaggedBatch& batch, PagedCache& cache) const;

  const CausalLM& model_;
  RaggedSettings s_;
  at::cuda::MempoolId_t pool_;
  // What the graphs were captured over: the pool's storage and layout.
  const void* keys_ = nullptr;
  const void* values_ = nullptr;
  int64_t block_size_ = 0, blocks_ = 0;
  int64_t width_ = 0;  // the static block table's width
  // Static inputs: ids, positions, write_slots, seq, first, last as the rows of [6, max_tokens];
  // logit rows [max_tokens]; the block table [max_tokens, width] (a step has at most one sequence
  // per token). A bucket of T tokens reads their first T entries (rows).
  at::Tensor inputs_, logit_rows_, table_;
  std::map<int64_t, Bucket> buckets_;  // by tokens
  double capture_s_ = 0;
  int64_t graphs_ = 0, replays_ = 0, padded_ = 0, uncaptured_ = 0, recaptures_ = 0;
};

}  // namespace gengraph

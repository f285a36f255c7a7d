// The scheduler's core (docs/serving.md): requests, the running batch, the KV blocks, one forward
// step at a time. Single-threaded: gengraph::Scheduler (engine/scheduler.cpp) drives it from its
// own thread; tests drive step() directly, so that arrivals can be placed at chosen steps.
//
// A request is its tokens (prompt, then each token chosen) and how many of them the cache holds
// (`computed`). A step gives each running request some of its remaining positions, within the
// token budget: a decode step's one token, a prompt's chunk, or, after preemption, its whole
// history again, all alike; the logits of a request's last position come back and its own
// pipeline (processors, stopping criteria, strategy, from its own plan) chooses the next token on
// its own [1, vocab] row, exactly as the decoding loop does for one prompt.
#pragma once

#include <ATen/core/Generator.h>
#include <gengraph/ext/paged_cache.h>
#include <gengraph/ext/scheduling.h>
#include <gengraph/generation.h>
#include <gengraph/stream.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "framework/backend/forward_backend.h"
#include "framework/cache/block_pool.h"
#include "framework/decoding/plan.h"
#include "framework/util/clock.h"

namespace gengraph {

struct CoreOptions {
  std::string policy = "fcfs";
  int64_t block_size = 16;
  int64_t kv_blocks = 64;
  int64_t max_step_tokens = 256;
  int64_t prefill_chunk = 256;
  int64_t max_running = 64;
  bool prefix_sharing = true;
  bool batch_invariant = true;
};

// What a request ended with (gengraph::RequestResult's fields, filled by the core).
struct CoreResult {
  int64_t id = 0;
  Sequence sequence;
  std::string finish, error;
  int64_t prompt_length = 0;
  double queue_s = 0, time_to_first_token_s = 0, total_s = 0;
  int64_t preemptions = 0, reused_tokens = 0;
};

// A request planned and ready to queue (make_request).
struct PlannedRequest {
  std::vector<int64_t> prompt;
  GenerationPlan plan;
  at::Generator generator;  // seeded with the request's seed
  int64_t priority = 0;
  TokenStream stream;
  Clock::time_point submitted = Clock::now();
};

class BatchScheduler {
 public:
  // `backend` must run ragged batches (ForwardBackend::runs_ragged); the pool is allocated here.
  BatchScheduler(ForwardBackend& backend, const CoreOptions& options);
  ~BatchScheduler();

  // Plans one request as Engine::plan does (resolve, check, build its pipeline) and checks what a
  // batched run needs: one sequence, a streaming strategy, no candidates, room in the pool.
  // Throws Error naming the key or the numbers.
  PlannedRequest make_request(std::vector<int64_t> prompt, const nlohmann::json& settings,
                              const nlohmann::json& generation_defaults, uint64_t seed,
                              int64_t priority, TokenStream stream) const;
  // Queues a planned request; returns its id.
  int64_t add(PlannedRequest request);
  // Marks a request to stop at the next step boundary; false when unknown or finished.
  bool cancel(int64_t id);

  // One step: admit, lay out, forward, choose. Returns the requests that finished in it.
  std::vector<CoreResult> step();
  // Ends every request with finish "failed" and `error` (a forward that threw), blocks freed.
  std::vector<CoreResult> fail_all(const std::string& error);
  bool idle() const { return waiting_.empty() && running_.empty(); }
  int64_t waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t running() const { return static_cast<int64_t>(running_.size()); }

  const BlockPool& pool() const { return pool_; }
  const PagedCache& cache() const { return *cache_; }
  nlohmann::json stats() const;

 private:
  struct Live;
  RequestView view(const Live& r) const;
  bool goes_before(const RequestView& a, const RequestView& b) const;
  bool goes_before(const Live& a, const Live& b) const;
  // Indices of `requests` in the policy's order (with decodes_first, those with one position left
  // ahead of the rest), ties in submission order.
  std::vector<size_t> policy_order(const std::vector<Live*>& requests, bool decodes_first) const;
  void admit();
  bool take_prefix(Live& r);
  bool ensure_blocks(Live& r, int64_t upto);
  void preempt(Live& r);
  void drop_running(const std::function<bool(const Live&)>& gone);
  void release(Live& r);
  CoreResult finish(Live& r, const std::string& reason, const std::string& error = "");
  void decide(Live& r, const at::Tensor& logits, std::vector<CoreResult>& done);

  ForwardBackend& backend_;
  CoreOptions options_;
  std::unique_ptr<SchedulingPolicy> policy_;
  BlockPool pool_;
  std::unique_ptr<PagedCache> cache_;
  int64_t next_id_ = 0;
  std::deque<std::unique_ptr<Live>> waiting_;
  std::vector<std::unique_ptr<Live>> running_;
  // Counters.
  int64_t steps_ = 0, tokens_ = 0, decode_tokens_ = 0, prefill_tokens_ = 0, finished_ = 0;
  int64_t preemptions_ = 0, peak_in_use_ = 0, cow_copies_ = 0;
};

}  // namespace gengraph

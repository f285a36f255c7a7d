// Many requests at once, a public header (docs/serving.md): a Scheduler runs requests submitted
// from any thread through one model with continuous batching. Between forward steps it admits
// waiting requests into the running batch (a policy by name, within a token budget per step and
// the KV blocks of one pool), prefills long prompts in chunks beside the running decodes, lets a
// finished request leave at once, shares the KV blocks of common prompt prefixes, and preempts
// (by recompute) when blocks run out.
//
//   gengraph::Model model("smollm2-135m");
//   gengraph::Scheduler scheduler(model);
//   gengraph::Request r;
//   r.prompt = {1, 2, 3};
//   r.settings = {{"max_new_tokens", 16}, {"do_sample", true}};
//   r.seed = 7;
//   auto handle = scheduler.submit(r);
//   gengraph::RequestResult out = scheduler.wait(handle);
//
// Batch invariance: a request gives exactly (tokens and log-probs, to the bit) what it gives alone
// through an Engine with backend eager, `cache: paged`, after manual_seed(seed), whatever shares
// its steps, wherever it sits in the batch and however its prompt is chunked
// (SchedulerOptions::batch_invariant, on by default; docs/serving.md#batch-invariance).
#pragma once

#include <gengraph/error.h>
#include <gengraph/generation.h>
#include <gengraph/gengraph.h>
#include <gengraph/stream.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace gengraph {

struct SchedulerOptions {
  // The order of admission and preemption, by name (PolicyRegistry, <gengraph/ext/scheduling.h>):
  // fcfs, shortest_prompt_first, priority, longest_prefix_first.
  std::string policy = "fcfs";
  int64_t block_size = 16;  // positions per KV block
  // The pool: kv_blocks blocks, or (kv_blocks 0) as many as kv_memory_mb holds.
  int64_t kv_blocks = 0;
  double kv_memory_mb = 256;
  int64_t max_step_tokens = 256;  // tokens one forward step runs, decodes and prefill chunks
  int64_t prefill_chunk = 256;    // prompt tokens one request prefills per step at most
  int64_t max_running = 64;       // requests in the running batch at most
  int64_t max_queue = 1024;       // requests waiting at most; submit() refuses past it
  bool prefix_sharing = true;     // share the KV blocks of common prompt prefixes
  // The batch-invariant kernels (a request's floats do not depend on its batch); false takes the
  // fastest kernels for many rows instead (docs/serving.md#batch-invariance).
  bool batch_invariant = true;
};

struct Request {
  std::vector<int64_t> prompt;  // token ids
  // Generation keys as for Engine::generate (max_new_tokens, do_sample, temperature, stop
  // strings, output_scores, ...), over the model's defaults. Greedy search and sampling, with
  // every processor and stopping criterion; beam strategies and speculative decoding are refused
  // by name.
  nlohmann::json settings = nlohmann::json::object();
  uint64_t seed = 0;     // this request's sampling generator, as Engine::manual_seed(seed)
  int64_t priority = 0;  // the `priority` policy admits higher first
  // Each chosen token, on the scheduler's thread, as it is chosen; returning false stops the
  // request (its result holds the tokens so far, finish "stopped").
  TokenStream stream;
};

struct RequestResult;
// Called once, on the scheduler's thread, when a request has finished (any finish), with the
// result wait() then returns, before wait() returns (so a waiter may free what it uses): a server
// wakes whoever serves the request without a thread blocked in wait() per request. It must be
// quick and must not throw (an exception is dropped).
using FinishCallback = std::function<void(const RequestResult&)>;

// submit() past max_queue: the queue is full now; retrying later may succeed (an HTTP server's
// 429).
struct QueueFull : Error {
  using Error::Error;
};

struct RequestResult {
  int64_t id = 0;
  Sequence sequence;  // tokens (and token_scores with output_scores)
  // "stop" (EOS, a stop string, a stopping criterion), "length" (max_new_tokens), "cancelled",
  // "stopped" (its stream returned false), "failed" (error says why).
  std::string finish;
  std::string error;
  int64_t prompt_length = 0;
  // Seconds from submit(): admitted first, first token chosen, finished.
  double queue_s = 0, time_to_first_token_s = 0, total_s = 0;
  int64_t preemptions = 0;    // times its blocks were taken back and its positions recomputed
  int64_t reused_tokens = 0;  // prompt positions taken from the prefix index instead of computed
};

class Scheduler;

// A submitted request: wait for it, cancel it, from any thread. Copies name the same request.
class RequestHandle {
 public:
  int64_t id() const;

 private:
  friend class Scheduler;
  struct State;
  std::shared_ptr<State> state_;
};

// Thread-safe: submit, wait, cancel and stats may be called from any thread; the requests run on
// the scheduler's own thread, which also calls their streams. Destroying the scheduler cancels
// what has not finished and waits for its thread.
class Scheduler {
 public:
  // `run`: the backend (one that runs ragged batches: eager; cuda_graph with step: eager) and
  // its options.
  explicit Scheduler(const Model& model, const RunOptions& run = {},
                     const SchedulerOptions& options = {});
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Plans the request (its settings resolved and checked, as Engine::plan does) and queues it.
  // Throws gengraph::Error, naming the key or the numbers, for a request that cannot run: settings
  // a batched run cannot honour, a prompt plus max_new_tokens larger than the pool, a full queue.
  // A full queue throws QueueFull. `on_finish`, when given, is called when the request finishes.
  RequestHandle submit(Request request, FinishCallback on_finish = {});
  // Blocks until the request has finished (any finish), then returns its result (again on
  // later calls).
  RequestResult wait(const RequestHandle& handle);
  // wait() for at most `seconds`: the result, or nothing when the request is still running.
  std::optional<RequestResult> wait_for(const RequestHandle& handle, double seconds);
  // Stops the request at the next step boundary and frees its blocks; false when it had
  // finished already.
  bool cancel(const RequestHandle& handle);
  // Blocks until every request submitted so far has finished.
  void drain();
  // The counters: steps, tokens, running, waiting, finished, blocks (total, in_use, peak_in_use,
  // cached), prefix_hits, reused_tokens, preemptions. A snapshot taken after each step and before
  // a step's first streamed token, so a stream's reader sees its own request counted.
  nlohmann::json stats() const;
  const SchedulerOptions& options() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gengraph

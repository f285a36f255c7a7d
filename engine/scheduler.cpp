// gengraph::Scheduler (include/gengraph/serving.h): the thread-safe facade over the scheduler's
// core (serving/batch_scheduler.h), which runs on a thread of its own.
#include <ATen/ATen.h>
#include <gengraph/serving.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "backends/register_builtin.h"
#include "engine/model_impl.h"
#include "framework/backend/backend_registry.h"
#include "framework/model/causal_lm.h"
#include "framework/model/memory.h"
#include "framework/quant/kernels.h"
#include "framework/util/error.h"
#include "serving/batch_scheduler.h"

namespace gengraph {

struct RequestHandle::State {
  int64_t id = 0;
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  RequestResult result;
  FinishCallback on_finish;
};

int64_t RequestHandle::id() const {
  if (!state_) throw Error("RequestHandle: empty (not returned by Scheduler::submit)");
  return state_->id;
}

namespace {

RequestResult to_result(CoreResult c) {
  RequestResult r;
  r.id = c.id;
  r.sequence = std::move(c.sequence);
  r.finish = std::move(c.finish);
  r.error = std::move(c.error);
  r.prompt_length = c.prompt_length;
  r.queue_s = c.queue_s;
  r.time_to_first_token_s = c.time_to_first_token_s;
  r.total_s = c.total_s;
  r.preemptions = c.preemptions;
  r.reused_tokens = c.reused_tokens;
  return r;
}

// The pool's blocks: kv_blocks, or as many as kv_memory_mb holds for this model.
int64_t pool_blocks(const SchedulerOptions& o, const CausalLM& model) {
  if (o.block_size < 1) {
    throw Error("scheduler option block_size: expected an integer >= 1, found " +
                std::to_string(o.block_size));
  }
  if (o.kv_blocks > 0) return o.kv_blocks;
  if (o.kv_blocks < 0 || !(o.kv_memory_mb > 0)) {
    throw Error(
        "scheduler options kv_blocks / kv_memory_mb: expected kv_blocks >= 1, or 0 with "
        "kv_memory_mb > 0; found " +
        std::to_string(o.kv_blocks) + " and " + std::to_string(o.kv_memory_mb));
  }
  const double per_block = kv_cache_bytes(model.config(), model.dtype(), 1, o.block_size);
  const auto blocks = static_cast<int64_t>(o.kv_memory_mb * 1024.0 * 1024.0 / per_block);
  if (blocks < 1) {
    throw Error("scheduler option kv_memory_mb " + std::to_string(o.kv_memory_mb) +
                ": less than one block of " + std::to_string(o.block_size) + " positions (" +
                std::to_string(per_block / (1024.0 * 1024.0)) + " MB)");
  }
  return blocks;
}

}  // namespace

struct Scheduler::Impl {
  std::shared_ptr<const Model::Impl> model;
  std::unique_ptr<ForwardBackend> backend;
  SchedulerOptions options;
  std::unique_ptr<BatchScheduler> core;

  mutable std::mutex m;
  std::condition_variable wake;     // work arrived, a cancel, or stopping
  std::condition_variable drained;  // nothing outstanding
  std::deque<std::pair<PlannedRequest, std::shared_ptr<RequestHandle::State>>> incoming;
  std::vector<int64_t> cancels;
  int64_t next_id = 0, outstanding = 0, waiting = 0;
  bool stopping = false;
  nlohmann::json stats;
  // Scheduler thread only: whether `stats` was taken during the step under way. Streams run inside
  // a step, so the snapshot is refreshed before a step's first streamed token: a client that holds
  // a token then reads counters that include its request (its blocks in use, running).
  bool stats_fresh = false;
  std::thread thread;

  void loop();
  void refresh_stats();
  void deliver(std::vector<CoreResult> done,
               std::map<int64_t, std::shared_ptr<RequestHandle::State>>& live);
};

void Scheduler::Impl::deliver(std::vector<CoreResult> done,
                              std::map<int64_t, std::shared_ptr<RequestHandle::State>>& live) {
  for (CoreResult& c : done) {
    auto it = live.find(c.id);
    if (it == live.end()) continue;
    const std::shared_ptr<RequestHandle::State> s = it->second;
    live.erase(it);
    RequestResult result = to_result(std::move(c));
    // The finish callback before wait() can return: whoever waits may free what it uses.
    if (s->on_finish) {
      try {
        s->on_finish(result);
      } catch (...) {  // documented: dropped, so one caller's bug cannot stop the others
      }
      s->on_finish = nullptr;
    }
    {
      const std::lock_guard<std::mutex> lock(s->m);
      s->result = std::move(result);
      s->done = true;
    }
    s->cv.notify_all();
    const std::lock_guard<std::mutex> lock(m);
    if (--outstanding == 0) drained.notify_all();
  }
}

void Scheduler::Impl::refresh_stats() {
  if (stats_fresh) return;
  nlohmann::json now = core->stats();
  const std::lock_guard<std::mutex> lock(m);
  stats = std::move(now);
  stats_fresh = true;
}

void Scheduler::Impl::loop() {
  std::map<int64_t, std::shared_ptr<RequestHandle::State>> live;
  for (;;) {
    bool stop = false;
    {
      std::unique_lock<std::mutex> lock(m);
      wake.wait(lock,
                [&] { return stopping || !incoming.empty() || !cancels.empty() || !core->idle(); });
      stop = stopping;
      while (!incoming.empty()) {
        auto [request, state] = std::move(incoming.front());
        incoming.pop_front();
        const int64_t id = core->add(std::move(request));
        live[id] = std::move(state);
      }
      for (int64_t id : cancels) core->cancel(id);
      cancels.clear();
      if (stop) {
        for (const auto& [id, state] : live) core->cancel(id);
      }
    }
    std::vector<CoreResult> done;
    stats_fresh = false;
    try {
      done = core->step();
    } catch (const std::exception& e) {
      done = core->fail_all(std::string("the scheduler's step failed: ") + e.what());
    }
    bool finished = false;
    {
      // The counters before the results: whoever a result wakes reads them as of its step.
      const std::lock_guard<std::mutex> lock(m);
      stats = core->stats();
      waiting = core->waiting();
      finished = stop && core->idle() && incoming.empty();
    }
    deliver(std::move(done), live);
    if (finished) return;
  }
}

Scheduler::Scheduler(const Model& model, const RunOptions& run, const SchedulerOptions& options)
    : impl_(std::make_unique<Impl>()) {
  register_builtin_backends();
  impl_->model = model.impl_;
  impl_->options = options;
  const auto& causal = impl_->model->loaded.model;
  BackendRegistry::instance().validate(
      run.backend, BackendOptions(run.backend, run.backend_options), causal->device());
  if (run.whole_step != WholeStep::kOff) {
    throw Error(
        "scheduler: RunOptions::whole_step applies to Engine::generate's loop; the "
        "scheduler runs its own steps");
  }
  if (options.max_queue < 1) {
    throw Error("scheduler option max_queue: expected an integer >= 1, found " +
                std::to_string(options.max_queue));
  }
  impl_->backend = BackendRegistry::instance().create(
      run.backend, causal, BackendOptions(run.backend, run.backend_options));
  CoreOptions core;
  core.policy = options.policy;
  core.block_size = options.block_size;
  core.kv_blocks = pool_blocks(options, *causal);
  core.max_step_tokens = options.max_step_tokens;
  core.prefill_chunk = options.prefill_chunk;
  core.max_running = options.max_running;
  core.prefix_sharing = options.prefix_sharing;
  core.batch_invariant = options.batch_invariant;
  impl_->core = std::make_unique<BatchScheduler>(*impl_->backend, core);
  impl_->stats = impl_->core->stats();
  // The steps run on the scheduler's thread, with OpenMP workers of its own: this thread's (which
  // loaded the model) would otherwise stay alive beside them (kernels.h).
  kernels::release_openmp_threads();
  impl_->thread = std::thread([impl = impl_.get()] { impl->loop(); });
}

Scheduler::~Scheduler() {
  {
    const std::lock_guard<std::mutex> lock(impl_->m);
    impl_->stopping = true;
  }
  impl_->wake.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
}

RequestHandle Scheduler::submit(Request request, FinishCallback on_finish) {
  const LoadedModel& loaded = impl_->model->loaded;
  if (request.stream) {
    request.stream = [impl = impl_.get(),
                      user = std::move(request.stream)](const StreamedToken& t) {
      impl->refresh_stats();
      return user(t);
    };
  }
  // Planned on the caller's thread: a refused request never reaches the running batch.
  PlannedRequest planned = impl_->core->make_request(std::move(request.prompt), request.settings,
                                                     loaded.generation_defaults, request.seed,
                                                     request.priority, std::move(request.stream));
  RequestHandle h;
  h.state_ = std::make_shared<RequestHandle::State>();
  h.state_->on_finish = std::move(on_finish);
  {
    const std::lock_guard<std::mutex> lock(impl_->m);
    if (impl_->stopping) throw Error("scheduler: shutting down; request refused");
    const int64_t queued = impl_->waiting + static_cast<int64_t>(impl_->incoming.size());
    if (queued >= impl_->options.max_queue) {
      throw QueueFull("scheduler: the queue is full (" + std::to_string(queued) +
                      " requests waiting, max_queue " + std::to_string(impl_->options.max_queue) +
                      "); retry later or raise max_queue");
    }
    h.state_->id = impl_->next_id++;
    ++impl_->outstanding;
    impl_->incoming.emplace_back(std::move(planned), h.state_);
  }
  impl_->wake.notify_all();
  return h;
}

RequestResult Scheduler::wait(const RequestHandle& handle) {
  if (!handle.state_) throw Error("Scheduler::wait: an empty RequestHandle");
  if (std::this_thread::get_id() == impl_->thread.get_id()) {
    throw Error(
        "Scheduler::wait called from a request's stream (the scheduler's own thread), "
        "which would wait on itself");
  }
  std::unique_lock<std::mutex> lock(handle.state_->m);
  handle.state_->cv.wait(lock, [&] { return handle.state_->done; });
  return handle.state_->result;
}

std::optional<RequestResult> Scheduler::wait_for(const RequestHandle& handle, double seconds) {
  if (!handle.state_) throw Error("Scheduler::wait_for: an empty RequestHandle");
  std::unique_lock<std::mutex> lock(handle.state_->m);
  const auto limit = std::chrono::duration<double>(std::max(0.0, seconds));
  if (!handle.state_->cv.wait_for(lock, limit, [&] { return handle.state_->done; })) {
    return std::nullopt;
  }
  return handle.state_->result;
}

bool Scheduler::cancel(const RequestHandle& handle) {
  if (!handle.state_) throw Error("Scheduler::cancel: an empty RequestHandle");
  {
    const std::lock_guard<std::mutex> lock(handle.state_->m);
    if (handle.state_->done) return false;
  }
  {
    const std::lock_guard<std::mutex> lock(impl_->m);
    impl_->cancels.push_back(handle.state_->id);
  }
  impl_->wake.notify_all();
  return true;
}

void Scheduler::drain() {
  if (std::this_thread::get_id() == impl_->thread.get_id()) {
    throw Error("Scheduler::drain called from a request's stream, which would wait on itself");
  }
  std::unique_lock<std::mutex> lock(impl_->m);
  impl_->drained.wait(lock, [&] { return impl_->outstanding == 0; });
}

nlohmann::json Scheduler::stats() const {
  const std::lock_guard<std::mutex> lock(impl_->m);
  return impl_->stats;
}

const SchedulerOptions& Scheduler::options() const { return impl_->options; }

}  // namespace gengraph

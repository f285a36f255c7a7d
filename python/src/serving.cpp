// gengraph::Scheduler (<gengraph/serving.h>) for Python: python/gengraph/serving.py wraps these
// classes (docs/python.md#many-requests-at-once).
//
// Every request registers a stream that only appends the token to the request's own queue under
// a mutex: it never takes the GIL and never waits for a reader, so a request nobody iterates
// costs the scheduler's thread nothing. A reader waits on the queue with the GIL released (a
// Python thread), or on an eventfd an asyncio loop watches. The scheduler calls a stream for
// tokens only, so a request's end (any finish: a cancel or a failure has no last token) comes from
// a thread that waits for its result, started when a reader first asks for tokens.
#include "python/src/serving.h"

#include <gengraph/serving.h>
#include <pybind11/stl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "python/src/convert.h"

namespace gengraph::python {
namespace {

// One request as its Python object and the scheduler's thread share it.
struct RequestState {
  RequestHandle handle;
  std::mutex m;
  std::condition_variable cv;
  std::deque<StreamedToken> tokens;  // chosen, not yet read
  std::optional<RequestResult> result;
  bool stop = false;     // the reader left early: the next token stops the request
  bool watched = false;  // a thread waits for the result
  int event_fd = -1;     // readable while something is new, for an asyncio reader
  ~RequestState() {
    if (event_fd >= 0) ::close(event_fd);
  }
  void signal() {  // under m
    cv.notify_all();
    if (event_fd >= 0) {
      const uint64_t one = 1;
      (void)!::write(event_fd, &one, sizeof one);
    }
  }
  void finish(RequestResult r) {
    const std::lock_guard<std::mutex> lock(m);
    if (!result) result = std::move(r);
    signal();
  }
};

// The scheduler and what its Python objects share: a Request outlives its Scheduler's close().
// Every call into the scheduler is a use, counted, so that close() destroys it only once no
// thread is inside it.
struct Core {
  std::unique_ptr<Scheduler> scheduler;
  std::mutex m;
  std::condition_variable quiet;  // uses or submits dropped to zero
  bool closed = false;
  int64_t uses = 0, submits = 0;
  size_t prune_at = 64;
  // The requests with no result cached yet. A state expires only once its Python object is gone
  // and its request has ended (its stream holds it until then): close() cancels every other,
  // referenced or not.
  std::unordered_map<int64_t, std::weak_ptr<RequestState>> pending;
  nlohmann::json last_stats;

  Scheduler* use(bool submitting = false) {
    const std::lock_guard<std::mutex> lock(m);
    if (closed) return nullptr;
    ++uses;
    if (submitting) ++submits;
    return scheduler.get();
  }
  void done(bool submitting = false) {
    const std::lock_guard<std::mutex> lock(m);
    --uses;
    if (submitting) --submits;
    quiet.notify_all();
  }
  void forget(int64_t id) {
    const std::lock_guard<std::mutex> lock(m);
    pending.erase(id);
  }

  // Cancels what has not finished, waits for every use to end, keeps the results for the
  // requests still referenced, then destroys the scheduler (its KV pool freed). Without the GIL.
  void close() {
    std::vector<std::shared_ptr<RequestState>> live;
    {
      std::unique_lock<std::mutex> lock(m);
      if (closed) {
        quiet.wait(lock, [&] { return !scheduler; });
        return;
      }
      closed = true;
      quiet.wait(lock, [&] { return submits == 0; });  // a submit under way lands in pending
      for (const auto& [id, weak] : pending) {
        if (auto s = weak.lock()) live.push_back(std::move(s));
      }
      pending.clear();
    }
    for (const auto& s : live) scheduler->cancel(s->handle);
    scheduler->drain();
    {
      std::unique_lock<std::mutex> lock(m);
      quiet.wait(lock, [&] { return uses == 0; });
    }
    for (const auto& s : live) s->finish(scheduler->wait(s->handle));
    last_stats = scheduler->stats();
    std::unique_ptr<Scheduler> gone;
    {
      const std::lock_guard<std::mutex> lock(m);
      gone = std::move(scheduler);
    }
    gone.reset();
    quiet.notify_all();
  }
};

class PyRequest {
 public:
  PyRequest(std::shared_ptr<Core> core, std::shared_ptr<RequestState> state)
      : core_(std::move(core)), state_(std::move(state)) {}

  int64_t id() const { return state_->handle.id(); }

  RequestResult wait() {
    py::gil_scoped_release nogil;
    if (auto r = cached()) return *r;
    if (Scheduler* s = core_->use()) {
      RequestResult r;
      try {
        r = s->wait(state_->handle);
      } catch (...) {
        core_->done();
        throw;
      }
      core_->done();
      state_->finish(r);
      core_->forget(id());
    }
    // Closed meanwhile: close() keeps the result.
    std::unique_lock<std::mutex> lock(state_->m);
    state_->cv.wait(lock, [&] { return state_->result.has_value(); });
    return *state_->result;
  }

  // The result once the request has ended within `seconds`, else None.
  py::object wait_for(double seconds) {
    watch();
    std::optional<RequestResult> r;
    {
      py::gil_scoped_release nogil;
      std::unique_lock<std::mutex> lock(state_->m);
      state_->cv.wait_for(lock, std::chrono::duration<double>(seconds),
                          [&] { return state_->result.has_value(); });
      r = state_->result;
    }
    return r ? py::cast(std::move(*r)) : py::object(py::none());
  }

  bool cancel() {
    if (cached()) return false;
    Scheduler* s = core_->use();
    if (!s) return false;
    const bool cancelled = s->cancel(state_->handle);
    core_->done();
    return cancelled;
  }

  bool finished() { return cached().has_value(); }

  // The tokens chosen since the last call and whether the request has ended with them; `block`:
  // first waits (the GIL released) until there is a token or the end.
  std::pair<std::vector<StreamedToken>, bool> take(bool block) {
    watch();
    std::vector<StreamedToken> out;
    bool ended = false;
    {
      py::gil_scoped_release nogil;
      std::unique_lock<std::mutex> lock(state_->m);
      if (block) {
        state_->cv.wait(lock, [&] { return !state_->tokens.empty() || state_->result; });
      }
      out.assign(state_->tokens.begin(), state_->tokens.end());
      state_->tokens.clear();
      ended = state_->result.has_value();
    }
    return {std::move(out), ended};
  }

  // The reader left before the end: the request stops at its next token ("stopped").
  void stop() {
    const std::lock_guard<std::mutex> lock(state_->m);
    state_->stop = true;
  }

  // A file descriptor readable whenever take() has something new (an asyncio loop's add_reader).
  int event_fd() {
    const std::lock_guard<std::mutex> lock(state_->m);
    if (state_->event_fd < 0) {
      state_->event_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
      if (state_->event_fd < 0) {
        throw Error(std::string("Request: eventfd for async iteration failed: ") +
                    std::strerror(errno));
      }
      if (!state_->tokens.empty() || state_->result) state_->signal();
    }
    return state_->event_fd;
  }
  void clear_event() {
    const std::lock_guard<std::mutex> lock(state_->m);
    uint64_t n = 0;
    if (state_->event_fd >= 0) (void)!::read(state_->event_fd, &n, sizeof n);
  }

 private:
  std::optional<RequestResult> cached() {
    const std::lock_guard<std::mutex> lock(state_->m);
    return state_->result;
  }

  // Starts the thread that waits for the result, once: the reader's signal that the request ended.
  void watch() {
    {
      const std::lock_guard<std::mutex> lock(state_->m);
      if (state_->watched || state_->result) return;
      state_->watched = true;
    }
    Scheduler* s = core_->use();
    if (!s) return;  // closed: close() sets the result
    std::thread([core = core_, state = state_, s] {
      try {
        state->finish(s->wait(state->handle));
        core->forget(state->handle.id());
      } catch (const std::exception& e) {
        RequestResult r;
        r.finish = "failed";
        r.error = e.what();
        state->finish(std::move(r));
      }
      core->done();
    }).detach();
  }

  std::shared_ptr<Core> core_;
  std::shared_ptr<RequestState> state_;
};

class PyScheduler {
 public:
  PyScheduler(const Model& model, const RunOptions& run, const SchedulerOptions& options)
      : core_(std::make_shared<Core>()) {
    core_->scheduler = std::make_unique<Scheduler>(model, run, options);
  }
  ~PyScheduler() {
    // From Python (the GIL held) or at interpreter exit.
    if (PyGILState_Check()) {
      py::gil_scoped_release nogil;
      core_->close();
    } else {
      core_->close();
    }
  }

  PyRequest submit(std::vector<int64_t> prompt, const py::object& settings, uint64_t seed,
                   int64_t priority) {
    Request request;
    request.prompt = std::move(prompt);
    request.settings = to_json(settings, "submit: the settings");
    request.seed = seed;
    request.priority = priority;
    auto state = std::make_shared<RequestState>();
    // Only appends: never the GIL, never a wait for a reader.
    request.stream = [state](const StreamedToken& t) {
      const std::lock_guard<std::mutex> lock(state->m);
      if (state->stop) return false;
      state->tokens.push_back(t);
      state->signal();
      return true;
    };
    py::gil_scoped_release nogil;
    Scheduler* s = core_->use(true);
    if (!s) throw Error("Scheduler.submit: the scheduler is closed");
    try {
      state->handle = s->submit(std::move(request));
    } catch (...) {
      core_->done(true);
      throw;
    }
    {
      const std::lock_guard<std::mutex> lock(core_->m);
      if (core_->pending.size() >= core_->prune_at) {
        for (auto it = core_->pending.begin(); it != core_->pending.end();) {
          it = it->second.expired() ? core_->pending.erase(it) : std::next(it);
        }
        core_->prune_at = std::max<size_t>(64, 2 * core_->pending.size());
      }
      core_->pending[state->handle.id()] = state;
    }
    core_->done(true);
    return PyRequest(core_, std::move(state));
  }

  void drain() {
    py::gil_scoped_release nogil;
    Scheduler* s = core_->use();
    if (!s) return;
    s->drain();
    core_->done();
  }

  py::object stats() {
    nlohmann::json out;
    if (Scheduler* s = core_->use()) {
      out = s->stats();
      core_->done();
    } else {
      const std::lock_guard<std::mutex> lock(core_->m);
      out = core_->last_stats;
    }
    return from_json(out);
  }

  void close() {
    py::gil_scoped_release nogil;
    core_->close();
  }

  bool closed() {
    const std::lock_guard<std::mutex> lock(core_->m);
    return core_->closed;
  }

 private:
  std::shared_ptr<Core> core_;
};

}  // namespace

void bind_serving(py::module_& m) {
  py::class_<RequestResult>(m, "RequestResult",
                            "A finished request (gengraph::RequestResult), whatever its finish.")
      .def_readonly("id", &RequestResult::id)
      .def_readonly("sequence", &RequestResult::sequence)
      .def_property_readonly("tokens", [](const RequestResult& r) { return r.sequence.tokens; })
      .def_property_readonly("token_scores",
                             [](const RequestResult& r) { return r.sequence.token_scores; })
      .def_property_readonly(
          "top_logprobs", [](const RequestResult& r) { return top_pairs(r.sequence.top_logprobs); },
          "with top_logprobs=k: per token, its step's k most likely (token, logprob), best first")
      .def_readonly("finish", &RequestResult::finish,
                    "stop, length, cancelled, stopped (the reader left early) or failed")
      .def_readonly("error", &RequestResult::error, "why it failed")
      .def_readonly("prompt_length", &RequestResult::prompt_length)
      .def_readonly("queue_s", &RequestResult::queue_s, "seconds from submit to admission")
      .def_readonly("time_to_first_token_s", &RequestResult::time_to_first_token_s)
      .def_readonly("total_s", &RequestResult::total_s, "seconds from submit to the end")
      .def_readonly("preemptions", &RequestResult::preemptions)
      .def_readonly("reused_tokens", &RequestResult::reused_tokens,
                    "prompt positions taken from shared prefix blocks")
      .def("__repr__", [](const RequestResult& r) {
        return "RequestResult(id=" + std::to_string(r.id) + ", finish='" + r.finish +
               "', tokens=" + std::string(py::repr(py::cast(r.sequence.tokens))) +
               (r.error.empty() ? "" : ", error=" + std::string(py::repr(py::str(r.error)))) + ")";
      });

  py::class_<PyRequest>(m, "_Request")
      .def_property_readonly("id", &PyRequest::id)
      .def("wait", &PyRequest::wait)
      .def("wait_for", &PyRequest::wait_for, py::arg("seconds"))
      .def("cancel", &PyRequest::cancel)
      .def_property_readonly("finished", &PyRequest::finished)
      .def("take", &PyRequest::take, py::arg("block"))
      .def("stop", &PyRequest::stop)
      .def("event_fd", &PyRequest::event_fd)
      .def("clear_event", &PyRequest::clear_event);

  py::class_<PyScheduler>(m, "_Scheduler")
      .def(py::init([](const Model& model, const std::string& backend,
                       const std::map<std::string, std::string>& backend_options,
                       const std::string& policy, int64_t block_size, int64_t kv_blocks,
                       double kv_memory_mb, int64_t max_step_tokens, int64_t prefill_chunk,
                       int64_t max_running, int64_t max_queue, bool prefix_sharing,
                       bool batch_invariant) {
             RunOptions run;
             run.backend = backend;
             run.backend_options = backend_options;
             SchedulerOptions o;
             o.policy = policy;
             o.block_size = block_size;
             o.kv_blocks = kv_blocks;
             o.kv_memory_mb = kv_memory_mb;
             o.max_step_tokens = max_step_tokens;
             o.prefill_chunk = prefill_chunk;
             o.max_running = max_running;
             o.max_queue = max_queue;
             o.prefix_sharing = prefix_sharing;
             o.batch_invariant = batch_invariant;
             py::gil_scoped_release nogil;
             return std::make_unique<PyScheduler>(model, run, o);
           }),
           py::arg("model"), py::arg("backend"), py::arg("backend_options"), py::arg("policy"),
           py::arg("block_size"), py::arg("kv_blocks"), py::arg("kv_memory_mb"),
           py::arg("max_step_tokens"), py::arg("prefill_chunk"), py::arg("max_running"),
           py::arg("max_queue"), py::arg("prefix_sharing"), py::arg("batch_invariant"))
      .def("submit", &PyScheduler::submit, py::arg("prompt"), py::arg("settings"), py::arg("seed"),
           py::arg("priority"))
      .def("drain", &PyScheduler::drain)
      .def("stats", &PyScheduler::stats)
      .def("close", &PyScheduler::close)
      .def_property_readonly("closed", &PyScheduler::closed);
}

}  // namespace gengraph::python

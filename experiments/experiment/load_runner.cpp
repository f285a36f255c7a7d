#include "experiments/experiment/load_runner.h"

#include <ATen/Parallel.h>
#include <gengraph/serving.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "experiments/experiment/row_forms.h"
#include "experiments/results/results.h"
#include "experiments/tools/process.h"
#include "framework/util/device.h"
#include "framework/util/error.h"
#include "framework/util/process_checks.h"
#include "framework/util/strings.h"
#include "framework/util/version.h"

namespace gengraph {

using Clock = std::chrono::steady_clock;

namespace {

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct LoadRequest {
  std::vector<int64_t> prompt;
  int64_t output_length = 0;  // its max_new_tokens (= min_new_tokens); 0: the settings' own
  bool shared = false;        // starts with the shared prefix
};

// The requests, the same for every rate and system: prompts of random ids from the seed, the
// chosen fraction of them behind one shared prefix, each with its output length.
std::vector<LoadRequest> make_requests(const LoadSpec& l, int64_t vocab) {
  std::mt19937_64 rng(l.seed);
  std::uniform_int_distribution<int64_t> token(0, vocab - 1);
  std::vector<int64_t> prefix(static_cast<size_t>(l.shared_prefix_length));
  for (auto& t : prefix) t = token(rng);
  std::vector<size_t> order(static_cast<size_t>(l.requests));
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  const auto sharing =
      static_cast<size_t>(std::llround(l.shared_prefix_fraction * static_cast<double>(l.requests)));
  std::vector<LoadRequest> out(order.size());
  for (size_t k = 0; k < sharing && k < order.size(); ++k) out[order[k]].shared = true;
  for (auto& r : out) {
    std::uniform_int_distribution<int64_t> plen(l.prompt_lengths.min, l.prompt_lengths.max);
    std::uniform_int_distribution<int64_t> olen(l.output_lengths.min, l.output_lengths.max);
    if (r.shared) r.prompt = prefix;
    const int64_t n = plen(rng);
    for (int64_t i = 0; i < n; ++i) r.prompt.push_back(token(rng));
    const int64_t o = olen(rng);
    r.output_length = l.has_output_lengths ? o : 0;
  }
  return out;
}

// Arrival offsets in seconds from the start: a Poisson process of `rate` (exponential gaps, from
// the seed and the rate's place in the list), or every request at 0.
std::vector<double> arrival_offsets(const LoadSpec& l, size_t rate_index) {
  std::vector<double> out(static_cast<size_t>(l.requests), 0.0);
  const double rate = l.rates[rate_index];
  if (rate == kAllAtOnce) return out;
  std::seed_seq seq{l.seed, static_cast<uint64_t>(rate_index) + 1};
  std::mt19937_64 rng(seq);
  std::exponential_distribution<double> gap(rate);
  double t = 0;
  for (auto& o : out) {
    t += gap(rng);
    o = t;
  }
  return out;
}

// A request's generation settings: the experiment's, with its exact output length.
nlohmann::json settings_for(const ExperimentConfig& c, int64_t output_length) {
  nlohmann::json s = c.generation;
  if (output_length > 0) {
    s["max_new_tokens"] = output_length;
    s["min_new_tokens"] = output_length;
  }
  return s;
}

// What happened to one request, in seconds from its arrival.
struct Outcome {
  enum class State { kNotArrived, kDone, kCancelled, kFailed } state = State::kNotArrived;
  double queue_s = 0, ttft_s = 0, total_s = 0;
  int64_t tokens = 0;
  std::string error;
};

// One replay: the start, the deadline, the arrivals; `on_arrival(i)` is called on the arrival
// thread at each request's offset, until the deadline.
struct Replay {
  Clock::time_point start, deadline;
  std::vector<double> offsets;
  std::vector<Outcome> outcomes;

  Replay(const std::vector<double>& arrivals, double time_limit_s) : offsets(arrivals) {
    outcomes.resize(offsets.size());
    start = Clock::now();
    deadline = start + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(time_limit_s));
  }
  Clock::time_point arrival(size_t i) const {
    return start +
           std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(offsets[i]));
  }
  double since_arrival(size_t i, Clock::time_point t) const { return seconds(t - arrival(i)); }
  // From the start to the last request's end (now, when none completed).
  double wall_s() const {
    double last = 0;
    bool any = false;
    for (size_t i = 0; i < outcomes.size(); ++i) {
      if (outcomes[i].state != Outcome::State::kDone) continue;
      last = std::max(last, offsets[i] + outcomes[i].total_s);
      any = true;
    }
    return any ? last : seconds(Clock::now() - start);
  }
  std::thread arrivals(std::function<void(size_t)> on_arrival) const {
    return std::thread([this, on_arrival = std::move(on_arrival)] {
      for (size_t i = 0; i < offsets.size(); ++i) {
        const Clock::time_point at = arrival(i);
        if (at >= deadline) return;
        std::this_thread::sleep_until(at);
        on_arrival(i);
      }
    });
  }
};

// The requests that have arrived and wait for an Engine's worker.
struct ArrivalQueue {
  std::mutex m;
  std::condition_variable cv;
  std::deque<size_t> waiting;
  bool closed = false;  // every arrival is in (or the deadline passed)

  void push(size_t i) {
    {
      const std::lock_guard<std::mutex> lock(m);
      waiting.push_back(i);
    }
    cv.notify_one();
  }
  void close() {
    {
      const std::lock_guard<std::mutex> lock(m);
      closed = true;
    }
    cv.notify_all();
  }
  // Up to `most` waiting requests, in arrival order; none once closed and empty, or past the
  // deadline.
  std::vector<size_t> take(size_t most, Clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(m);
    cv.wait_until(lock, deadline, [&] { return !waiting.empty() || closed; });
    std::vector<size_t> out;
    if (Clock::now() >= deadline) return out;
    while (!waiting.empty() && out.size() < most) {
      out.push_back(waiting.front());
      waiting.pop_front();
    }
    return out;
  }
};

// One request at a time (most = 1) or static batches (most = static_batch_max) on an Engine:
// a batch runs as one generate() to the longest output length among its requests (left-padded
// prompts); each request counts its own tokens, its first token is the batch's first, its end the
// batch's end.
void run_engine_system(const ExperimentConfig& c, Engine& engine,
                       const std::vector<LoadRequest>& requests, Replay& replay, size_t most) {
  ArrivalQueue queue;
  std::thread arrivals = replay.arrivals([&](size_t i) {
    replay.outcomes[i].state = Outcome::State::kCancelled;  // until it finishes
    queue.push(i);
  });
  std::thread closer([&] {
    arrivals.join();
    queue.close();
  });
  for (;;) {
    const std::vector<size_t> batch = queue.take(most, replay.deadline);
    if (batch.empty()) break;
    const Clock::time_point begin = Clock::now();
    std::vector<std::vector<int64_t>> prompts;
    int64_t longest = 0;
    for (const size_t i : batch) {
      prompts.push_back(requests[i].prompt);
      longest = std::max(longest, requests[i].output_length);
    }
    std::optional<Clock::time_point> first;
    bool stopped = false;
    const TokenStream stream = [&](const StreamedToken&) {
      if (!first) first = Clock::now();
      stopped = Clock::now() >= replay.deadline;
      return !stopped;
    };
    try {
      const Generation g = engine.generate(prompts, settings_for(c, longest), stream);
      const Clock::time_point end = Clock::now();
      for (size_t k = 0; k < batch.size(); ++k) {
        Outcome& o = replay.outcomes[batch[k]];
        o.state = stopped ? Outcome::State::kCancelled : Outcome::State::kDone;
        o.queue_s = replay.since_arrival(batch[k], begin);
        o.ttft_s = replay.since_arrival(batch[k], first.value_or(end));
        o.total_s = replay.since_arrival(batch[k], end);
        const auto made = static_cast<int64_t>(g.outputs[k][0].tokens.size());
        const int64_t own = requests[batch[k]].output_length;
        o.tokens = own > 0 ? std::min(own, made) : made;
      }
    } catch (const std::exception& e) {
      for (const size_t i : batch) {
        replay.outcomes[i].state = Outcome::State::kFailed;
        replay.outcomes[i].error = e.what();
      }
    }
  }
  queue.close();
  closer.join();
}

// The scheduler's counters used here, from its stats() document.
int64_t counter(const nlohmann::json& stats, const char* key) {
  const auto it = stats.find(key);
  return it != stats.end() && it->is_number() ? it->get<int64_t>() : 0;
}
int64_t blocks_field(const nlohmann::json& stats, const char* key) {
  const auto it = stats.find("blocks");
  return it != stats.end() && it->is_object() ? counter(*it, key) : 0;
}

// Continuous batching: each request submitted at its arrival, its times from its RequestResult
// (from submit(), moved to its arrival); stats() sampled every 20 ms for the blocks in use.
nlohmann::json run_scheduler_system(const ExperimentConfig& c, Scheduler& scheduler,
                                    const std::vector<LoadRequest>& requests, Replay& replay) {
  const nlohmann::json before = scheduler.stats();
  std::vector<std::optional<RequestHandle>> handles(requests.size());
  std::vector<Clock::time_point> submitted(requests.size());
  std::atomic<bool> done{false};
  std::vector<double> in_use;
  int64_t peak = 0;
  std::thread monitor([&] {
    while (!done) {
      const int64_t n = blocks_field(scheduler.stats(), "in_use");
      in_use.push_back(static_cast<double>(n));
      peak = std::max(peak, n);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  std::thread arrivals = replay.arrivals([&](size_t i) {
    Request r;
    r.prompt = requests[i].prompt;
    r.settings = settings_for(c, requests[i].output_length);
    r.seed = c.load->seed + i;
    submitted[i] = Clock::now();
    try {
      handles[i] = scheduler.submit(std::move(r));
    } catch (const std::exception& e) {
      replay.outcomes[i].state = Outcome::State::kFailed;
      replay.outcomes[i].error = e.what();
    }
  });
  arrivals.join();
  // At the deadline every request still running or waiting is cancelled.
  std::mutex m;
  std::condition_variable cv;
  bool collected = false;
  std::thread canceller([&] {
    std::unique_lock<std::mutex> lock(m);
    if (cv.wait_until(lock, replay.deadline, [&] { return collected; })) return;
    for (const auto& h : handles) {
      if (h) scheduler.cancel(*h);
    }
  });
  for (size_t i = 0; i < handles.size(); ++i) {
    if (!handles[i]) continue;
    const RequestResult res = scheduler.wait(*handles[i]);
    Outcome& o = replay.outcomes[i];
    const double lag = replay.since_arrival(i, submitted[i]);
    o.queue_s = lag + res.queue_s;
    o.ttft_s = lag + res.time_to_first_token_s;
    o.total_s = lag + res.total_s;
    o.tokens = static_cast<int64_t>(res.sequence.tokens.size());
    o.state = res.finish == "length" || res.finish == "stop" ? Outcome::State::kDone
              : res.finish == "cancelled"                    ? Outcome::State::kCancelled
                                                             : Outcome::State::kFailed;
    if (o.state == Outcome::State::kFailed) o.error = res.finish + ": " + res.error;
  }
  {
    const std::lock_guard<std::mutex> lock(m);
    collected = true;
  }
  cv.notify_all();
  canceller.join();
  scheduler.drain();
  done = true;
  monitor.join();
  const nlohmann::json after = scheduler.stats();
  double mean = 0;
  for (const double x : in_use) mean += x / static_cast<double>(in_use.size());
  return {{"kv_blocks",
           {{"total", blocks_field(after, "total")},
            {"block_size", blocks_field(after, "block_size")},
            {"mean_in_use", mean},
            // The scheduler's own peak (every step counted; short requests fall between the
            // samples), which the warm-up's few blocks count towards too.
            {"peak_in_use", std::max(peak, blocks_field(after, "peak_in_use"))},
            {"in_use_at_end", blocks_field(after, "in_use")},
            {"cached_at_end", blocks_field(after, "cached")}}},
          {"steps", counter(after, "steps") - counter(before, "steps")},
          {"prefix_hits", counter(after, "prefix_hits") - counter(before, "prefix_hits")},
          {"reused_tokens", counter(after, "reused_tokens") - counter(before, "reused_tokens")},
          {"copy_on_write", counter(after, "copy_on_write") - counter(before, "copy_on_write")},
          {"preemptions", counter(after, "preemptions") - counter(before, "preemptions")}};
}

nlohmann::json percentiles(const std::vector<double>& ms, const std::vector<double>& qs) {
  if (ms.empty()) return nullptr;
  nlohmann::json out = nlohmann::json::object();
  for (const double q : qs) out["p" + std::to_string(static_cast<int>(q * 100))] = quantile(ms, q);
  double mean = 0;
  for (const double x : ms) mean += x / static_cast<double>(ms.size());
  out["mean"] = mean;
  return out;
}

// A row of the results: the outcomes of one system at one rate, summarised.
nlohmann::json row_json(const LoadSystem& system, double rate, const Replay& replay,
                        double wall_s) {
  std::vector<double> ttft, tpot, queue;
  int64_t done = 0, cancelled = 0, failed = 0, not_arrived = 0, tokens = 0;
  std::string first_error;
  for (const Outcome& o : replay.outcomes) {
    switch (o.state) {
      case Outcome::State::kDone:
        ++done;
        tokens += o.tokens;
        ttft.push_back(o.ttft_s * 1e3);
        queue.push_back(o.queue_s * 1e3);
        if (o.tokens > 1)
          tpot.push_back((o.total_s - o.ttft_s) * 1e3 / static_cast<double>(o.tokens - 1));
        break;
      case Outcome::State::kCancelled:
        ++cancelled;
        break;
      case Outcome::State::kFailed:
        ++failed;
        if (first_error.empty()) first_error = o.error;
        break;
      case Outcome::State::kNotArrived:
        ++not_arrived;
        break;
    }
  }
  nlohmann::json row = {
      {"label", system.label},
      {"system", system.kind},
      {"rate", rate == kAllAtOnce ? nlohmann::json("all_at_once") : nlohmann::json(rate)},
      {"requests", replay.outcomes.size()},
      {"completed", done},
      {"cancelled", cancelled + not_arrived},
      {"not_arrived_by_time_limit", not_arrived},
      {"failed", failed},
      {"wall_s", wall_s},
      {"requests_per_s", wall_s > 0 ? static_cast<double>(done) / wall_s : 0.0},
      {"output_tokens", tokens},
      {"output_tokens_per_s", wall_s > 0 ? static_cast<double>(tokens) / wall_s : 0.0},
      {"ttft_ms", percentiles(ttft, {0.5, 0.9, 0.99})},
      {"tpot_ms", percentiles(tpot, {0.5, 0.9, 0.99})},
      {"queue_ms", percentiles(queue, {0.5, 0.99})}};
  if (!first_error.empty()) row["first_request_error"] = first_error;
  return row;
}

// A short request through a system before its replay: its code paths and allocations warm.
Request warm_request(const LoadSpec& l, const ExperimentConfig& c, int64_t vocab) {
  std::mt19937_64 rng(l.seed ^ 0x5eedULL);
  std::uniform_int_distribution<int64_t> token(0, vocab - 1);
  Request r;
  for (int64_t i = 0; i < l.prompt_lengths.min; ++i) r.prompt.push_back(token(rng));
  r.settings = settings_for(c, 2);
  return r;
}

nlohmann::json environment_json(const ExperimentConfig& c) {
  const std::string cpu = device_description(c10::Device(c10::kCPU));
  return {{"gengraph_commit", gengraph_commit()},
          {"torch_version", torch_version()},
          {"device", device_description(parse_device(c.model.device))},
          {"dtype", c.model.dtype},
          {"threads", at::get_num_threads()},
          {"hostname", host_name()},
          {"cpu", cpu.size() > 6 ? cpu.substr(5, cpu.size() - 6) : cpu}};
}

nlohmann::json serving_json(const SchedulerOptions& o) {
  return {{"policy", o.policy},
          {"block_size", o.block_size},
          {"kv_blocks", o.kv_blocks},
          {"kv_memory_mb", o.kv_memory_mb},
          {"max_step_tokens", o.max_step_tokens},
          {"prefill_chunk", o.prefill_chunk},
          {"max_running", o.max_running},
          {"max_queue", o.max_queue},
          {"prefix_sharing", o.prefix_sharing},
          {"batch_invariant", o.batch_invariant}};
}

nlohmann::json load_json(const LoadSpec& l, const std::vector<LoadRequest>& requests) {
  nlohmann::json rates = nlohmann::json::array();
  for (const double r : l.rates)
    rates.push_back(r == kAllAtOnce ? nlohmann::json("all_at_once") : nlohmann::json(r));
  nlohmann::json systems = nlohmann::json::array();
  for (const auto& s : l.systems) {
    nlohmann::json e = {{"label", s.label}, {"system", s.kind}};
    if (s.kind == "scheduler") e["serving"] = serving_json(s.serving);
    systems.push_back(e);
  }
  int64_t prompt_tokens = 0, shared = 0, output_tokens = 0;
  for (const auto& r : requests) {
    prompt_tokens += static_cast<int64_t>(r.prompt.size());
    shared += r.shared;
    output_tokens += r.output_length;
  }
  nlohmann::json out = {
      {"arrival", l.arrival},
      {"rates", rates},
      {"requests", l.requests},
      {"prompt_lengths", {{"min", l.prompt_lengths.min}, {"max", l.prompt_lengths.max}}},
      {"output_lengths", l.has_output_lengths ? nlohmann::json{{"min", l.output_lengths.min},
                                                               {"max", l.output_lengths.max}}
                                              : nlohmann::json(nullptr)},
      {"shared_prefix",
       {{"length", l.shared_prefix_length},
        {"fraction", l.shared_prefix_fraction},
        {"requests", shared}}},
      {"seed", l.seed},
      {"static_batch_max", l.static_batch_max},
      {"time_limit_s", l.time_limit_s},
      {"systems", systems},
      {"prompt_tokens", prompt_tokens}};
  if (l.has_output_lengths) out["output_tokens_asked"] = output_tokens;
  return out;
}

std::string command_of(const ExperimentConfig& c) {
  std::string out = "gengraph run " + c.file;
  for (const auto& o : c.overrides) out += " --set " + o;
  return out;
}

}  // namespace

double quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double pos = q * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (pos - static_cast<double>(lo)) * (values[hi] - values[lo]);
}

ExperimentConfig load_plan_config(const ExperimentConfig& c) {
  ExperimentConfig p = c;
  const LoadSpec& l = *c.load;
  p.load.reset();
  p.inputs = InputsSpec{};
  p.inputs.synthetic = true;
  p.inputs.prompt_length = l.shared_prefix_length + l.prompt_lengths.max;
  const bool batches = std::any_of(l.systems.begin(), l.systems.end(),
                                   [](const LoadSystem& s) { return s.kind == "static_batching"; });
  p.inputs.batch_size = batches ? std::min(l.static_batch_max, l.requests) : 1;
  if (l.has_output_lengths) p.generation = settings_for(c, l.output_lengths.max);
  return p;
}

nlohmann::json run_load_experiment(const ExperimentConfig& c, std::ostream& log) {
  const LoadSpec& l = *c.load;
  if (c.run.threads > 0) at::set_num_threads(static_cast<int>(c.run.threads));
  log << "loading model " << (c.model.preset.empty() ? c.model.path : "preset " + c.model.preset)
      << " (" << c.model.dtype << ", " << c.model.device << ")\n";
  const Model model(model_name(c.model), model_options(c.model));
  const std::vector<LoadRequest> requests = make_requests(l, model.vocab_size());
  const RunOptions run = run_options(c.backends.front());
  const Request warm = warm_request(l, c, model.vocab_size());

  nlohmann::json doc = results_header(c);
  doc["kind"] = "load";
  doc["command"] = command_of(c);
  doc["environment"] = environment_json(c);
  doc["model"] = model.describe();
  doc["backend"] = {{"name", run.backend}, {"options", run.backend_options}};
  doc["generation"] = c.generation;
  doc["load"] = load_json(l, requests);
  doc["runs"] = nlohmann::json::array();

  for (const LoadSystem& system : l.systems) {
    // An Engine per Engine-driven system, warmed once; a fresh Scheduler per rate (no prefix
    // index or counters carried from one rate to the next), warmed before its replay.
    std::unique_ptr<Engine> engine;
    std::string failure;
    try {
      if (system.kind != "scheduler") {
        engine = std::make_unique<Engine>(model, run);
        for (int64_t w = 0; w < c.run.warmup; ++w) engine->generate({warm.prompt}, warm.settings);
      }
    } catch (const std::exception& e) {
      failure = e.what();
    }
    for (size_t k = 0; k < l.rates.size(); ++k) {
      throw_if_interrupted();
      const double rate = l.rates[k];
      log << "load: " << system.label << " at " << rate_name(rate) << ": " << l.requests
          << " request(s)\n";
      nlohmann::json extra = nlohmann::json::object();
      std::unique_ptr<Scheduler> scheduler;
      if (failure.empty() && system.kind == "scheduler") {
        try {
          scheduler = std::make_unique<Scheduler>(model, run, system.serving);
          for (int64_t w = 0; w < c.run.warmup; ++w) {
            const RequestResult r = scheduler->wait(scheduler->submit(warm));
            if (r.finish == "failed") throw Error("the warm-up request failed: " + r.error);
          }
        } catch (const std::exception& e) {
          failure = e.what();
        }
      }
      if (!failure.empty()) {
        log << "load: " << system.label << " FAILED: " << failure << "\n";
        doc["runs"].push_back(
            {{"label", system.label},
             {"system", system.kind},
             {"rate", rate == kAllAtOnce ? nlohmann::json("all_at_once") : nlohmann::json(rate)},
             {"error", failure}});
        continue;
      }
      Replay replay(arrival_offsets(l, k), l.time_limit_s);
      if (scheduler) {
        extra = run_scheduler_system(c, *scheduler, requests, replay);
      } else {
        const size_t most =
            system.kind == "static_batching" ? static_cast<size_t>(l.static_batch_max) : 1;
        run_engine_system(c, *engine, requests, replay, most);
      }
      const double wall = replay.wall_s();
      nlohmann::json row = row_json(system, rate, replay, wall);
      row.update(extra);
      if (system.kind == "scheduler") row["serving"] = serving_json(system.serving);
      log << "load: " << system.label << " at " << rate_name(rate) << ": "
          << row["completed"].get<int64_t>() << "/" << l.requests << " completed in " << wall
          << " s\n";
      doc["runs"].push_back(row);
    }
  }
  return doc;
}

}  // namespace gengraph

#include "server/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "framework/text/tokenizer.h"
#include "framework/util/error.h"
#include "server/metrics.h"

namespace gengraph::server {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// Each connection on a thread of its own, counted: the pre-routing check answers 503 past
// max_connections, and shutdown() waits for the last one. The count is shared with every thread,
// so a thread that ends touches nothing the queue owns (httplib deletes the queue when listening
// ends).
struct OpenConnections {
  std::mutex m;
  std::condition_variable closed;
  int64_t open = 0;
  int64_t get() {
    const std::lock_guard<std::mutex> lock(m);
    return open;
  }
};

class ConnectionThreads : public httplib::TaskQueue {
 public:
  explicit ConnectionThreads(std::shared_ptr<OpenConnections> count) : count_(std::move(count)) {}
  void enqueue(std::function<void()> fn) override {
    {
      const std::lock_guard<std::mutex> lock(count_->m);
      ++count_->open;
    }
    std::thread([count = count_, fn = std::move(fn)] {
      try {
        fn();
      } catch (...) {  // httplib answers errors itself; nothing may end the process here
      }
      const std::lock_guard<std::mutex> lock(count->m);
      --count->open;
      count->closed.notify_all();
    }).detach();
  }
  void shutdown() override {
    std::unique_lock<std::mutex> lock(count_->m);
    count_->closed.wait(lock, [&] { return count_->open == 0; });
  }

 private:
  std::shared_ptr<OpenConnections> count_;
};

constexpr int kListenBacklog = 4096;

int64_t unix_now() { return static_cast<int64_t>(std::time(nullptr)); }

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// One HTTP request's generation: a choice per prompt x n, each a scheduler request whose tokens
// come in through its stream and whose end comes through its finish callback.
struct Job {
  struct Choice {
    explicit Choice(const Tokenizer* t, bool skip, std::vector<std::string> stop)
        : text(t, skip, std::move(stop)) {}
    ChoiceText text;
    RequestHandle handle;
    bool done = false, reported = false, first_sent = false;
    size_t tokens_sent = 0;
    std::string finish;  // "stop" | "length" | "cancelled" | "failed"
    std::string error;
    int64_t prompt_tokens = 0;
    double ttft_s = 0, total_s = 0;
  };
  ApiRequest request;
  std::string id;
  int64_t created = 0;
  Clock::time_point arrived = Clock::now();
  std::mutex m;
  std::condition_variable changed;
  std::vector<std::unique_ptr<Choice>> choices;
  std::atomic<bool> abandoned{false};

  bool all_done() const {
    for (const auto& c : choices)
      if (!c->done) return false;
    return true;
  }
  Usage usage() const {
    Usage u;
    for (const auto& c : choices) {
      u.completion_tokens += static_cast<int64_t>(c->text.tokens().size());
    }
    for (const auto& p : request.prompts) u.prompt_tokens += static_cast<int64_t>(p.size());
    return u;
  }
};

// Random bits for answer ids and unseeded requests, from one generator.
uint64_t random_bits() {
  static std::mutex m;
  static std::mt19937_64 rng(std::random_device{}());
  const std::lock_guard<std::mutex> lock(m);
  return rng();
}

std::string random_id(const char* prefix) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s%016llx", prefix,
                static_cast<unsigned long long>(random_bits()));
  return buf;
}

uint64_t random_seed() { return random_bits() >> 11; }  // below 2^53, as a request's seed may be

const char* finish_reason(const std::string& finish) {
  return finish == "length" ? "length" : "stop";
}

void set_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(e.body().dump(), "application/json");
}

}  // namespace

bool keys_equal(const std::string& a, const std::string& b) {
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

struct Server::Impl {
  ServedModel served;
  ServeOptions options;
  std::ostream& log;
  std::mutex log_m;
  std::unique_ptr<Scheduler> scheduler;
  ProtocolLimits limits;
  Metrics metrics;
  std::shared_ptr<OpenConnections> connections = std::make_shared<OpenConnections>();
  httplib::Server http;
  int listen_fd = -1;  // the listening socket, for its backlog
  int port = 0;
  std::atomic<bool> draining{false};
  std::mutex jobs_m;
  std::condition_variable jobs_done;
  std::set<std::shared_ptr<Job>> jobs;  // in flight (generation requests being answered)

  Impl(ServedModel s, ServeOptions o, std::ostream& l)
      : served(std::move(s)), options(std::move(o)), log(l) {}

  void log_line(const std::string& line) {
    const std::lock_guard<std::mutex> lock(log_m);
    log << line << "\n" << std::flush;
  }

  void routes();
  void generate(const httplib::Request& req, httplib::Response& res, Endpoint endpoint);
  std::shared_ptr<Job> start(ApiRequest r);
  void answer_whole(const std::shared_ptr<Job>& job, httplib::Response& res);
  bool stream_step(const std::shared_ptr<Job>& job, httplib::DataSink& sink);
  void end_job(const std::shared_ptr<Job>& job, int status);
};

std::shared_ptr<Job> Server::Impl::start(ApiRequest r) {
  auto job = std::make_shared<Job>();
  job->request = std::move(r);
  const ApiRequest& q = job->request;
  job->id = random_id(q.endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-");
  job->created = unix_now();
  const Tokenizer* tok = served.tokenizer.get();
  for (size_t p = 0; p < q.prompts.size(); ++p) {
    for (int64_t i = 0; i < q.n; ++i) {
      job->choices.push_back(std::make_unique<Job::Choice>(tok, q.skip_special_tokens, q.stop));
    }
  }
  {
    const std::lock_guard<std::mutex> lock(jobs_m);
    jobs.insert(job);
  }
  const uint64_t base_seed = q.seed ? *q.seed : random_seed();
  size_t submitted = 0;
  try {
    for (size_t k = 0; k < job->choices.size(); ++k) {
      Job::Choice* c = job->choices[k].get();
      Request sr;
      sr.prompt = q.prompts[k / static_cast<size_t>(q.n)];
      c->prompt_tokens = static_cast<int64_t>(sr.prompt.size());
      sr.settings = q.settings;
      sr.seed = base_seed + k % static_cast<size_t>(q.n);
      sr.priority = q.priority;
      Job* j = job.get();  // the job outlives its choices' callbacks: end_job waits for them
      sr.stream = [j, c](const StreamedToken& t) {
        TokenOut o;
        o.id = t.token;
        o.logprob = t.logprob;
        for (const auto& a : t.top) o.top.emplace_back(a.token, a.logprob);
        bool go_on = false;
        {
          const std::lock_guard<std::mutex> lock(j->m);
          go_on = c->text.push(o);
        }
        j->changed.notify_all();
        return go_on && !j->abandoned.load();
      };
      c->handle = scheduler->submit(std::move(sr), [this, j, c](const RequestResult& res) {
        {
          const std::lock_guard<std::mutex> lock(j->m);
          c->text.finish();
          c->done = true;
          c->finish = res.finish == "stopped" && !j->abandoned.load() ? "stop" : res.finish;
          c->error = res.error;
          c->ttft_s = res.time_to_first_token_s;
          c->total_s = res.total_s;
        }
        const auto n = static_cast<int64_t>(c->text.tokens().size());
        if (j->abandoned.load()) {
          metrics.cancelled();  // its client went away (or its time ran out)
        } else if (res.finish != "failed" && res.finish != "cancelled") {
          metrics.generation(c->prompt_tokens, n, res.time_to_first_token_s, res.total_s);
        }
        j->changed.notify_all();
      });
      ++submitted;
    }
  } catch (...) {
    // Some choices queued, one refused: the request is refused whole; those queued are cancelled
    // and waited for (their callbacks reference the job).
    job->abandoned = true;
    for (size_t k = 0; k < submitted; ++k) scheduler->cancel(job->choices[k]->handle);
    for (size_t k = 0; k < submitted; ++k) scheduler->wait(job->choices[k]->handle);
    {
      const std::lock_guard<std::mutex> lock(jobs_m);
      jobs.erase(job);
    }
    jobs_done.notify_all();
    throw;
  }
  return job;
}

void Server::Impl::end_job(const std::shared_ptr<Job>& job, int status) {
  // Every choice finished (or cancelled and waited for): no callback touches the job any more.
  for (const auto& c : job->choices) {
    if (!scheduler->wait_for(c->handle, 0)) scheduler->cancel(c->handle);
  }
  for (const auto& c : job->choices) scheduler->wait(c->handle);
  const Usage u = job->usage();
  std::string finishes;
  for (const auto& c : job->choices) finishes += (finishes.empty() ? "" : ",") + c->finish;
  double ttft = 0;
  for (const auto& c : job->choices) ttft = std::max(ttft, c->ttft_s);
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "request %s status=%d prompt_tokens=%lld completion_tokens=%lld finish=%s "
                "ttft_s=%.3f total_s=%.3f",
                job->id.c_str(), status, static_cast<long long>(u.prompt_tokens),
                static_cast<long long>(u.completion_tokens), finishes.c_str(), ttft,
                seconds_since(job->arrived));
  std::string line = buf;
  if (options.log_prompts) {
    for (const auto& t : job->request.prompt_texts) line += " prompt=" + json(t).dump();
  }
  log_line(line);
  {
    const std::lock_guard<std::mutex> lock(jobs_m);
    jobs.erase(job);
  }
  jobs_done.notify_all();
}

void Server::Impl::answer_whole(const std::shared_ptr<Job>& job, httplib::Response& res) {
  {
    std::unique_lock<std::mutex> lock(job->m);
    const auto deadline = job->arrived + std::chrono::duration<double>(options.request_timeout_s);
    if (!job->changed.wait_until(lock, deadline, [&] { return job->all_done(); })) {
      job->abandoned = true;
    }
  }
  if (job->abandoned) {
    for (const auto& c : job->choices) scheduler->cancel(c->handle);
  }
  for (const auto& c : job->choices) scheduler->wait(c->handle);
  std::vector<ChoiceResult> out;
  for (size_t k = 0; k < job->choices.size(); ++k) {
    const Job::Choice& c = *job->choices[k];
    if (c.finish == "failed") {
      set_error(res, ApiError(500, "generation failed: " + c.error, "", "server_error"));
      end_job(job, res.status);
      return;
    }
    if (c.finish == "cancelled" || job->abandoned) {
      set_error(res, ApiError(503,
                              draining ? "the server is shutting down; the request was cancelled"
                                       : "the request ran past the server's request_timeout_s",
                              "", "server_error"));
      end_job(job, res.status);
      return;
    }
    out.push_back(
        {static_cast<int64_t>(k), c.text.text(), finish_reason(c.finish), c.text.tokens()});
  }
  const json body = completion_body(job->request, job->id, job->created, out, job->usage(),
                                    served.tokenizer.get());
  res.status = 200;
  res.set_content(body.dump(), "application/json");
  end_job(job, 200);
}

// One round of a stream: whatever the choices have new, as chunks; false ends the stream (all
// choices reported, or the client gone).
bool Server::Impl::stream_step(const std::shared_ptr<Job>& job, httplib::DataSink& sink) {
  std::vector<json> chunks;
  bool finished = false, timed_out = false;
  {
    std::unique_lock<std::mutex> lock(job->m);
    const auto news = [&] {
      for (const auto& c : job->choices) {
        if ((c->done && !c->reported) || c->tokens_sent < c->text.tokens().size()) return true;
      }
      return false;
    };
    const bool any = job->changed.wait_for(lock, std::chrono::seconds(1), news);
    if (seconds_since(job->arrived) > options.request_timeout_s) timed_out = true;
    if (any) {
      for (size_t k = 0; k < job->choices.size(); ++k) {
        Job::Choice& c = *job->choices[k];
        const auto& toks = c.text.tokens();
        if (c.reported || (!c.done && c.tokens_sent == toks.size())) continue;
        const std::vector<TokenOut> fresh(toks.begin() + static_cast<long>(c.tokens_sent),
                                          toks.end());
        c.tokens_sent = toks.size();
        const std::string text = c.text.take_new_text();
        if (c.done && (c.finish == "failed" || c.finish == "cancelled")) {
          chunks.push_back(
              (c.finish == "failed"
                   ? ApiError(500, "generation failed: " + c.error, "", "server_error")
                   : ApiError(503,
                              "the request was cancelled (the server is shutting down, or "
                              "it ran past request_timeout_s)",
                              "", "server_error"))
                  .body());
          c.reported = true;
          continue;
        }
        const std::string reason = c.done ? finish_reason(c.finish) : "";
        if (!text.empty() || !fresh.empty() || !c.first_sent || c.done) {
          chunks.push_back(chunk_body(job->request, job->id, job->created, static_cast<int64_t>(k),
                                      text, fresh, reason, !c.first_sent, served.tokenizer.get()));
          c.first_sent = true;
        }
        if (c.done) c.reported = true;
      }
      finished = true;
      for (const auto& c : job->choices) finished = finished && c->reported;
    }
  }
  std::string out;
  for (const auto& c : chunks) out += "data: " + c.dump() + "\n\n";
  if (finished) {
    if (job->request.include_usage) {
      out += "data: " + usage_chunk_body(job->request, job->id, job->created, job->usage()).dump() +
             "\n\n";
    }
    out += "data: [DONE]\n\n";
  }
  // Nothing new for a second: an SSE comment, which tells a gone client from a waiting one.
  if (out.empty()) out = ": waiting\n\n";
  if (!sink.write(out.data(), out.size()) || timed_out) {
    job->abandoned = true;
    for (const auto& c : job->choices) scheduler->cancel(c->handle);
    return false;
  }
  if (finished) sink.done();
  return !finished;
}

void Server::Impl::generate(const httplib::Request& req, httplib::Response& res,
                            Endpoint endpoint) {
  if (draining) {
    set_error(res, ApiError(503, "the server is shutting down", "", "server_error"));
    res.set_header("Connection", "close");
    return;
  }
  std::shared_ptr<Job> job;
  try {
    ApiRequest r = read_request(req.body, endpoint, limits, served.tokenizer.get(), served.chat);
    job = start(std::move(r));
  } catch (const ApiError& e) {
    set_error(res, e);
    return;
  } catch (const QueueFull& e) {
    set_error(res, ApiError(429, e.what(), "", "rate_limit_error"));
    res.set_header("Retry-After", "1");
    return;
  } catch (const Error& e) {  // the scheduler's planning names the setting
    set_error(res, ApiError(400, e.what()));
    return;
  }
  if (!job->request.stream) {
    answer_whole(job, res);
    return;
  }
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, job](size_t, httplib::DataSink& sink) { return stream_step(job, sink); },
      [this, job](bool) { end_job(job, 200); });
}

void Server::Impl::routes() {
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (connections->get() > options.max_connections) {
      set_error(res, ApiError(503,
                              "too many connections (more than max_connections " +
                                  std::to_string(options.max_connections) + "); retry later",
                              "", "server_error"));
      res.set_header("Connection", "close");
      res.set_header("Retry-After", "1");
      return httplib::Server::HandlerResponse::Handled;
    }
    // Every refusal here comes before the body is read: the connection closes after it, so an
    // unread body is never taken for the next request.
    const auto refuse = [&](const ApiError& e) {
      set_error(res, e);
      res.set_header("Connection", "close");
      return httplib::Server::HandlerResponse::Handled;
    };
    if (!options.api_key.empty() && req.path != "/health") {
      const std::string got = req.get_header_value("Authorization");
      if (!keys_equal(got, "Bearer " + options.api_key)) {
        return refuse(ApiError(401, "a valid API key is needed: Authorization: Bearer KEY", "",
                               "invalid_request_error", "invalid_api_key"));
      }
    }
    // The body limit is checked against Content-Length: a chunked body would be read whole first,
    // and a compressed one inflated without bound, so both are refused.
    if (req.has_header("Transfer-Encoding")) {
      return refuse(ApiError(411,
                             "a request body must come with Content-Length (Transfer-Encoding "
                             "is not accepted)"));
    }
    const std::string encoding = req.get_header_value("Content-Encoding");
    if (!encoding.empty() && encoding != "identity") {
      return refuse(ApiError(
          415, "Content-Encoding '" + encoding + "' is not accepted; send the body uncompressed"));
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http.Post("/v1/completions", [this](const httplib::Request& q, httplib::Response& r) {
    generate(q, r, Endpoint::kCompletions);
  });
  http.Post("/v1/chat/completions", [this](const httplib::Request& q, httplib::Response& r) {
    generate(q, r, Endpoint::kChat);
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& r) {
    r.set_content(models_body(limits.model_id, unix_now(), limits.context_length).dump(),
                  "application/json");
  });
  http.Get("/health", [this](const httplib::Request&, httplib::Response& r) {
    r.status = draining ? 503 : 200;
    r.set_content(json({{"status", draining ? "draining" : "ok"}}).dump(), "application/json");
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& r) {
    r.set_content(metrics.text(scheduler->stats(), connections->get()),
                  "text/plain; version=0.0.4");
  });
  // Every other error (a bad request line, 404, 413 past max_body_bytes) as an error object.
  http.set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        std::string message = "HTTP " + std::to_string(res.status);
        if (res.status == 404) message = "no such endpoint: " + req.method + " " + req.path;
        if (res.status == 413) message = "the request body is larger than max_body_bytes";
        if (res.status == 400) message = "a malformed HTTP request";
        set_error(res, ApiError(res.status, message));
        return httplib::Server::HandlerResponse::Handled;
      }));
  http.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        set_error(res, ApiError(500, "internal error: " + what, "", "server_error"));
      });
  http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics.request(req.path, res.status);
    if (req.path == "/v1/completions" || req.path == "/v1/chat/completions") {
      if (res.status == 200) return;  // end_job wrote the generation's line
    }
    log_line("request " + req.method + " " + req.path + " status=" + std::to_string(res.status) +
             " from=" + req.remote_addr);
  });
}

Server::Server(ServedModel model, ServeOptions options, std::ostream& log)
    : impl_(std::make_unique<Impl>(std::move(model), std::move(options), log)) {
  Impl& d = *impl_;
  const ServeOptions& o = d.options;
  if (o.port < 0 || o.port > 65535) {
    throw Error("serve option port: expected 0 to 65535, found " + std::to_string(o.port));
  }
  const auto at_least = [](const char* key, double v, double lo) {
    if (!(v >= lo)) {
      throw Error(std::string("serve option ") + key + ": expected a number >= " + json(lo).dump() +
                  ", found " + json(v).dump());
    }
  };
  at_least("max_body_bytes", static_cast<double>(o.max_body_bytes), 1024);
  at_least("max_connections", static_cast<double>(o.max_connections), 1);
  at_least("default_max_tokens", static_cast<double>(o.default_max_tokens), 1);
  at_least("max_n", static_cast<double>(o.max_n), 1);
  at_least("drain_timeout_s", o.drain_timeout_s, 0);
  at_least("read_timeout_s", o.read_timeout_s, 0.1);
  at_least("write_timeout_s", o.write_timeout_s, 0.1);
  at_least("keep_alive_timeout_s", o.keep_alive_timeout_s, 0);
  at_least("request_timeout_s", o.request_timeout_s, 0.1);
  d.scheduler = std::make_unique<Scheduler>(d.served.model, d.served.run, d.served.scheduling);
  const json desc = d.served.model.describe();
  d.limits.model_id = o.model_id.empty() ? d.served.name : o.model_id;
  d.limits.context_length = desc.value("context_length", int64_t{0});
  d.limits.vocab_size = d.served.model.vocab_size();
  d.limits.default_max_tokens = o.default_max_tokens;
  d.limits.max_n = o.max_n;
  d.http.new_task_queue = [count = d.connections] { return new ConnectionThreads(count); };
  const auto whole = [](double s) { return static_cast<time_t>(s); };
  const auto micro = [](double s) { return static_cast<time_t>((s - std::floor(s)) * 1e6); };
  // httplib's own options (SO_REUSEADDR), and the socket kept: Debian's build listens with a
  // backlog of 5, which bind() raises (a burst of connections would meet resets otherwise).
  d.http.set_socket_options([&d](socket_t sock) {
    httplib::default_socket_options(sock);
    d.listen_fd = sock;
  });
  d.http.set_payload_max_length(static_cast<size_t>(o.max_body_bytes));
  d.http.set_read_timeout(whole(o.read_timeout_s), micro(o.read_timeout_s));
  d.http.set_write_timeout(whole(o.write_timeout_s), micro(o.write_timeout_s));
  d.http.set_keep_alive_timeout(whole(o.keep_alive_timeout_s));
  d.http.set_keep_alive_max_count(100);
  d.routes();
}

Server::~Server() { stop(); }

int Server::bind() {
  Impl& d = *impl_;
  if (d.options.port == 0) {
    d.port = d.http.bind_to_any_port(d.options.host);
    if (d.port < 0) throw Error("serve: cannot bind " + d.options.host + " to a free port");
  } else if (!d.http.bind_to_port(d.options.host, d.options.port)) {
    throw Error("serve: cannot bind " + d.options.host + ":" + std::to_string(d.options.port) +
                " (in use, or not an address of this machine)");
  } else {
    d.port = d.options.port;
  }
  // listen() again on a listening socket sets its backlog anew (capped by net.core.somaxconn).
  if (d.listen_fd >= 0 && ::listen(d.listen_fd, kListenBacklog) != 0) {
    throw Error("serve: cannot set the listen backlog of " + d.options.host + ":" +
                std::to_string(d.port) + ": " + std::strerror(errno));
  }
  return d.port;
}

void Server::run() { impl_->http.listen_after_bind(); }

void Server::stop() {
  Impl& d = *impl_;
  if (d.draining.exchange(true)) return;
  std::unique_lock<std::mutex> lock(d.jobs_m);
  const auto limit = std::chrono::duration<double>(d.options.drain_timeout_s);
  if (!d.jobs_done.wait_for(lock, limit, [&] { return d.jobs.empty(); })) {
    // Whatever still runs is cancelled: a stream ends with an error chunk and [DONE], a whole
    // answer with 503.
    d.log_line("drain: " + std::to_string(d.jobs.size()) +
               " request(s) still running at the drain deadline; cancelled");
    for (const auto& job : d.jobs) {
      job->abandoned = true;
      for (const auto& c : job->choices) d.scheduler->cancel(c->handle);
    }
    d.jobs_done.wait(lock, [&] { return d.jobs.empty(); });
  }
  lock.unlock();
  d.http.stop();
}

int Server::port() const { return impl_->port; }

Scheduler& Server::scheduler() { return *impl_->scheduler; }

}  // namespace gengraph::server

// `gengraph serve` (docs/serving.md#the-server): OpenAI's HTTP API over one model's Scheduler.
// POST /v1/completions and /v1/chat/completions (whole answers or server-sent events), GET
// /v1/models, /health and /metrics. HTTP is cpp-httplib's (Debian's libcpp-httplib-dev): one
// thread per connection, so a long stream never holds a worker that another request waits for.
#pragma once

#include <gengraph/gengraph.h>
#include <gengraph/serving.h>

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>

#include "server/openai_protocol.h"

namespace gengraph::server {

struct ServeOptions {
  std::string host = "127.0.0.1";    // loopback unless told otherwise
  int port = 8000;                   // 0: a free port, port() says which
  std::string model_id;              // the name clients send as `model`; the model's own by default
  std::string api_key;               // empty: no authentication; else `Authorization: Bearer KEY`
  int64_t max_body_bytes = 1 << 20;  // 413 past it
  int64_t max_connections = 512;     // 503 past it (connections being served at once)
  int64_t default_max_tokens = 256;  // max_tokens when a request gives none
  int64_t max_n = 16;                // choices per prompt (n)
  double drain_timeout_s = 30;       // on stop(): in-flight requests get this long to finish
  double read_timeout_s = 10;        // a client silent this long mid-request is dropped
  double write_timeout_s = 10;       // a client not reading this long is dropped (cancelled)
  double keep_alive_timeout_s = 5;   // an idle kept-alive connection is closed after this
  double request_timeout_s = 600;    // a generation running longer is cancelled
  bool log_prompts = false;          // the request log quotes prompts only when asked
};

// The served model's tokenizer (null for a preset: token-id prompts only), its chat template
// renderer (empty: /v1/chat/completions is refused naming why), the model's context.
struct ServedModel {
  Model model;
  RunOptions run;
  SchedulerOptions scheduling;
  std::shared_ptr<const Tokenizer> tokenizer;
  RenderChat chat;
  std::string name;  // the id /v1/models lists (ServeOptions::model_id over it)
};

class Server {
 public:
  // Builds the scheduler (its errors name the option) and checks the options; binds nothing yet.
  Server(ServedModel model, ServeOptions options, std::ostream& log);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port (an Error naming both when it cannot) and returns the port bound.
  int bind();
  // Serves until stop(), then returns once in-flight requests have drained (or were cancelled at
  // the drain deadline) and every connection has closed.
  void run();
  // From any thread (the signal watcher): stops accepting generation requests (503), lets those
  // in flight finish within drain_timeout_s, cancels the rest, then stops listening.
  void stop();

  int port() const;
  Scheduler& scheduler();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Whether two keys are equal, in time that depends on their lengths only.
bool keys_equal(const std::string& a, const std::string& b);

}  // namespace gengraph::server

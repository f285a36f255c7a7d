// gengraph serve's HTTP server in-process (server/http_server.h) on a random-weight preset, bound
// to 127.0.0.1 on a free port, with cpp-httplib's client: answers equal an Engine's tokens,
// streams, limits, the API key, a client gone mid-stream, and the drain. Every request is bounded.
#include <gengraph/gengraph.h>
#include <gengraph/serving.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "server/http_server.h"

namespace gengraph::server {
namespace {

using json = nlohmann::json;

// gpt2-tiny with room for long requests (a client that hangs up must find one still running).
Model tiny() {
  ModelOptions o;
  o.model_config = {{"n_positions", 2048}};
  return Model("gpt2-tiny", o);
}

class Running {
 public:
  explicit Running(ServeOptions o = {}, SchedulerOptions s = {}) {
    o.host = "127.0.0.1";
    o.port = 0;
    ServedModel m{tiny(), RunOptions{}, s, nullptr, {}, "gpt2-tiny"};
    server_ = std::make_unique<Server>(std::move(m), o, log_);
    port_ = server_->bind();
    thread_ = std::thread([this] { server_->run(); });
  }
  ~Running() { stop(); }
  void stop() {
    if (thread_.joinable()) {
      server_->stop();
      thread_.join();
    }
  }
  // A bound on a hung server, not on speed: under `ctest -j2` on two cores another test's
  // threads can slow the steps here forty-fold (a queued 1,500-token request took 50 s).
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(300, 0);
    return c;
  }
  Server& server() { return *server_; }
  std::string log() const { return log_.str(); }

 private:
  std::ostringstream log_;
  std::unique_ptr<Server> server_;
  int port_ = 0;
  std::thread thread_;
};

json post(const httplib::Client& c_in, const json& body, int* status = nullptr,
          const httplib::Headers& headers = {}) {
  auto& c = const_cast<httplib::Client&>(c_in);
  const auto res = c.Post("/v1/completions", headers, body.dump(), "application/json");
  EXPECT_TRUE(res) << "no answer";
  if (!res) return {};
  if (status != nullptr) *status = res->status;
  return json::parse(res->body);
}

std::vector<int64_t> ids_of(const json& choice) {
  return choice["token_ids"].get<std::vector<int64_t>>();
}

TEST(HttpServer, AnswersEqualAnEnginesTokensGreedyAndSeeded) {
  Running s;
  auto c = s.client();
  const std::vector<int64_t> prompt = {5, 9, 13, 2};
  int status = 0;
  const json greedy =
      post(c, {{"model", "gpt2-tiny"}, {"prompt", prompt}, {"max_tokens", 6}, {"temperature", 0}},
           &status);
  ASSERT_EQ(status, 200) << greedy.dump();
  const json sampled = post(c,
                            {{"model", "gpt2-tiny"},
                             {"prompt", prompt},
                             {"max_tokens", 6},
                             {"temperature", 0.9},
                             {"top_p", 0.95},
                             {"seed", 21},
                             {"n", 2}},
                            &status);
  ASSERT_EQ(status, 200) << sampled.dump();

  Engine e(tiny(), RunOptions{"eager", {{"cache", "paged"}}});
  const Generation g = e.generate({prompt}, {{"max_new_tokens", 6}, {"do_sample", false}});
  EXPECT_EQ(ids_of(greedy["choices"][0]), g.outputs[0][0].tokens);
  EXPECT_EQ(greedy["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(greedy["usage"]["completion_tokens"], g.outputs[0][0].tokens.size());
  for (int i = 0; i < 2; ++i) {  // choice i samples with seed + i
    e.manual_seed(21 + i);
    const Generation gs = e.generate({prompt}, {{"max_new_tokens", 6},
                                                {"do_sample", true},
                                                {"temperature", 0.9},
                                                {"top_p", 0.95},
                                                {"top_k", 0}});
    EXPECT_EQ(ids_of(sampled["choices"][i]), gs.outputs[0][0].tokens) << "choice " << i;
  }
}

TEST(HttpServer, StreamsChunksThatAddUpToTheWholeAnswer) {
  Running s;
  auto c = s.client();
  const json body = {
      {"model", "gpt2-tiny"}, {"prompt", {3, 4, 5}}, {"max_tokens", 5}, {"temperature", 0}};
  const json whole = post(c, body);
  json streamed = body;
  streamed["stream"] = true;
  streamed["stream_options"] = {{"include_usage", true}};
  const auto res = c.Post("/v1/completions", streamed.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_NE(res->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  std::vector<int64_t> ids;
  std::string finish;
  json usage;
  bool done = false;
  std::istringstream lines(res->body);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("data: ", 0) != 0) continue;
    ASSERT_FALSE(done) << "data after [DONE]";
    if (line == "data: [DONE]") {
      done = true;
      continue;
    }
    const json chunk = json::parse(line.substr(6));
    if (chunk.contains("usage")) {
      usage = chunk["usage"];
      continue;
    }
    for (int64_t id : ids_of(chunk["choices"][0])) ids.push_back(id);
    if (!chunk["choices"][0]["finish_reason"].is_null())
      finish = chunk["choices"][0]["finish_reason"];
  }
  EXPECT_TRUE(done);
  EXPECT_EQ(ids, ids_of(whole["choices"][0]));
  EXPECT_EQ(finish, whole["choices"][0]["finish_reason"]);
  EXPECT_EQ(usage, whole["usage"]);
}

TEST(HttpServer, LimitsAnswerWithOpenAIErrors) {
  ServeOptions o;
  o.api_key = "sekret";
  o.max_body_bytes = 2048;
  Running s(o);
  auto c = s.client();
  const json body = {{"model", "gpt2-tiny"}, {"prompt", {3}}, {"max_tokens", 2}};
  int status = 0;
  json e = post(c, body, &status);
  EXPECT_EQ(status, 401);
  EXPECT_EQ(e["error"]["code"], "invalid_api_key");
  e = post(c, body, &status, {{"Authorization", "Bearer wrong"}});
  EXPECT_EQ(status, 401);
  post(c, body, &status, {{"Authorization", "Bearer sekret"}});
  EXPECT_EQ(status, 200);
  const auto health = c.Get("/health");  // open without the key
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  json big = body;
  big["user"] = std::string(4096, 'x');
  e = post(c, big, &status, {{"Authorization", "Bearer sekret"}});
  EXPECT_EQ(status, 413);
  EXPECT_TRUE(e["error"].is_object());
  const auto missing = c.Get("/v1/nothing", {{"Authorization", "Bearer sekret"}});
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_TRUE(json::parse(missing->body)["error"].is_object());
}

TEST(HttpServer, AFullQueueAnswers429WithRetryAfter) {
  SchedulerOptions sched;
  sched.max_running = 1;
  sched.max_queue = 1;
  Running s({}, sched);
  // Eight long requests at once: one runs, one waits, the others find the queue full.
  std::mutex m;
  std::vector<httplib::Result> answers;
  std::vector<std::thread> clients;
  for (int i = 0; i < 8; ++i) {
    clients.emplace_back([&] {
      auto c = s.client();
      auto res = c.Post("/v1/completions",
                        json({{"model", "gpt2-tiny"},
                              {"prompt", {3}},
                              {"max_tokens", 1500},
                              {"temperature", 0},
                              {"gengraph", {{"min_new_tokens", 1500}}}})
                            .dump(),
                        "application/json");
      const std::lock_guard<std::mutex> lock(m);
      answers.push_back(std::move(res));
    });
  }
  for (auto& c : clients) c.join();
  int ok = 0, refused = 0;
  for (const auto& res : answers) {
    ASSERT_TRUE(res);
    if (res->status == 200) {
      ++ok;
      EXPECT_EQ(json::parse(res->body)["usage"]["completion_tokens"], 1500);
    } else {
      ++refused;
      EXPECT_EQ(res->status, 429) << res->body;
      EXPECT_EQ(res->get_header_value("Retry-After"), "1");
      EXPECT_EQ(json::parse(res->body)["error"]["type"], "rate_limit_error");
    }
  }
  EXPECT_GE(ok, 1);
  EXPECT_GE(refused, 1) << "eight requests at once never filled a queue of one";
}

TEST(HttpServer, AClientGoneMidStreamIsCancelledAndItsBlocksFreed) {
  Running s;
  {
    auto client = s.client();
    int chunks = 0;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = json({{"model", "gpt2-tiny"},
                     {"prompt", {3, 4}},
                     {"max_tokens", 1900},
                     {"temperature", 0},
                     {"stream", true},
                     {"gengraph", {{"min_new_tokens", 1900}}}})
                   .dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      return ++chunks < 3;  // read two pieces, then hang up
    };
    client.send(req);
    EXPECT_GE(chunks, 3);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  json stats;
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    stats = s.server().scheduler().stats();
  } while ((stats["running"] != 0 || stats["blocks"]["in_use"] != 0) &&
           std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(stats["running"], 0) << stats.dump();
  EXPECT_EQ(stats["blocks"]["in_use"], 0) << stats.dump();
  EXPECT_LT(stats["tokens"].get<int64_t>(), 1900) << "the request ran to its end";
}

TEST(HttpServer, StopDrainsTheRequestsInFlight) {
  // The drain's deadline well past the request's time, however slow the host is made by the tests
  // beside this one (at 30 s, the default, the request was once cancelled under `ctest -j2`).
  ServeOptions o;
  o.drain_timeout_s = 300;
  Running s(o);
  json answer;
  std::thread in_flight([&] {
    auto c = s.client();
    answer = post(c, {{"model", "gpt2-tiny"},
                      {"prompt", {3}},
                      {"max_tokens", 1500},
                      {"temperature", 0},
                      {"gengraph", {{"min_new_tokens", 1500}}}});
  });
  // Stopped only once the request runs, so that the drain has something to wait for.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (s.server().scheduler().stats()["running"] == 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(s.server().scheduler().stats()["running"], 1);
  s.stop();  // returns once drained and closed
  in_flight.join();
  ASSERT_TRUE(answer.contains("usage")) << answer.dump();
  EXPECT_EQ(answer["usage"]["completion_tokens"], 1500);
  EXPECT_NE(s.log().find("completion_tokens=1500"), std::string::npos) << s.log();
}

}  // namespace
}  // namespace gengraph::server

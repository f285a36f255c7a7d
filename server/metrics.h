// The server's counters and histograms, written in Prometheus' text exposition format for
// GET /metrics (docs/serving.md#metrics). Thread-safe: request threads record, the scrape reads.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace gengraph::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // "<name>_bucket{le=...} n" lines (cumulative), _sum and _count.
  std::string text(const std::string& name) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, the last one +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();
  // One answered request: its endpoint ("/v1/completions"), HTTP status.
  void request(const std::string& endpoint, int status);
  // A finished generation (one choice): tokens in and out and its times in seconds.
  void generation(int64_t prompt_tokens, int64_t output_tokens, double ttft_s, double total_s);
  void cancelled();  // a choice cancelled because its client went away
  // The exposition text; `scheduler` is Scheduler::stats(), `connections` the open connections.
  std::string text(const nlohmann::json& scheduler, int64_t connections) const;

 private:
  mutable std::mutex m_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  uint64_t prompt_tokens_ = 0, output_tokens_ = 0, generations_ = 0, cancelled_ = 0;
  Histogram ttft_, tpot_, duration_;
};

}  // namespace gengraph::server

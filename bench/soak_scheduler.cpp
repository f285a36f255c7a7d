// The scheduler's soak: many requests through one gengraph::Scheduler, submitted from several
// threads with mixed settings (greedy, seeded sampling, penalties, EOS sets, stop sequences),
// some cancelled and some stopped by their streams, over a pool small enough to preempt, with
// prefix sharing on. Resident memory and the blocks in use are recorded as requests finish: memory
// must be flat once the pool and the caches are warm, and no block may stay in use at the end.
//   gengraph_soak_scheduler [REQUESTS=10000] [CSV=soak_scheduler.csv]
// Writes CSV rows "generation,seconds,rss_bytes,blocks_in_use,blocks_cached,preemptions" every 100
// finished requests (the column names tools/plot_soak.py reads); scripts/soak_scheduler.sh plots
// and judges them. Exit 1 when a block is left in use or a request fails.
#include <gengraph/serving.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/soak_common.h"

using gengraph::bench::rss_bytes;

int main(int argc, char** argv) {
  const int64_t total = argc > 1 ? std::stoll(argv[1]) : 10000;
  const std::string csv = argc > 2 ? argv[2] : "soak_scheduler.csv";
  std::ofstream out(csv);
  if (!out) {
    std::fprintf(stderr, "error: cannot write the soak's CSV '%s': %s\n", csv.c_str(),
                 std::strerror(errno));
    return 1;
  }
  out << "generation,seconds,rss_bytes,blocks_in_use,blocks_cached,preemptions\n";
  gengraph::ModelOptions mo;
  mo.weights_seed = 1;
  const gengraph::Model model("preset:llama-tiny", mo);
  gengraph::SchedulerOptions so;
  so.block_size = 8;
  so.kv_blocks = 96;  // 768 positions for up to 16 requests of up to ~110: preemption happens
  so.max_running = 16;
  so.prefill_chunk = 32;
  so.max_step_tokens = 96;
  so.max_queue = 256;
  gengraph::Scheduler scheduler(model, {}, so);

  const std::vector<int64_t> system = {11, 12, 13, 14, 15, 16, 17, 18, 19, 20,
                                       21, 22, 23, 24, 25, 26, 27, 28, 29, 30};  // a shared prefix
  std::atomic<int64_t> submitted{0}, finished{0}, failed{0}, tokens{0};
  std::mutex csv_mutex;
  const auto t0 = std::chrono::steady_clock::now();
  const auto record = [&](int64_t done) {
    if (done % 100 != 0) return;
    const nlohmann::json s = scheduler.stats();
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::lock_guard<std::mutex> lock(csv_mutex);
    out << done << "," << secs << "," << rss_bytes() << "," << s["blocks"]["in_use"] << ","
        << s["blocks"]["cached"] << "," << s["preemptions"] << "\n"
        << std::flush;
  };
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<uint64_t>(t) + 1);
      const auto pick = [&](int64_t lo, int64_t hi) {
        return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
      };
      std::vector<gengraph::RequestHandle> mine;
      while (true) {
        const int64_t n = submitted.fetch_add(1);
        if (n >= total) break;
        gengraph::Request r;
        if (pick(0, 1)) r.prompt = system;
        for (int64_t i = pick(1, 40); i > 0; --i) r.prompt.push_back(pick(3, 1023));
        r.settings = {{"max_new_tokens", pick(1, 48)}};
        switch (n % 4) {
          case 1:
            r.settings["do_sample"] = true;
            r.settings["top_p"] = 0.9;
            break;
          case 2:
            r.settings["repetition_penalty"] = 1.3;
            r.settings["eos_token_id"] = {pick(3, 1023), pick(3, 1023), pick(3, 1023)};
            break;
          case 3:
            r.settings["stop_sequences"] = {{pick(3, 1023)}};
            break;
          default:
            break;
        }
        r.seed = static_cast<uint64_t>(n);
        if (n % 17 == 0) {  // a stream that stops its request after two tokens
          auto seen = std::make_shared<int>(0);
          r.stream = [seen](const gengraph::StreamedToken&) { return ++*seen < 2; };
        }
        gengraph::RequestHandle h;
        for (;;) {
          try {
            h = scheduler.submit(r);
            break;
          } catch (const gengraph::Error&) {  // the queue is full: wait for room
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
          }
        }
        if (n % 23 == 0) scheduler.cancel(h);
        mine.push_back(h);
        if (mine.size() >= 32) {
          for (const auto& m : mine) {
            const gengraph::RequestResult res = scheduler.wait(m);
            if (res.finish == "failed") ++failed;
            tokens += static_cast<int64_t>(res.sequence.tokens.size());
            record(++finished);
          }
          mine.clear();
        }
      }
      for (const auto& m : mine) {
        const gengraph::RequestResult res = scheduler.wait(m);
        if (res.finish == "failed") ++failed;
        tokens += static_cast<int64_t>(res.sequence.tokens.size());
        record(++finished);
      }
    });
  }
  for (auto& th : threads) th.join();
  scheduler.drain();
  const nlohmann::json s = scheduler.stats();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "%lld requests, %lld tokens in %.1f s; %lld preemptions, %lld prefix hits; blocks in "
      "use at the end %lld, peak %lld of %lld; final RSS %.1f MB; %lld failed\n",
      static_cast<long long>(finished.load()), static_cast<long long>(tokens.load()), secs,
      s["preemptions"].get<long long>(), s["prefix_hits"].get<long long>(),
      s["blocks"]["in_use"].get<long long>(), s["blocks"]["peak_in_use"].get<long long>(),
      s["blocks"]["total"].get<long long>(), static_cast<double>(rss_bytes()) / 1e6,
      static_cast<long long>(failed.load()));
  return s["blocks"]["in_use"].get<int64_t>() == 0 && failed == 0 ? 0 : 1;
}

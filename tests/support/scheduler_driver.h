// Driving the scheduler's core (serving/batch_scheduler.h) step by step in tests, so that each
// request arrives on a chosen step: the scheduler's own tests and the backends that join it.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "serving/batch_scheduler.h"

namespace gengraph::testing {

// A request for the core, added before step `arrival`.
struct ScheduledRequest {
  std::vector<int64_t> prompt;
  nlohmann::json settings;
  uint64_t seed = 0;
  int64_t priority = 0;
  int64_t arrival = 0;
};

// Random requests over `vocab` tokens, as the batch invariance tests draw them: prompts that share
// one of a few prefixes (so that whole blocks and
// parts of blocks match), mixed settings, arrivals spread over the steps.
inline std::vector<ScheduledRequest> random_requests(int64_t count, uint64_t seed, int64_t vocab) {
  std::mt19937_64 rng(seed);
  const auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  std::vector<std::vector<int64_t>> prefixes = {{}};
  for (int64_t len : {9, 23, 40}) {
    std::vector<int64_t> p;
    for (int64_t i = 0; i < len; ++i) p.push_back(pick(3, vocab - 1));
    prefixes.push_back(p);
  }
  std::vector<ScheduledRequest> out;
  int64_t step = 0;
  for (int64_t i = 0; i < count; ++i) {
    ScheduledRequest s;
    s.prompt = prefixes[static_cast<size_t>(pick(0, 3))];
    // Some prompts extend a longer shared prefix only part of the way into a block.
    const int64_t tail = pick(1, 30);
    for (int64_t j = 0; j < tail; ++j) s.prompt.push_back(pick(3, vocab - 1));
    nlohmann::json g = {{"max_new_tokens", pick(1, 24)}, {"output_scores", true}};
    if (pick(0, 1)) {
      g["do_sample"] = true;
      g["temperature"] = std::vector<double>{0.7, 1.0, 1.3}[static_cast<size_t>(pick(0, 2))];
      g["top_k"] = std::vector<int64_t>{0, 20, 50}[static_cast<size_t>(pick(0, 2))];
      if (pick(0, 1)) g["top_p"] = 0.9;
    }
    if (pick(0, 9) < 3) g["repetition_penalty"] = 1.2;
    if (pick(0, 9) < 2) g["min_new_tokens"] = 2;
    if (pick(0, 9) < 4) {  // an EOS set wide enough to end some requests early
      std::vector<int64_t> eos;
      for (int k = 0; k < 30; ++k) eos.push_back(pick(3, vocab - 1));
      g["eos_token_id"] = eos;
    }
    if (pick(0, 9) < 3) g["stop_sequences"] = {{pick(3, vocab - 1)}, {pick(3, 40), pick(3, 40)}};
    s.settings = g;
    s.seed = static_cast<uint64_t>(pick(0, 1 << 30));
    s.priority = pick(0, 3);
    step += pick(0, 3);
    s.arrival = step;
    out.push_back(std::move(s));
  }
  return out;
}

// `count` deterministic requests over `vocab` tokens: prompts of 3 to 2 + `lengths` tokens (every
// fourth behind `prefix`), 4 to 16 new tokens with their scores, every third sampled (top-k 20),
// each with its own seed, two arriving per step: decode steps beside prefill chunks.
inline std::vector<ScheduledRequest> small_requests(int64_t count, int64_t vocab, int64_t lengths,
                                                    const std::vector<int64_t>& prefix = {}) {
  std::vector<ScheduledRequest> out;
  for (int64_t i = 0; i < count; ++i) {
    ScheduledRequest r;
    if (i % 4 == 1) r.prompt = prefix;
    const int64_t len = 3 + (i * 7) % lengths;
    for (int64_t j = 0; j < len; ++j) r.prompt.push_back(1 + (i * 31 + j * 17) % (vocab - 1));
    r.settings = {{"max_new_tokens", 4 + (i * 5) % 13}, {"output_scores", true}};
    if (i % 3 == 2) {
      r.settings["do_sample"] = true;
      r.settings["top_k"] = 20;
    }
    r.seed = 100 + static_cast<uint64_t>(i);
    r.arrival = i / 2;
    out.push_back(std::move(r));
  }
  return out;
}

// Runs `requests` (in arrival order) through `core` until every one has finished: their results,
// in the requests' order. A core that has not finished after `max_steps` steps, or that leaves a
// block in use, is a test failure.
inline std::vector<CoreResult> drive_core(BatchScheduler& core,
                                          const std::vector<ScheduledRequest>& requests,
                                          int64_t max_steps = 200000) {
  std::map<int64_t, size_t> index;  // the core's id -> the request's
  std::vector<CoreResult> out(requests.size());
  size_t next = 0, finished = 0;
  for (int64_t step = 0; next < requests.size() || !core.idle(); ++step) {
    while (next < requests.size() && requests[next].arrival <= step) {
      const ScheduledRequest& r = requests[next];
      index[core.add(core.make_request(r.prompt, r.settings, nullptr, r.seed, r.priority, {}))] =
          next++;
    }
    for (CoreResult& r : core.step()) {
      out[index.at(r.id)] = std::move(r);
      ++finished;
    }
    if (step >= max_steps) {
      ADD_FAILURE() << "the scheduler has not finished after " << max_steps << " steps";
      break;
    }
  }
  EXPECT_EQ(finished, requests.size());
  EXPECT_EQ(core.pool().in_use(), 0) << "blocks left in use";
  return out;
}

// drive_core's sequences, in the requests' order, each request checked to have ended by EOS, a
// stop sequence or its length.
inline std::vector<Sequence> drive_sequences(BatchScheduler& core,
                                             const std::vector<ScheduledRequest>& requests,
                                             int64_t max_steps = 100000) {
  std::vector<Sequence> out;
  for (CoreResult& r : drive_core(core, requests, max_steps)) {
    EXPECT_TRUE(r.finish == "stop" || r.finish == "length") << r.finish << " " << r.error;
    out.push_back(std::move(r.sequence));
  }
  return out;
}

}  // namespace gengraph::testing

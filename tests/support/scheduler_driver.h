// Driving the scheduler's core (serving/batch_scheduler.h) step by step in tests, so that each
// request arrives on a chosen step: the scheduler's own tests and the backends that join it.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
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

}  // namespace gengraph::testing

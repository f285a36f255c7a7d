// The scheduler's blocks and its public API: the block pool's counts and prefix index, the
// Scheduler from several threads, streams, cancelling, and the requests it refuses.
#include <gengraph/ext/scheduling.h>
#include <gengraph/gengraph.h>
#include <gengraph/serving.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "framework/cache/block_pool.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using testing::error_of;
using ::testing::HasSubstr;
using Json = nlohmann::json;

TEST(BlockPool, CountsReferencesAndFreesEveryBlock) {
  BlockPool pool(4, 2);
  auto a = pool.allocate(), b = pool.allocate();
  ASSERT_TRUE(a && b);
  EXPECT_EQ(pool.in_use(), 2);
  pool.retain(*a);
  pool.release(*a);
  EXPECT_EQ(pool.in_use(), 2);
  pool.release(*a);
  pool.release(*b);
  EXPECT_EQ(pool.in_use(), 0);
  EXPECT_EQ(pool.available(), 4);
  EXPECT_THAT(error_of([&] { pool.release(*b); }), HasSubstr("is not held"));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(pool.allocate());
  EXPECT_FALSE(pool.allocate());
}

TEST(BlockPool, SharesPublishedPrefixesWholeAndInPart) {
  BlockPool pool(8, 4);
  const std::vector<int64_t> first = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<int64_t> blocks;
  for (int i = 0; i < 3; ++i) blocks.push_back(*pool.allocate());
  pool.publish(first, 0, blocks[0]);
  pool.publish(first, 1, blocks[1]);
  // A second sequence with the same first block and three of the second's four tokens.
  const std::vector<int64_t> second = {1, 2, 3, 4, 5, 6, 7, 99, 100};
  BlockPool::Match m = pool.match(second, static_cast<int64_t>(second.size()) - 1);
  ASSERT_EQ(m.blocks.size(), 1u);
  EXPECT_EQ(m.blocks[0], blocks[0]);
  EXPECT_EQ(m.partial_block, blocks[1]);
  EXPECT_EQ(m.partial, 3);
  EXPECT_EQ(m.tokens(), 7);
  EXPECT_EQ(pool.cached_prefix(first), 8);
  // Another first token: nothing shared (the chain starts at the first block).
  EXPECT_EQ(pool.match({9, 2, 3, 4, 5}, 4).tokens(), 0);
  for (int64_t b : m.blocks) pool.release(b);
  for (int64_t b : blocks) pool.release(b);
  EXPECT_EQ(pool.in_use(), 0);
  EXPECT_EQ(pool.cached(), 2);  // the published two stay, reusable
}

TEST(BlockPool, EvictingABlockTakesItsDescendantsOutOfTheIndex) {
  BlockPool pool(2, 2);
  const std::vector<int64_t> t = {1, 2, 3, 4};
  const int64_t a = *pool.allocate(), b = *pool.allocate();
  pool.publish(t, 0, a);
  pool.publish(t, 1, b);
  pool.release(b);  // b released first: the LRU's head is b, then a
  pool.release(a);
  // Reusing a's number must not lead a lookup to b through it.
  const int64_t c = *pool.allocate();  // b (least recently released) is evicted and reused
  EXPECT_EQ(c, b);
  const int64_t d = *pool.allocate();  // then a
  EXPECT_EQ(d, a);
  EXPECT_EQ(pool.match(t, 4).tokens(), 0);
  pool.release(c);
  pool.release(d);
  EXPECT_EQ(pool.in_use(), 0);
}

TEST(SchedulingPolicies, AreRegisteredByName) {
  const auto names = PolicyRegistry::instance().names();
  for (const char* n : {"fcfs", "shortest_prompt_first", "priority", "longest_prefix_first"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  }
  EXPECT_THAT(error_of([] { PolicyRegistry::instance().get("fcsf"); }),
              HasSubstr("did you mean 'fcfs'"));
}

class SchedulerApi : public ::testing::Test {
 protected:
  SchedulerApi() : model_("preset:llama-tiny", options()) {}
  static ModelOptions options() {
    ModelOptions o;
    o.weights_seed = 5;
    return o;
  }
  Model model_;
};

TEST_F(SchedulerApi, ManyThreadsSubmitAndEveryResultEqualsItsSoloRun) {
  SchedulerOptions so;
  so.kv_blocks = 200;
  so.block_size = 8;
  Scheduler scheduler(model_, {}, so);
  RunOptions ro;
  ro.backend_options = {{"cache", "paged"}};
  Engine solo(model_, ro);
  constexpr int kThreads = 4, kEach = 6;
  std::vector<std::vector<Request>> asked(kThreads);
  std::vector<std::vector<RequestResult>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kEach; ++i) {
      Request r;
      for (int k = 0; k < 5 + 3 * i; ++k) r.prompt.push_back(10 + 7 * t + k);
      r.settings = {{"max_new_tokens", 4 + i}, {"do_sample", i % 2 == 1}, {"output_scores", true}};
      r.seed = static_cast<uint64_t>(100 * t + i);
      asked[t].push_back(r);
    }
    threads.emplace_back([&, t] {
      std::vector<RequestHandle> handles;
      for (const Request& r : asked[t]) handles.push_back(scheduler.submit(r));
      for (const RequestHandle& h : handles) got[t].push_back(scheduler.wait(h));
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kEach; ++i) {
      const Request& r = asked[t][i];
      solo.manual_seed(r.seed);
      const Sequence alone = solo.generate({r.prompt}, r.settings).outputs[0][0];
      EXPECT_EQ(got[t][i].sequence.tokens, alone.tokens) << t << "/" << i;
      EXPECT_EQ(got[t][i].sequence.token_scores, alone.token_scores) << t << "/" << i;
      EXPECT_EQ(got[t][i].finish, "length");
    }
  }
  scheduler.drain();
  const Json stats = scheduler.stats();
  EXPECT_EQ(stats["blocks"]["in_use"], 0) << stats.dump();
  EXPECT_EQ(stats["finished"], kThreads * kEach);
}

TEST_F(SchedulerApi, StreamsCancelsAndStopsFreeTheirBlocks) {
  SchedulerOptions so;
  so.kv_blocks = 64;
  Scheduler scheduler(model_, {}, so);
  // A stream sees each token in order; returning false stops the request.
  std::vector<int64_t> streamed;
  Request r;
  r.prompt = {5, 6, 7};
  r.settings = {{"max_new_tokens", 20}};
  r.stream = [&](const StreamedToken& t) {
    streamed.push_back(t.token);
    return streamed.size() < 3;
  };
  const RequestResult stopped = scheduler.wait(scheduler.submit(r));
  EXPECT_EQ(stopped.finish, "stopped");
  EXPECT_EQ(stopped.sequence.tokens, streamed);
  EXPECT_EQ(streamed.size(), 3u);
  // A request cancelled while it runs ends "cancelled" at a step boundary.
  std::atomic<int> seen{0};
  Request slow;
  slow.prompt = {1, 2, 3, 4};
  slow.settings = {{"max_new_tokens", 200}};
  slow.stream = [&](const StreamedToken&) {
    ++seen;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return true;
  };
  const RequestHandle h = scheduler.submit(slow);
  while (seen < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(scheduler.cancel(h));
  const RequestResult cancelled = scheduler.wait(h);
  EXPECT_EQ(cancelled.finish, "cancelled");
  EXPECT_LT(cancelled.sequence.tokens.size(), 200u);
  EXPECT_FALSE(scheduler.cancel(h));
  scheduler.drain();
  EXPECT_EQ(scheduler.stats()["blocks"]["in_use"], 0);
}

TEST_F(SchedulerApi, AStreamThatThrowsFailsItsOwnRequestOnly) {
  SchedulerOptions so;
  so.kv_blocks = 64;
  Scheduler scheduler(model_, {}, so);
  Request bad;
  bad.prompt = {5, 6, 7};
  bad.settings = {{"max_new_tokens", 8}};
  bad.stream = [](const StreamedToken&) -> bool {
    throw std::runtime_error("the client went away");
  };
  Request good;
  good.prompt = {5, 6, 8};
  good.settings = {{"max_new_tokens", 8}};
  const RequestHandle b = scheduler.submit(bad), g = scheduler.submit(good);
  const RequestResult failed = scheduler.wait(b);
  EXPECT_EQ(failed.finish, "failed");
  EXPECT_THAT(failed.error, HasSubstr("its stream threw: the client went away"));
  const RequestResult fine = scheduler.wait(g);
  EXPECT_EQ(fine.finish, "length");
  EXPECT_EQ(fine.sequence.tokens.size(), 8u);
  scheduler.drain();
  EXPECT_EQ(scheduler.stats()["blocks"]["in_use"], 0);
}

TEST_F(SchedulerApi, AStreamReadsCountersThatIncludeItsOwnRequest) {
  // A stream's first token arrives inside the step that made it: the counters it reads then (what
  // a server's /metrics answers a client holding that token) already count the request.
  SchedulerOptions so;
  so.kv_blocks = 64;
  Scheduler scheduler(model_, {}, so);
  std::vector<Json> seen;
  Request r;
  r.prompt = {5, 6, 7};
  r.settings = {{"max_new_tokens", 3}};
  r.stream = [&](const StreamedToken&) {
    seen.push_back(scheduler.stats());
    return true;
  };
  scheduler.wait(scheduler.submit(r));
  ASSERT_EQ(seen.size(), 3u);
  for (const Json& s : seen) {
    EXPECT_GT(s["blocks"]["in_use"].get<int64_t>(), 0) << s.dump();
    EXPECT_EQ(s["running"], 1) << s.dump();
  }
  scheduler.drain();
  EXPECT_EQ(scheduler.stats()["blocks"]["in_use"], 0);
}

TEST_F(SchedulerApi, RefusesWhatABatchedRunCannotDoByName) {
  SchedulerOptions so;
  so.kv_blocks = 4;
  so.block_size = 8;  // 32 positions
  so.max_queue = 2;
  Scheduler scheduler(model_, {}, so);
  Request r;
  r.prompt = {1, 2, 3};
  r.settings = {{"max_new_tokens", 40}};
  EXPECT_THAT(error_of([&] { scheduler.submit(r); }),
              HasSubstr("need 43 positions, more than the KV pool holds (4 blocks of 8 = 32)"));
  r.settings = {{"max_new_tokens", 4}, {"num_beams", 2}};
  EXPECT_THAT(error_of([&] { scheduler.submit(r); }), HasSubstr("num_beams 2: beam search"));
  r.settings = {{"max_new_tokens", 4}, {"prompt_lookup_num_tokens", 3}};
  EXPECT_THAT(error_of([&] { scheduler.submit(r); }), HasSubstr("speculative decoding"));
  r.settings = {{"max_new_tokens", 4}, {"temperatur", 0.5}};
  EXPECT_THAT(error_of([&] { scheduler.submit(r); }), HasSubstr("temperatur"));
  // A refused request leaves the others alone.
  r.settings = {{"max_new_tokens", 4}};
  EXPECT_EQ(scheduler.wait(scheduler.submit(r)).finish, "length");
  EXPECT_THAT(error_of([&] {
                Scheduler bad(model_, RunOptions{"trace", {}}, so);
              }),
              HasSubstr("backend 'trace' cannot run a ragged batch"));
  SchedulerOptions unknown = so;
  unknown.policy = "lifo";
  EXPECT_THAT(error_of([&] { Scheduler bad(model_, {}, unknown); }),
              HasSubstr("unknown scheduling policy 'lifo'"));
}

TEST_F(SchedulerApi, BatchInvarianceRefusesAPathThatCannotHonourIt) {
  ModelOptions o = options();
  o.fused = false;
  const Model unfused("preset:llama-tiny", o);
  EXPECT_THAT(error_of([&] { Scheduler s(unfused); }),
              HasSubstr("batch_invariant: the model is loaded unfused (fused: false)"));
  SchedulerOptions so;
  so.batch_invariant = false;
  Scheduler s(unfused, {}, so);
  Request r;
  r.prompt = {1, 2, 3};
  r.settings = {{"max_new_tokens", 3}};
  EXPECT_EQ(s.wait(s.submit(r)).sequence.tokens.size(), 3u);
}

TEST_F(SchedulerApi, BadOptionsAreRefusedNamingTheOption) {
  const auto refused = [&](void (*set)(SchedulerOptions&)) {
    SchedulerOptions so;
    set(so);
    return error_of([&] { Scheduler s(model_, {}, so); });
  };
  EXPECT_THAT(refused([](SchedulerOptions& o) { o.block_size = 0; }),
              HasSubstr("scheduler option block_size: expected an integer >= 1, found 0"));
  EXPECT_THAT(refused([](SchedulerOptions& o) { o.kv_memory_mb = -1; }),
              HasSubstr("kv_blocks / kv_memory_mb: expected kv_blocks >= 1, or 0 with"));
  EXPECT_THAT(refused([](SchedulerOptions& o) { o.kv_memory_mb = 1e-6; }),
              HasSubstr("less than one block"));
  EXPECT_THAT(refused([](SchedulerOptions& o) { o.max_step_tokens = 0; }),
              HasSubstr("scheduler option max_step_tokens: expected an integer >= 1, found 0"));
  EXPECT_THAT(refused([](SchedulerOptions& o) { o.prefill_chunk = -3; }),
              HasSubstr("scheduler option prefill_chunk: expected an integer >= 1, found -3"));
  EXPECT_THAT(refused([](SchedulerOptions& o) { o.max_queue = 0; }),
              HasSubstr("scheduler option max_queue: expected an integer >= 1, found 0"));
}

TEST_F(SchedulerApi, AFullQueueRefusesWithItsNumbers) {
  SchedulerOptions so;
  so.kv_blocks = 16;
  so.block_size = 4;
  so.max_running = 1;
  so.max_queue = 2;
  Scheduler scheduler(model_, {}, so);
  std::atomic<bool> hold{true};
  Request blocker;
  blocker.prompt = {1, 2};
  blocker.settings = {{"max_new_tokens", 30}};
  blocker.stream = [&](const StreamedToken&) {
    while (hold) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return true;
  };
  std::vector<RequestHandle> handles = {scheduler.submit(blocker)};
  Request r;
  r.prompt = {3, 4};
  r.settings = {{"max_new_tokens", 2}};
  std::string refused;
  for (int i = 0; i < 5 && refused.empty(); ++i) {
    try {
      handles.push_back(scheduler.submit(r));
    } catch (const Error& e) {
      refused = e.what();
    }
  }
  hold = false;
  EXPECT_THAT(refused, HasSubstr("the queue is full"));
  EXPECT_THAT(refused, HasSubstr("max_queue 2"));
  for (const auto& h : handles) scheduler.wait(h);
  EXPECT_EQ(scheduler.stats()["blocks"]["in_use"], 0);
}

}  // namespace
}  // namespace gengraph

// Experiments under load (`load:`, `serving:`): the section's reading and its errors, validation
// of the shipped config, and a tiny replay through all three systems end to end.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "experiments/experiment/experiment_config.h"
#include "experiments/experiment/load_runner.h"
#include "experiments/experiment/runner.h"
#include "experiments/results/compare.h"
#include "experiments/results/table.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using testing::error_of;
using ::testing::HasSubstr;

const std::string kModel = "model: {preset: llama-tiny, seed: 1}\nbackends: [eager]\n";

ExperimentConfig parse(const std::string& rest) {
  return parse_experiment(kModel + rest, "l.yaml");
}

TEST(LoadConfig, ReadsTheSectionAndItsDefaults) {
  const auto c = parse(R"(serving: {policy: priority, block_size: 8, prefix_sharing: false}
load:
  rate: [1, 2.5, all_at_once]
  requests: 20
  prompt_lengths: {min: 4, max: 9}
  output_lengths: 7
  shared_prefix: {length: 32}
  systems: [scheduler, {name: scheduler, label: sharing, serving: {prefix_sharing: true}},
            one_at_a_time]
)");
  ASSERT_TRUE(c.load);
  const LoadSpec& l = *c.load;
  EXPECT_EQ(l.arrival, "poisson");
  EXPECT_EQ(l.rates, (std::vector<double>{1, 2.5, kAllAtOnce}));
  EXPECT_EQ(l.requests, 20);
  EXPECT_EQ(l.prompt_lengths.min, 4);
  EXPECT_EQ(l.prompt_lengths.max, 9);
  EXPECT_TRUE(l.has_output_lengths);
  EXPECT_EQ(l.output_lengths.min, 7);
  EXPECT_EQ(l.output_lengths.max, 7);
  EXPECT_EQ(l.shared_prefix_length, 32);
  EXPECT_EQ(l.shared_prefix_fraction, 1.0);
  ASSERT_EQ(l.systems.size(), 3u);
  EXPECT_EQ(l.systems[0].serving.policy, "priority");
  EXPECT_FALSE(l.systems[0].serving.prefix_sharing);
  EXPECT_EQ(l.systems[1].label, "sharing");
  EXPECT_TRUE(l.systems[1].serving.prefix_sharing);  // its own key over the experiment's
  EXPECT_EQ(l.systems[1].serving.block_size, 8);     // the others as the experiment's
  EXPECT_EQ(l.systems[2].kind, "one_at_a_time");
  // all_at_once: one saturation point; systems default to all three.
  const auto s = parse("load: {arrival: all_at_once, requests: 3}\n");
  EXPECT_EQ(s.load->rates, (std::vector<double>{kAllAtOnce}));
  ASSERT_EQ(s.load->systems.size(), 3u);
  EXPECT_EQ(s.load->systems[2].kind, "static_batching");
}

TEST(LoadConfig, ErrorsNameTheKeyAndItsLine) {
  EXPECT_THAT(error_of([] { parse("load:\n  rate: 1\n  rat: 2\n"); }),
              HasSubstr("l.yaml:5:3: unknown key 'load.rat'"));
  const std::string rate = error_of([] { parse("load:\n  rate: [1, -2]\n"); });
  EXPECT_THAT(rate, HasSubstr("l.yaml:4:13: load.rate[1]: expected a rate in requests per second"));
  EXPECT_THAT(rate, HasSubstr("found '-2'"));
  EXPECT_THAT(error_of([] { parse("load: {rate: fast}\n"); }), HasSubstr("load.rate: expected"));
  const std::string arrival = error_of([] { parse("load:\n  arrival: poison\n  rate: 1\n"); });
  EXPECT_THAT(arrival,
              HasSubstr("l.yaml:4:12: load.arrival: expected one of poisson, all_at_once"));
  EXPECT_THAT(arrival, HasSubstr("did you mean 'poisson'"));
  EXPECT_THAT(error_of([] { parse("load: {arrival: poisson}\n"); }),
              HasSubstr("load.rate: expected the arrival rate"));
  EXPECT_THAT(error_of([] { parse("load: {rate: 1, systems: [schedular]}\n"); }),
              HasSubstr("unknown system 'schedular'"));
  EXPECT_THAT(error_of([] { parse("load: {rate: 1, prompt_lengths: {min: 9, max: 4}}\n"); }),
              HasSubstr("load.prompt_lengths.max: expected an integer >= min (9)"));
  EXPECT_THAT(error_of([] { parse("load: {rate: 1, shared_prefix: {length: 8, fraction: 2}}\n"); }),
              HasSubstr("load.shared_prefix.fraction: expected the fraction"));
  EXPECT_THAT(error_of([] { parse("serving: {policy: lifo}\nload: {rate: 1}\n"); }),
              HasSubstr("serving.policy: expected one of"));
  EXPECT_THAT(error_of([] { parse("serving: {max_runing: 3}\nload: {rate: 1}\n"); }),
              HasSubstr("unknown key 'serving.max_runing'"));
  EXPECT_THAT(
      error_of([] {
        parse("load: {rate: 1, systems: [{name: one_at_a_time, serving: {block_size: 4}}]}\n");
      }),
      HasSubstr("configures the scheduler system only"));
  // What a load experiment has no place for, refused by name.
  EXPECT_THAT(error_of([] { parse("inputs: {prompts: [[1]]}\nload: {rate: 1}\n"); }),
              HasSubstr("inputs: expected no inputs: with load:"));
  EXPECT_THAT(error_of([] { parse("sweep: {load.requests: [1, 2]}\nload: {rate: 1}\n"); }),
              HasSubstr("sweep: expected no sweep: with load:"));
  EXPECT_THAT(error_of([] { parse("serving: {policy: fcfs}\ninputs: {prompts: [[1]]}\n"); }),
              HasSubstr("serving: expected no serving: without a load: or serve: section"));
}

TEST(LoadConfig, ValidationPlansTheLongestRequestBeforeAnyLoad) {
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(testing::cli({"validate", std::string(GENGRAPH_SOURCE_DIR) + "/configs/load_cpu.yaml"}),
            0);
  EXPECT_THAT(::testing::internal::GetCapturedStdout(), HasSubstr("valid"));
  // llama-tiny holds 256 positions: a prefix of 200, prompts to 50 and 16 new tokens do not fit.
  const auto c = parse(
      "load: {rate: 1, shared_prefix: {length: 200}, prompt_lengths: 50, output_lengths: 16}\n");
  EXPECT_THAT(error_of([&] { check_experiment(c); }), HasSubstr("load: checked as its longest"));
  const auto beams = parse("generation: {num_beams: 2}\nload: {rate: 1}\n");
  EXPECT_THAT(error_of([&] { check_experiment(beams); }),
              HasSubstr("generation.num_beams: expected 1 with load:"));
}

TEST(LoadConfig, Quantiles) {
  EXPECT_EQ(quantile({}, 0.5), 0);
  EXPECT_EQ(quantile({3, 1, 2}, 0.5), 2);
  EXPECT_DOUBLE_EQ(quantile({0, 10}, 0.9), 9);
  EXPECT_EQ(quantile({0, 10}, 1.0), 10);
}

// Twelve requests at one rate through every system: each completes with exactly its own output
// length, every row has its metrics, the scheduler gives back every block, and the table and a
// comparison of the file with itself print.
TEST(LoadRun, ReplaysTheRequestsThroughEverySystem) {
  testing::TempDir dir;
  const auto config = dir / "load.yaml";
  testing::write_file(config, kModel + R"(name: tiny_load
serving: {block_size: 4, kv_blocks: 256, max_running: 8}
load:
  rate: [200]
  requests: 12
  prompt_lengths: {min: 3, max: 12}
  output_lengths: {min: 2, max: 6}
  shared_prefix: {length: 8, fraction: 0.5}
  static_batch_max: 4
  time_limit_s: 60
run: {warmup: 1}
)");
  const auto out = dir / "load.json";
  ASSERT_EQ(testing::run_quietly(config, out), 0);
  const auto doc = nlohmann::json::parse(testing::read_file(out));
  EXPECT_EQ(doc["kind"], "load");
  EXPECT_EQ(doc["load"]["shared_prefix"]["requests"], 6);
  EXPECT_TRUE(doc["environment"].contains("hostname"));
  EXPECT_TRUE(doc["environment"].contains("cpu"));
  const int64_t asked = doc["load"]["output_tokens_asked"];
  ASSERT_EQ(doc["runs"].size(), 3u);
  for (const auto& row : doc["runs"]) {
    SCOPED_TRACE(row.dump());
    EXPECT_EQ(row["rate"], 200.0);
    EXPECT_EQ(row["completed"], 12);
    EXPECT_EQ(row["output_tokens"], asked);
    for (const char* key : {"wall_s", "requests_per_s", "output_tokens_per_s"})
      EXPECT_GT(row[key].get<double>(), 0) << key;
    for (const char* key : {"p50", "p90", "p99", "mean"}) {
      EXPECT_GT(row["ttft_ms"][key].get<double>(), 0) << key;
      EXPECT_GT(row["tpot_ms"][key].get<double>(), 0) << key;
    }
    EXPECT_TRUE(row["queue_ms"].contains("p99"));
  }
  EXPECT_EQ(doc["runs"][0]["system"], "scheduler");
  EXPECT_EQ(doc["runs"][1]["system"], "one_at_a_time");
  EXPECT_EQ(doc["runs"][2]["system"], "static_batching");
  const auto& sched = doc["runs"][0];
  EXPECT_EQ(sched["kv_blocks"]["in_use_at_end"], 0);
  EXPECT_GT(sched["kv_blocks"]["peak_in_use"].get<int64_t>(), 0);
  EXPECT_EQ(sched["kv_blocks"]["total"], 256);
  EXPECT_TRUE(sched.contains("prefix_hits"));
  EXPECT_TRUE(sched.contains("preemptions"));
  const std::string table = format_table(doc, out.string());
  for (const char* s : {"one_at_a_time", "static_batching", "TTFT p50", "TPOT p50", "200/s"})
    EXPECT_THAT(table, HasSubstr(s));
  const std::string cmp = compare_results(doc, "a.json", doc, "b.json", "total_ms");
  EXPECT_THAT(cmp, HasSubstr("static_batching"));
  EXPECT_THAT(cmp, HasSubstr("1.00x"));
}

// Past time_limit_s every request still waiting or running is cancelled and counted, on every
// system; the scheduler still gives back every block; a load file beside another kind is refused
// by compare.
TEST(LoadRun, TheTimeLimitCancelsAndCountsWhatIsLeft) {
  testing::TempDir dir;
  const auto config = dir / "limit.yaml";
  testing::write_file(config, kModel + R"(serving: {block_size: 4, kv_blocks: 512, max_running: 4}
load: {arrival: all_at_once, requests: 200, prompt_lengths: 4, output_lengths: 64,
       static_batch_max: 4, time_limit_s: 0.05}
run: {warmup: 0}
)");
  const auto out = dir / "limit.json";
  ASSERT_EQ(testing::run_quietly(config, out), 0);
  const auto doc = nlohmann::json::parse(testing::read_file(out));
  ASSERT_EQ(doc["runs"].size(), 3u);
  for (const auto& row : doc["runs"]) {
    SCOPED_TRACE(row.dump());
    EXPECT_EQ(row["completed"].get<int64_t>() + row["cancelled"].get<int64_t>() +
                  row["failed"].get<int64_t>(),
              200);
    EXPECT_GT(row["cancelled"].get<int64_t>(), 0);
    EXPECT_EQ(row["failed"], 0);
  }
  EXPECT_EQ(doc["runs"][0]["kv_blocks"]["in_use_at_end"], 0);
  const nlohmann::json other = {{"schema_version", 1}, {"runs", nlohmann::json::array()}};
  EXPECT_THAT(error_of([&] { compare_results(doc, "l.json", other, "o.json", "total_ms"); }),
              HasSubstr("'l.json' holds results under load (kind: load) and 'o.json' does not"));
}

// A server's file (serve: with serving:, docs/serving.md#the-server) goes through the same reader.
TEST(ServeConfig, ReadsTheServerAndItsSchedulerAndRefusesWhatHasNoPlace) {
  const auto c = parse(
      "serving: {max_queue: 7, batch_invariant: false}\n"
      "serve: {port: 0, max_connections: 9, drain_timeout_s: 2.5, api_key_env: K}\n");
  ASSERT_TRUE(c.serve);
  EXPECT_EQ(c.serve->options.port, 0);
  EXPECT_EQ(c.serve->options.max_connections, 9);
  EXPECT_EQ(c.serve->options.drain_timeout_s, 2.5);
  EXPECT_EQ(c.serve->options.host, "127.0.0.1");  // loopback unless told
  EXPECT_EQ(c.serve->api_key_env, "K");
  EXPECT_EQ(c.serve->serving.max_queue, 7);
  EXPECT_FALSE(c.serve->serving.batch_invariant);
  EXPECT_THAT(error_of([] { parse("serve: {api_key: s3cret}\n"); }),
              HasSubstr("serve.api_key: expected no key in the file"));
  EXPECT_THAT(error_of([] { parse("serve: {port: 70000}\n"); }), HasSubstr("serve.port"));
  EXPECT_THAT(error_of([] { parse("serve: {prot: 1}\n"); }), HasSubstr("prot"));
  EXPECT_THAT(error_of([] { parse("serve: {read_timeout_s: 0}\n"); }),
              HasSubstr("serve.read_timeout_s"));
  EXPECT_THAT(error_of([] { parse("serve: {}\ninputs: {prompts: [[1]]}\n"); }),
              HasSubstr("inputs: expected no inputs: with serve:"));
  EXPECT_THAT(error_of([] { parse("serve: {}\nload: {rate: 1}\n"); }), HasSubstr("serve"));
}

}  // namespace
}  // namespace gengraph

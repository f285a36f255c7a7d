#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "experiments/results/compare.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using ::testing::HasSubstr;

using testing::cli;

// The exact null distribution of the Mann-Whitney U, against brute force: every way to place n1
// x-values among n1 + n2 ranks, U counting the (x, y) pairs with the x above the y.
TEST(Compare, MannWhitneyDistributionMatchesEnumeration) {
  for (const auto& [n1, n2] :
       std::vector<std::pair<size_t, size_t>>{{3, 4}, {5, 5}, {6, 2}, {1, 7}}) {
    const size_t n = n1 + n2;
    std::vector<double> counts(n1 * n2 + 1, 0.0);
    double total = 0;
    for (unsigned mask = 0; mask < (1u << n); ++mask) {
      if (static_cast<size_t>(__builtin_popcount(mask)) != n1) continue;
      size_t u = 0, ys_below = 0;
      for (size_t r = 0; r < n; ++r) {
        if (mask & (1u << r))
          u += ys_below;
        else
          ++ys_below;
      }
      counts[u] += 1;
      total += 1;
    }
    const auto cdf = mann_whitney_cdf(n1, n2);
    ASSERT_EQ(cdf.size(), counts.size());
    double acc = 0;
    for (size_t u = 0; u < counts.size(); ++u) {
      acc += counts[u];
      EXPECT_NEAR(cdf[u], acc / total, 1e-12) << n1 << "x" << n2 << " u=" << u;
    }
  }
}

// A run whose every repeat took half as long is twice as fast; with 5 repeats a side the interval
// is [r(3), r(23)] of the 25 ratios (coverage 1 - 2 * 4/252, the largest k reaching 95%).
TEST(Compare, HalvedTimesAreTwiceAsFastWithTheMosesInterval) {
  const std::vector<double> before = {10, 11, 12.5, 13, 14.2};
  std::vector<double> after;
  for (double x : before) after.push_back(x / 2);
  const Speedup s = speedup(before, after);
  ASSERT_TRUE(s.has_interval);
  EXPECT_NEAR(s.estimate, 2.0, 1e-12);
  std::vector<double> r;
  for (double x : before) {
    for (double y : after) r.push_back(x / y);
  }
  std::sort(r.begin(), r.end());
  EXPECT_NEAR(s.low, r[2], 1e-12);
  EXPECT_NEAR(s.high, r[22], 1e-12);
  EXPECT_NEAR(s.confidence, 1 - 8.0 / 252, 1e-12);
  EXPECT_GT(s.low, 1.0);
  // The other way round it is half as fast.
  const Speedup back = speedup(after, before);
  EXPECT_NEAR(back.estimate, 0.5, 1e-12);
  EXPECT_LT(back.high, 1.0);
}

TEST(Compare, OverlappingRunsGiveAnIntervalAroundOne) {
  const Speedup s = speedup({10, 12, 14, 16, 18}, {11, 13, 15, 17, 19});
  ASSERT_TRUE(s.has_interval);
  EXPECT_LT(s.low, 1.0);
  EXPECT_GT(s.high, 1.0);
  EXPECT_LT(s.estimate, 1.0);  // after is a little slower
}

TEST(Compare, OneRepeatGivesTheRatioWithoutAnInterval) {
  const Speedup s = speedup({12}, {4, 6});
  EXPECT_FALSE(s.has_interval);
  EXPECT_DOUBLE_EQ(s.estimate, 12.0 / 5.0);
}

// Above 100 repeats a side the interval's rank comes from the normal approximation of U.
TEST(Compare, ManyRepeatsUseTheNormalApproximation) {
  std::vector<double> before, after;
  for (int i = 0; i < 120; ++i) {
    before.push_back(100 + (i * 37) % 23);
    after.push_back(90 + (i * 17) % 19);
  }
  const Speedup s = speedup(before, after);
  ASSERT_TRUE(s.has_interval);
  EXPECT_NEAR(s.confidence, 0.95, 0.005);
  EXPECT_LT(s.low, s.estimate);
  EXPECT_GT(s.high, s.estimate);
  EXPECT_GT(s.low, 1.0);
}

TEST(Compare, CliComparesRowsAndListsWhatDiffers) {
  testing::TempDir dir;
  testing::write_file(dir / "e.yaml", R"(model: {preset: gpt2-tiny}
backends: [eager, {name: eager, label: static, options: {cache: static}}]
inputs: {prompts: [[1, 2, 3]]}
generation: {max_new_tokens: 3}
run: {warmup: 0, repeats: 3}
)");
  ASSERT_EQ(
      cli({"run", (dir / "e.yaml").string(), "--output", (dir / "a.json").string(), "--quiet"}), 0);
  // The eager row's timings are set, so that the verdict does not hang on this machine's noise:
  // AFTER took half the time (twice the tokens/s) in each of 5 repeats.
  nlohmann::json a = nlohmann::json::parse(testing::read_file(dir / "a.json"));
  const std::vector<double> ms = {10, 11, 12.5, 13, 14.2};
  auto set = [&](nlohmann::json& doc, double factor) {
    auto& t = doc["runs"][0]["timings"];
    std::vector<double> total, tps;
    for (double x : ms) {
      total.push_back(x * factor);
      tps.push_back(3000 / (x * factor));
    }
    // Whole summaries: a median, min or max that disagreed with the values would be refused.
    t["total_ms"] = summary(total);
    t["tokens_per_second"] = summary(tps);
  };
  set(a, 1.0);
  testing::write_file(dir / "a.json", a.dump());
  nlohmann::json b = a;
  set(b, 0.5);
  b["runs"].erase(1);
  b["model"]["source"] = "preset:somewhere-else";
  testing::write_file(dir / "b.json", b.dump());
  for (const std::string metric : {"total_ms", "tokens_per_second"}) {
    ::testing::internal::CaptureStdout();
    ASSERT_EQ(
        cli({"compare", (dir / "a.json").string(), (dir / "b.json").string(), "--metric", metric}),
        0);
    const std::string out = ::testing::internal::GetCapturedStdout();
    EXPECT_THAT(out,
                ::testing::ContainsRegex("\neager +[^\n]*2\\.00x \\[1\\.[^\n]* 96\\.8% +faster\n"))
        << out;
    EXPECT_THAT(out, ::testing::ContainsRegex("\nstatic +only in before\n")) << out;
    EXPECT_THAT(out, HasSubstr("settings that differ"));
    EXPECT_THAT(out, HasSubstr("model.source: preset:gpt2-tiny  ->  preset:somewhere-else"));
  }
  // --output writes the same comparison as JSON.
  ::testing::internal::CaptureStdout();
  ASSERT_EQ(cli({"compare", (dir / "a.json").string(), (dir / "b.json").string(), "--output",
                 (dir / "c" / "cmp.json").string()}),
            0);
  ::testing::internal::GetCapturedStdout();
  const auto cmp = nlohmann::json::parse(testing::read_file(dir / "c" / "cmp.json"));
  EXPECT_EQ(cmp["schema"], "gengraph-compare-1");
  EXPECT_EQ(cmp["metric"], "total_ms");
  ASSERT_EQ(cmp["points"].size(), 1u);
  const auto& rows = cmp["points"][0]["rows"];
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["label"], "eager");
  EXPECT_EQ(rows[0]["verdict"], "faster");
  EXPECT_NEAR(rows[0]["speedup"].get<double>(), 2.0, 1e-12);
  EXPECT_NEAR(rows[0]["confidence"].get<double>(), 1 - 8.0 / 252, 1e-12);
  EXPECT_EQ(rows[1]["status"], "only in before");
  EXPECT_EQ(cmp["settings_that_differ"][0]["key"], "model.source");
  // Bad input: not a results file (exit 1, naming it), an unknown metric and a missing file
  // argument (usage errors, exit 2).
  testing::write_file(dir / "x.json", "{\"hello\": 1}");
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli({"compare", (dir / "a.json").string(), (dir / "x.json").string()}), 1);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("x.json' is not a gengraph results file"));
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli({"compare", (dir / "a.json").string(), (dir / "b.json").string(), "--output",
                 dir.path().string()}),
            1);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("is a folder"));
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(
      cli({"compare", (dir / "a.json").string(), (dir / "b.json").string(), "--metric", "speed"}),
      2);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("--metric: expected one of total_ms"));
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli({"compare", (dir / "a.json").string()}), 2);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("compare: expected 2 argument(s), found 1"));
  // A row without the metric is reported as such; one whose timings are not an object is refused,
  // naming the key, not read out of bounds.
  b["runs"][0]["timings"].erase("total_ms");
  testing::write_file(dir / "c.json", b.dump());
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(cli({"compare", (dir / "a.json").string(), (dir / "c.json").string()}), 0);
  EXPECT_THAT(::testing::internal::GetCapturedStdout(), HasSubstr("no total_ms on the after side"));
  b["runs"][0]["timings"] = "broken";
  testing::write_file(dir / "c.json", b.dump());
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli({"compare", (dir / "a.json").string(), (dir / "c.json").string()}), 1);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("c.json' is not a gengraph results file: key 'runs[0].timings': expected "
                        "an object, found the string \"broken\""));
}

}  // namespace
}  // namespace gengraph

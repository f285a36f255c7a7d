// The progress display (framework/util/progress.h): its text, its updates by mode, and the
// decoding loop's position it shows. Under a real pseudo-terminal: tests/python/test_progress.py.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <sstream>
#include <thread>

#include "framework/util/progress.h"

namespace gengraph {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct FastPeriod {
  FastPeriod() { setenv("GENGRAPH_PROGRESS_PERIOD_MS", "5", 1); }
  ~FastPeriod() { unsetenv("GENGRAPH_PROGRESS_PERIOD_MS"); }
};

TEST(Progress, DurationsReadAsTheyShow) {
  EXPECT_EQ(progress_duration(0.04), "0.0s");
  EXPECT_EQ(progress_duration(12.34), "12.3s");
  EXPECT_EQ(progress_duration(65), "1m05s");
  EXPECT_EQ(progress_duration(7300), "2h02m");
  EXPECT_EQ(progress_duration(59.97), "1m00s");
  EXPECT_EQ(progress_duration(3599.9), "1h00m");
}

TEST(Progress, TextHasStepsElapsedAndAnEstimate) {
  std::ostringstream out;
  Progress p(
      "timed repeats", 4, 0, [] { return std::string("token 3/8"); }, ProgressMode::kOff, &out);
  EXPECT_THAT(p.text(), ::testing::MatchesRegex("timed repeats: 0/4, [0-9.]+s \\(token 3/8\\)"));
  p.advance(2);
  EXPECT_THAT(p.text(), HasSubstr("2/4, "));
  EXPECT_THAT(p.text(), HasSubstr(" left (token 3/8)"));
  Progress usual("building", 0, 3600, {}, ProgressMode::kOff, &out);
  EXPECT_THAT(usual.text(), HasSubstr("about 1h00m left"));
  Progress over("building", 0, 1e-9, {}, ProgressMode::kOff, &out);
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_THAT(over.text(), HasSubstr("longer than the usual 0.0s"));
  p.finish();
  EXPECT_EQ(out.str(), "");  // off: nothing written
}

TEST(Progress, ATerminalRedrawsOneLineAndClearsIt) {
  FastPeriod fast;
  std::ostringstream out;
  {
    Progress p("work", 10, 0, {}, ProgressMode::kTerminal, &out);
    p.advance(3);
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
  }
  const std::string s = out.str();
  EXPECT_THAT(s, HasSubstr("\r\033[K[######..............] work: 3/10, "));
  EXPECT_THAT(s, Not(HasSubstr("\n")));
  EXPECT_EQ(s.substr(s.size() - 4), "\r\033[K");  // cleared at the end
}

TEST(Progress, LinesElsewhereAndNothingForShortWork) {
  FastPeriod fast;
  std::ostringstream out;
  {
    Progress p("work", 0, 0, {}, ProgressMode::kLines, &out);
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
  }
  EXPECT_THAT(out.str(), ::testing::StartsWith("work: "));
  EXPECT_THAT(out.str(), Not(HasSubstr("\r")));
  EXPECT_THAT(out.str(), Not(HasSubstr("\033")));
  unsetenv("GENGRAPH_PROGRESS_PERIOD_MS");  // the default period: 30 s for lines
  std::ostringstream quiet;
  { Progress p("work", 0, 0, {}, ProgressMode::kLines, &quiet); }
  EXPECT_EQ(quiet.str(), "");
}

TEST(Progress, AnInnerDisplayIsDrawnWhileItRuns) {
  FastPeriod fast;
  std::ostringstream outer_out, inner_out;
  Progress outer("outer", 0, 0, {}, ProgressMode::kLines, &outer_out);
  Progress inner("inner", 0, 0, {}, ProgressMode::kLines, &inner_out);
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  inner.finish();
  outer.finish();
  const auto lines = [](const std::string& s) { return std::count(s.begin(), s.end(), '\n'); };
  EXPECT_GE(lines(inner_out.str()), 2);
  EXPECT_LE(lines(outer_out.str()), 1);  // at most one drawn before the inner began
}

TEST(Progress, QuietTurnsItOffAndTellsTheTools) {
  unsetenv("GENGRAPH_PROGRESS");
  set_progress_quiet(true);
  EXPECT_EQ(progress_mode(), ProgressMode::kOff);
  EXPECT_STREQ(getenv("GENGRAPH_PROGRESS"), "0");
  set_progress_quiet(false);
  unsetenv("GENGRAPH_PROGRESS");
  EXPECT_NE(progress_mode(), ProgressMode::kOff);
}

TEST(Progress, TheLoopPositionSaysPrefillThenTokens) {
  loop_position().begin(512, 32);
  EXPECT_EQ(loop_position_text(), "prefill of 512 positions");
  loop_position().step.store(4);
  EXPECT_EQ(loop_position_text(), "token 5/32");
}

}  // namespace
}  // namespace gengraph

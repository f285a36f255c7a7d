// gengraph quality: quantized weights against float on the real model (skipped where it is not set
// up), and its flags' errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "experiments/results/quality.h"
#include "framework/model/known_models.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using ::testing::HasSubstr;

TEST(Quality, MeasuresEachFormatAgainstFloatOnTheRealModel) {
  const auto status = known_model_status("smollm2-135m");
  if (!status.ready)
    GTEST_SKIP() << "the real model is not set up here: " << status.unavailable_reason;
  testing::TempDir dir;
  testing::write_file(dir / "text.txt",
                      "The quick brown fox jumps over the lazy dog. It was a bright cold day in "
                      "April, and the clocks were striking thirteen. Call me Ishmael. Some years "
                      "ago, never mind how long precisely, having little or no money in my purse.");
  const auto out = dir / "q.json";
  ::testing::internal::CaptureStdout();
  ASSERT_EQ(testing::cli({"quality", "--model", "smollm2-135m", "--weights", "int8,bfloat16",
                          "--text-file", (dir / "text.txt").string(), "--windows", "2", "--window",
                          "16", "--text", "The capital of France is", "--new-tokens", "4",
                          "--output", out.string(), "--quiet"}),
            0);
  const std::string table = ::testing::internal::GetCapturedStdout();
  EXPECT_THAT(table, HasSubstr("int8"));
  const auto doc = nlohmann::json::parse(testing::read_file(out));
  ASSERT_EQ(doc["formats"].size(), 2u);
  const double base = doc["float"]["perplexity"].get<double>();
  EXPECT_TRUE(std::isfinite(base) && base > 1.0) << base;
  for (const auto& f : doc["formats"]) {
    const double ppl = f["perplexity"].get<double>();
    // Close to float's, not equal to it: the weights did change.
    EXPECT_NEAR(ppl / base, 1.0, 0.2) << f.dump();
    EXPECT_GT(f["kl_divergence"].get<double>(), 0.0) << f.dump();
    EXPECT_GE(f["top1_agreement"].get<double>(), 0.5) << f.dump();
    EXPECT_LE(f["top1_agreement"].get<double>(), 1.0) << f.dump();
    EXPECT_LE(f["greedy_common_prefix"].get<double>(), 4.0) << f.dump();
  }
}

TEST(Quality, FlagsAreChecked) {
  auto error_of_run = [](const std::vector<std::string>& args) {
    ::testing::internal::CaptureStderr();
    EXPECT_NE(testing::cli(args), 0);
    return ::testing::internal::GetCapturedStderr();
  };
  EXPECT_THAT(error_of_run({"quality"}), HasSubstr("quality: --model FOLDER|NAME is required"));
  EXPECT_THAT(error_of_run({"quality", "--model", "x", "--weights", "float"}),
              HasSubstr("--weights: float is the reference"));
  EXPECT_THAT(error_of_run({"quality", "--model", "x", "--weights", "int3"}),
              HasSubstr("--weights: expected float, int8, int4 or bfloat16, found 'int3'"));
  EXPECT_THAT(error_of_run({"quality", "--model", "x", "--windows", "0"}),
              HasSubstr("--windows: expected an integer from 1 to 256, found '0'"));
  EXPECT_THAT(error_of_run({"quality", "--model", "x", "--prompt", "1"}), HasSubstr("quality"));
}

// The formats' names: int4's head int8 unless +h4; --group-size is int4's (int8 stays per
// channel); int8gB / w8a8gB int8 in blocks of B, by activation blocks of B for w8a8gB.
TEST(Quality, FormatNamesAskForTheirFormats) {
  EXPECT_TRUE(quality_weight_format("int4", 64, true).head_int8());
  EXPECT_EQ(quality_weight_format("int4", 64, true).group_size, 64);
  EXPECT_FALSE(quality_weight_format("int4+h4", 32, true).head_int8());
  EXPECT_FALSE(quality_weight_format("w4a8+h4", 32, true).head_int8());
  EXPECT_TRUE(quality_weight_format("w4a8+h8", 32, true).head_int8());
  EXPECT_FALSE(quality_weight_format("int8", 64, true).int8_blocks());
  const WeightFormat g = quality_weight_format("int8g32", 64, true);
  EXPECT_EQ(g.describe(), "int8 (blocks of 32)");
  EXPECT_EQ(quality_weight_format("w8a8g64", 32, true).describe(),
            "int8 (blocks of 64) (int8 activations from 1 row, blocks of 64)");
  EXPECT_THAT(testing::error_of([] { quality_weight_format("int8g48", 32, true); }),
              ::testing::HasSubstr(
                  "--weights: int8g48 (group_size): expected 32, 64, 128 or 256, found 48"));
  EXPECT_THAT(testing::error_of([] { quality_weight_format("int8gx", 32, true); }),
              ::testing::HasSubstr("expected int8gB or w8a8gB"));
}

TEST(Quality, ATextTooShortForTheWindowsIsNamed) {
  const auto status = known_model_status("smollm2-135m");
  if (!status.ready)
    GTEST_SKIP() << "the real model is not set up here: " << status.unavailable_reason;
  testing::TempDir dir;
  testing::write_file(dir / "short.txt", "Too short.");
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(testing::cli({"quality", "--model", "smollm2-135m", "--text-file",
                          (dir / "short.txt").string(), "--output", (dir / "q.json").string()}),
            1);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("short.txt': 3 tokens, fewer than windows x window = 2048"));
  EXPECT_FALSE(std::filesystem::exists(dir / "q.json"));
}

}  // namespace
}  // namespace gengraph

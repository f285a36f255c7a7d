// The public facade's text in and out: encode, decode and generate_text on the real model, and
// the errors of a model without a tokenizer.
#include <gengraph/gengraph.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "framework/model/known_models.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using testing::error_of;
using ::testing::HasSubstr;

// The real model when the set-up made it (scripts/setup.sh), else the test is skipped naming why.
#define GENGRAPH_NEED_REAL_MODEL()                                                    \
  do {                                                                                \
    const auto status = known_model_status("smollm2-135m");                           \
    if (!status.ready) {                                                              \
      GTEST_SKIP() << "the real model smollm2-135m is not set up here ("              \
                   << (status.unavailable_reason.empty() ? "run scripts/setup.sh"     \
                                                         : status.unavailable_reason) \
                   << ")";                                                            \
    }                                                                                 \
  } while (0)

TEST(EngineText, TextInTextOutOnTheRealModel) {
  GENGRAPH_NEED_REAL_MODEL();
  Engine engine("smollm2-135m");
  const auto ids = engine.encode("The capital of France is");
  EXPECT_EQ(engine.decode(ids), "The capital of France is");
  // generate_text is generate() on encode()'s ids, with the tokens decoded.
  const Generation g = engine.generate_text({"The capital of France is"}, {{"max_new_tokens", 6}});
  const Generation ref = engine.generate({ids}, {{"max_new_tokens", 6}});
  ASSERT_EQ(g.outputs.size(), 1u);
  EXPECT_EQ(g.outputs[0][0].tokens, ref.outputs[0][0].tokens);
  EXPECT_EQ(g.outputs[0][0].text, engine.decode(ref.outputs[0][0].tokens));
  EXPECT_FALSE(g.outputs[0][0].text.empty());
  // Streamed text adds up to the decoded text, per prompt.
  std::map<int64_t, std::string> streamed;
  const Generation s = engine.generate_text(
      {"The capital of France is", "Once upon a time"}, {{"max_new_tokens", 8}},
      [&](int64_t input, int64_t sequence, const std::string& piece) {
        EXPECT_EQ(sequence, 0);
        streamed[input] += piece;
        return true;
      });
  ASSERT_EQ(s.outputs.size(), 2u);
  EXPECT_EQ(streamed[0], s.outputs[0][0].text);
  EXPECT_EQ(streamed[1], s.outputs[1][0].text);
}

TEST(EngineText, APresetHasNoTokenizer) {
  Engine engine("gpt2-tiny");
  EXPECT_THAT(error_of([&] { engine.encode("hello"); }),
              HasSubstr("model preset:gpt2-tiny has random weights and no tokenizer"));
  EXPECT_THAT(error_of([&] { engine.generate_text({"hello"}); }), HasSubstr("no tokenizer"));
}

TEST(EngineText, AFolderWithoutATokenizerIsNamed) {
  Engine engine(testing::fixtures_dir() + "/models/gpt2-a");
  EXPECT_THAT(error_of([&] {
                engine.decode({1, 2});
              }),
              HasSubstr("has no tokenizer: expected tokenizer.json or tokenizer.model in it"));
}

TEST(EngineText, AnUnknownOrMissingRealModelIsNamed) {
  testing::TempDir cache;
  testing::ScopedEnv env("GENGRAPH_CACHE", cache.path().string());
  EXPECT_THAT(error_of([&] { Engine engine("smollm2-135m"); }), HasSubstr("smollm2-135m"));
  EXPECT_THAT(error_of([&] { Engine engine("smollm2-135m"); }), HasSubstr("scripts/setup.sh"));
}

}  // namespace
}  // namespace gengraph

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "backends/register_builtin.h"
#include "framework/backend/backend_registry.h"
#include "framework/decoding/generator.h"
#include "framework/model/loader.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using testing::error_of;
using ::testing::HasSubstr;

std::shared_ptr<const CausalLM> tiny(uint64_t seed = 0) {
  ModelSource s;
  s.preset = "gpt2-tiny";
  s.seed = seed;
  return load_model(s).model;
}

std::unique_ptr<ForwardBackend> eager(std::shared_ptr<const CausalLM> m,
                                      const std::string& cache = "growing") {
  register_builtin_backends();
  return BackendRegistry::instance().create("eager", std::move(m),
                                            BackendOptions("eager", {{"cache", cache}}));
}

// Independent reference: no cache at all, the whole (unpadded) sequence re-run every step.
std::vector<int64_t> greedy_without_cache(const CausalLM& m, std::vector<int64_t> seq,
                                          int64_t steps, const std::vector<int64_t>& eos) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < steps; ++i) {
    const int64_t n = static_cast<int64_t>(seq.size());
    GrowingCache cache(m.config().num_layers);
    const auto ids = at::tensor(seq, at::kLong).unsqueeze(0);
    const auto logits = run_forward_step(m, cache, ids, at::arange(n, at::kLong).unsqueeze(0),
                                         at::arange(n, at::kLong), at::ones({1, n}, at::kBool));
    const int64_t next = logits.argmax(-1).item<int64_t>();
    out.push_back(next);
    seq.push_back(next);
    if (std::find(eos.begin(), eos.end(), next) != eos.end()) break;
  }
  return out;
}

TEST(Generator, LeftPaddedBatchEqualsEachPromptAlone) {
  const auto m = tiny(3);
  const std::vector<std::vector<int64_t>> prompts = {{5, 6, 7, 8, 9}, {10}, {11, 12, 13}};
  ResolvedSettings g;
  g.max_new_tokens = 9;
  for (const std::string cache : {"growing", "static"}) {
    auto b = eager(m, cache);
    const auto r = Generator(g).generate(*b, prompts);
    ASSERT_EQ(r.outputs.size(), 3u);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(r.outputs[i][0].tokens, greedy_without_cache(*m, prompts[i], 9, {}))
          << cache << " input " << i;
    }
  }
}

TEST(Generator, EosStopsARowAndTheOthersContinue) {
  const auto m = tiny(4);
  const std::vector<std::vector<int64_t>> prompts = {{5, 6, 7}, {100, 200}};
  ResolvedSettings g;
  g.max_new_tokens = 10;
  auto b = eager(m);
  const auto free_run = Generator(g).generate(*b, prompts);
  // Pick row 0's fourth token as EOS: row 0 must stop there, with the EOS included.
  const int64_t eos = free_run.outputs[0][0].tokens.at(3);
  g.eos_token_id = {eos};
  const auto r = Generator(g).generate(*b, prompts);
  const auto& row0 = r.outputs[0][0].tokens;
  const auto first =
      std::find(free_run.outputs[0][0].tokens.begin(), free_run.outputs[0][0].tokens.end(), eos);
  EXPECT_EQ(row0, std::vector<int64_t>(free_run.outputs[0][0].tokens.begin(), first + 1));
  EXPECT_EQ(r.outputs[1][0].tokens, greedy_without_cache(*m, prompts[1], 10, {eos}));
}

TEST(GeneratorErrors, TokenOutsideVocabulary) {
  auto b = eager(tiny());
  ResolvedSettings g;
  g.max_new_tokens = 2;
  EXPECT_THAT(error_of([&] {
                Generator(g).generate(*b, {{1, 2}, {3, 1024}});
              }),
              HasSubstr("input 1 token 1: id 1024 is outside the vocabulary [0, 1024)"));
}

TEST(GeneratorErrors, PromptLongerThanContext) {
  auto b = eager(tiny());
  ResolvedSettings g;
  g.max_new_tokens = 2;
  EXPECT_THAT(error_of([&] { Generator(g).generate(*b, {std::vector<int64_t>(300, 1)}); }),
              HasSubstr("the longest prompt has 300 tokens but the model's context is 256"));
  EXPECT_THAT(error_of([&] { Generator(g).generate(*b, {std::vector<int64_t>(255, 1)}); }),
              HasSubstr("exceeds the model's context of 256"));
}

TEST(GeneratorErrors, MaxLengthWithoutRoomAndBadSpecialTokens) {
  auto b = eager(tiny());
  ResolvedSettings g;
  g.max_length = 3;
  EXPECT_THAT(error_of([&] {
                Generator(g).generate(*b, {{1, 2, 3}});
              }),
              HasSubstr("'max_length' 3 leaves no room after the longest prompt (3 tokens"));
  ResolvedSettings e;
  e.eos_token_id = {5000};
  EXPECT_THAT(error_of([&] { Generator(e).generate(*b, {{1}}); }),
              HasSubstr("'eos_token_id': token id 5000 is outside the model's vocabulary"));
  EXPECT_THAT(error_of([&] {
                Generator(ResolvedSettings{}).generate(*b, {{1}, {}});
              }),
              HasSubstr("input 1: empty prompt"));
}

TEST(GeneratorErrors, InconsistentSearchSettingsAreRefusedNotIgnored) {
  ResolvedSettings g;
  g.num_beam_groups = 2;
  EXPECT_THAT(error_of([&] { Generator{g}; }),
              HasSubstr("'num_beam_groups' (2) needs num_beams > 1"));
  g.num_beams = 3;
  EXPECT_THAT(error_of([&] { Generator{g}; }), HasSubstr("must be divisible by 'num_beam_groups'"));
  g.num_beams = 4;
  g.do_sample = true;
  EXPECT_THAT(error_of([&] { Generator{g}; }),
              HasSubstr("diverse beam search ('num_beam_groups' > 1) cannot sample"));
  ResolvedSettings d;
  d.diversity_penalty = 1.0;
  EXPECT_THAT(error_of([&] { Generator{d}; }), HasSubstr("'diversity_penalty' has no effect"));
}

TEST(Backend, DecodeBeyondPreparedLengthIsRefused) {
  auto b = eager(tiny(), "static");
  b->prepare(1, 2);
  const auto one = at::ones({1, 1}, at::kLong);
  b->prefill(StepInputs{one, one, at::ones({1, 1}, at::kBool), {}});
  b->decode(StepInputs{one, one, at::ones({1, 1}, at::kBool), {}});
  EXPECT_THAT(error_of([&] {
                b->decode(StepInputs{one, one, at::ones({1, 1}, at::kBool), {}});
              }),
              HasSubstr("exceeds the prepared max_length 2"));
}

TEST(BackendRegistry, UnknownNameListsKnownOnesAndOptionsAreChecked) {
  register_builtin_backends();
  EXPECT_THAT(error_of([] { BackendRegistry::instance().get("eagre"); }),
              HasSubstr("unknown backend 'eagre' (did you mean 'eager'?); known backends:"));
  EXPECT_THAT(
      error_of([] { BackendRegistry::instance().add(BackendRegistry::instance().get("eager")); }),
      HasSubstr("already registered"));
  EXPECT_THAT(error_of([] { eager(tiny(), "dynamic"); }),
              HasSubstr("option 'cache': expected one of growing, static, paged, found 'dynamic'"));
  EXPECT_THAT(error_of([] {
                BackendRegistry::instance().create("eager", tiny(),
                                                   BackendOptions("eager", {{"cach", "static"}}));
              }),
              HasSubstr("unknown option 'cach' (did you mean 'cache'?)"));
}

}  // namespace
}  // namespace gengraph

// The setting top_logprobs (docs/decoding.md#top-logprobs): each generated token's k most likely
// tokens under the processed distribution it was chosen from, checked against log_softmax(scores)
// .topk(k) of the scores the strategy saw (recorded by a processor at the end of the chain), in
// the Generator's sequences and stream, the whole step, the Engine and the scheduler; and the
// values and combinations refused.
#include <ATen/ATen.h>
#include <gengraph/gengraph.h>
#include <gengraph/serving.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "backends/register_builtin.h"
#include "framework/backend/backend_registry.h"
#include "framework/decoding/generator.h"
#include "framework/decoding/search/rowwise_search.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using testing::error_of;
using ::testing::HasSubstr;
using Json = nlohmann::json;

// Keeps a copy of the scores it is handed, unchanged: placed after the chain the settings build,
// it sees the processed scores the strategy chooses from, one [rows, vocab] tensor per step.
class Recorder final : public LogitsProcessor {
 public:
  std::string name() const override { return "test_recorder"; }
  at::Tensor process(const TokenHistory&, at::Tensor scores) const override {
    steps.push_back(scores.clone());
    return scores;
  }
  mutable std::vector<at::Tensor> steps;
};

// The lowest-scoring token, through RowwiseSearch: a strategy of a plug-in's kind.
class Lowest final : public RowwiseSearch {
 public:
  using RowwiseSearch::RowwiseSearch;
  std::string name() const override { return "test_lowest"; }

 protected:
  at::Tensor choose(const at::Tensor& scores) override { return scores.argmin(-1); }
};

std::unique_ptr<ForwardBackend> backend(const std::string& name,
                                        std::shared_ptr<const CausalLM> model,
                                        std::map<std::string, std::string> options = {}) {
  register_builtin_backends();
  return BackendRegistry::instance().create(name, std::move(model),
                                            BackendOptions(name, std::move(options)));
}

const std::vector<std::vector<int64_t>> kPrompts = {{3, 4, 5, 6}, {9}, {10, 11, 12}};

// Row `row`'s alternatives at a step as the test computes them from the recorded scores.
std::vector<TopLogprob> expected_top(const at::Tensor& scores, int64_t row, int64_t k) {
  const auto [values, ids] = at::log_softmax(scores, -1).topk(k, -1, true, true);
  std::vector<TopLogprob> out;
  for (int64_t j = 0; j < k; ++j) {
    out.push_back({ids[row][j].item<int64_t>(), values[row][j].item<double>()});
  }
  return out;
}

void expect_same(const std::vector<TopLogprob>& got, const std::vector<TopLogprob>& want,
                 const std::string& what, double tolerance = 0) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t j = 0; j < want.size(); ++j) {
    EXPECT_EQ(got[j].token, want[j].token) << what << " entry " << j;
    if (std::isinf(want[j].logprob)) {
      EXPECT_EQ(got[j].logprob, want[j].logprob) << what << " entry " << j;
    } else {
      EXPECT_NEAR(got[j].logprob, want[j].logprob, tolerance) << what << " entry " << j;
    }
  }
}

// Greedy search and sampling (with warpers that remove tokens): every token's alternatives are
// the test's log_softmax(processed scores).topk(k), best first, in the sequences and the stream;
// the chosen token's log-probability is computed without output_scores, and greedy's token is
// the first alternative.
TEST(TopLogprobs, AreTheTopKOfTheProcessedDistribution) {
  const auto model = testing::test_model("tiny", 7);
  const auto eager = backend("eager", model);
  for (const bool sample : {false, true}) {
    const std::string what = sample ? "sampling" : "greedy";
    auto recorder = std::make_shared<Recorder>();
    ResolvedSettings g;
    g.max_new_tokens = 6;
    g.top_logprobs = 6;
    g.processor_objects = {recorder};
    if (sample) {
      g.do_sample = true;
      g.temperature = 0.7;
      g.top_k = 4;  // fewer than top_logprobs: the last alternatives are removed tokens, -inf
      g.num_return_sequences = 2;
    }
    std::vector<StreamedToken> streamed;
    at::manual_seed(11);
    const Generation out = Generator(g).generate(*eager, kPrompts, [&](const StreamedToken& t) {
      streamed.push_back(t);
      return true;
    });
    ASSERT_EQ(recorder->steps.size(), 6U) << what;
    const int64_t per_input = sample ? 2 : 1;
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      for (int64_t j = 0; j < per_input; ++j) {
        const Sequence& s = out.outputs.at(i).at(j);
        const int64_t row = static_cast<int64_t>(i) * per_input + j;
        ASSERT_EQ(s.tokens.size(), 6U) << what;
        ASSERT_EQ(s.top_logprobs.size(), s.tokens.size()) << what;
        ASSERT_EQ(s.token_scores.size(), s.tokens.size()) << what;  // without output_scores
        for (size_t t = 0; t < s.tokens.size(); ++t) {
          const std::string at =
              what + " row " + std::to_string(row) + " token " + std::to_string(t);
          const auto& top = s.top_logprobs[t];
          expect_same(top, expected_top(recorder->steps[t], row, 6), at);
          for (size_t k = 1; k < top.size(); ++k) EXPECT_GE(top[k - 1].logprob, top[k].logprob);
          if (sample) {
            // top_k 4 keeps four tokens: the chosen one among them, the other two removed.
            EXPECT_TRUE(std::isinf(top[4].logprob) && std::isinf(top[5].logprob)) << at;
            bool found = false;
            for (size_t k = 0; k < 4; ++k) {
              if (top[k].token == s.tokens[t]) {
                found = true;
                EXPECT_DOUBLE_EQ(top[k].logprob, s.token_scores[t]) << at;
              }
            }
            EXPECT_TRUE(found) << at;
          } else {
            EXPECT_EQ(top[0].token, s.tokens[t]) << at;
            EXPECT_DOUBLE_EQ(top[0].logprob, s.token_scores[t]) << at;
          }
        }
      }
    }
    // The stream: step by step, input by input; each token with its alternatives and logprob.
    ASSERT_EQ(streamed.size(), kPrompts.size() * per_input * 6) << what;
    for (const StreamedToken& t : streamed) {
      const Sequence& s = out.outputs.at(t.input).at(t.sequence);
      EXPECT_EQ(t.token, s.tokens.at(t.step));
      EXPECT_DOUBLE_EQ(t.logprob, s.token_scores.at(t.step));
      expect_same(t.top, s.top_logprobs.at(t.step), what + " streamed");
    }
    EXPECT_EQ(out.settings.at("top_logprobs"), 6);
    EXPECT_FALSE(out.settings.contains("output_scores"));
  }
  // Without the setting: none, and no scores.
  ResolvedSettings plain;
  plain.max_new_tokens = 3;
  const Generation none = Generator(plain).generate(*eager, kPrompts, [](const StreamedToken& t) {
    EXPECT_TRUE(t.top.empty());
    EXPECT_TRUE(std::isnan(t.logprob));
    return true;
  });
  EXPECT_TRUE(none.outputs[0][0].top_logprobs.empty());
  EXPECT_TRUE(none.outputs[0][0].token_scores.empty());
  EXPECT_FALSE(none.settings.contains("top_logprobs"));
}

// The whole step records them in its buffers by the length on the device, as the host loop does
// by the length on the host; rows that end early (EOS, then padding) keep only their own tokens'.
TEST(TopLogprobs, TheWholeStepRecordsWhatTheHostLoopDoes) {
  const auto model = testing::test_model("tiny", 5);
  const auto host = backend("eager", model);
  const auto stat = backend("cuda_graph", model, {{"capture", "false"}});
  ResolvedSettings free_run;
  free_run.max_new_tokens = 8;
  const int64_t eos = Generator(free_run).generate(*host, kPrompts).outputs[0][0].tokens.at(2);
  for (const bool sample : {false, true}) {
    ResolvedSettings g;
    g.max_new_tokens = 8;
    g.top_logprobs = 3;
    g.eos_token_id = {eos};
    g.pad_token_id = 0;
    g.do_sample = sample;
    LoopOptions whole;
    whole.whole_step = LoopOptions::WholeStep::kOn;
    whole.capture = false;
    whole.sync_every = 3;
    at::manual_seed(3);
    const Generation a = Generator(g).generate(*host, kPrompts);
    at::manual_seed(3);
    const Generation b = Generator(g, {}, whole).generate(*stat, kPrompts);
    ASSERT_TRUE(b.whole_step);
    if (!sample) EXPECT_LE(a.outputs[0][0].tokens.size(), 3U);  // ended by the EOS
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      const Sequence &x = a.outputs[i][0], &y = b.outputs[i][0];
      ASSERT_EQ(x.tokens, y.tokens) << i;
      ASSERT_EQ(x.top_logprobs.size(), x.tokens.size()) << i;
      ASSERT_EQ(y.top_logprobs.size(), y.tokens.size()) << i;
      for (size_t t = 0; t < x.tokens.size(); ++t) {
        expect_same(y.top_logprobs[t], x.top_logprobs[t], "input " + std::to_string(i), 1e-5);
      }
    }
  }
}

TEST(TopLogprobs, RefusedOutOfRangeWithBeamsAndByStrategiesThatGiveNone) {
  ResolvedSettings c;
  for (const auto& [value, found] : std::vector<std::pair<Json, std::string>>{
           {21, "21"}, {-1, "-1"}, {"3", "\"3\""}, {2.5, "2.5"}, {true, "true"}}) {
    EXPECT_THAT(error_of([&] { apply_generation_key(c, "top_logprobs", value, "g"); }),
                HasSubstr("g: 'top_logprobs': expected an integer in [0, 20], found " + found));
  }
  apply_generation_key(c, "top_logprobs", 20, "g");
  EXPECT_EQ(c.top_logprobs, 20);
  ResolvedSettings unset;  // null: none, as for the neighbouring integer keys
  apply_generation_key(unset, "top_logprobs", nullptr, "g");
  EXPECT_EQ(unset.top_logprobs, 0);
  EXPECT_THAT(error_of([&] { c.validate_for_vocab(10); }),
              HasSubstr("'top_logprobs': expected at most the model's vocabulary of 10 tokens, "
                        "found 20"));
  c.top_logprobs = 3;
  c.num_beams = 2;
  EXPECT_THAT(error_of([&] { c.validate(); }),
              HasSubstr("'top_logprobs' (3) needs greedy search or sampling (num_beams 1), found "
                        "num_beams 2"));
  c.num_beams = 4;
  c.num_beam_groups = 2;
  EXPECT_THAT(error_of([&] { c.validate(); }), HasSubstr("found num_beams 4 in 2 groups"));
  c.do_sample = true;
  c.num_beams = 2;
  c.num_beam_groups = 1;
  EXPECT_THAT(error_of([&] { c.validate(); }), HasSubstr("'top_logprobs' (3) needs greedy"));

  // A strategy object that gives fewer alternatives than asked for is refused by name; one built
  // to give them runs.
  const auto model = testing::test_model("tiny", 1);
  const auto eager = backend("eager", model);
  ResolvedSettings s;
  s.max_new_tokens = 2;
  s.top_logprobs = 3;
  s.strategy_object = std::make_shared<Lowest>(std::nullopt);
  EXPECT_THAT(error_of([&] {
                Generator(s).generate(*eager, {{1, 2}});
              }),
              HasSubstr("top_logprobs: expected a strategy that gives 3 alternatives per token, "
                        "found the 'test_lowest' strategy, which gives 0"));
  s.strategy_object = std::make_shared<Lowest>(std::nullopt, false, 3);
  const Sequence low = Generator(s).generate(*eager, {{1, 2}}).outputs[0][0];
  ASSERT_EQ(low.top_logprobs.size(), 2U);
  EXPECT_NE(low.top_logprobs[0][0].token, low.tokens[0]);  // the least likely was chosen
}

// The Engine: the stream and the result carry the same alternatives; refusals name the key.
TEST(TopLogprobs, TheEngineStreamsAndReturnsThem) {
  Engine engine("gpt2-tiny");
  std::vector<StreamedToken> streamed;
  const Generation g = engine.generate({{1, 2, 3}}, {{"max_new_tokens", 5}, {"top_logprobs", 2}},
                                       [&](const StreamedToken& t) {
                                         streamed.push_back(t);
                                         return true;
                                       });
  const Sequence& s = g.outputs.at(0).at(0);
  ASSERT_EQ(streamed.size(), 5U);
  ASSERT_EQ(s.top_logprobs.size(), 5U);
  for (size_t t = 0; t < 5; ++t) {
    ASSERT_EQ(streamed[t].top.size(), 2U);
    expect_same(streamed[t].top, s.top_logprobs[t], "engine stream");
    EXPECT_EQ(streamed[t].top[0].token, s.tokens[t]);
    EXPECT_EQ(streamed[t].logprob, streamed[t].top[0].logprob);
  }
  GenerationSettings typed;
  typed.max_new_tokens = 5;
  typed.top_logprobs = 2;
  EXPECT_EQ(engine.generate({{1, 2, 3}}, typed).outputs[0][0].top_logprobs[4][1].token,
            s.top_logprobs[4][1].token);
  EXPECT_THAT(error_of([&] {
                engine.generate({{1, 2, 3}}, {{"num_beams", 2}, {"top_logprobs", 2}});
              }),
              HasSubstr("'top_logprobs' (2) needs greedy search or sampling"));
  EXPECT_THAT(error_of([&] {
                engine.generate({{1, 2, 3}}, {{"top_logprobs", 21}});
              }),
              HasSubstr("'top_logprobs': expected an integer in [0, 20], found 21"));
}

// The scheduler: each request's alternatives as its solo Engine run gives them, in its result and
// its stream, greedy and sampled requests batched together.
TEST(TopLogprobs, TheSchedulerGivesEachRequestItsSoloRunsAlternatives) {
  ModelOptions mo;
  mo.weights_seed = 5;
  Model model("preset:llama-tiny", mo);
  SchedulerOptions so;
  so.kv_blocks = 64;
  so.block_size = 8;
  Scheduler scheduler(model, {}, so);
  RunOptions ro;
  ro.backend_options = {{"cache", "paged"}};
  Engine solo(model, ro);
  std::vector<Request> asked;
  std::vector<std::vector<StreamedToken>> streamed(4);
  std::vector<RequestHandle> handles;
  for (int i = 0; i < 4; ++i) {
    Request r;
    for (int k = 0; k < 3 + 2 * i; ++k) r.prompt.push_back(7 + 5 * i + k);
    r.settings = {{"max_new_tokens", 5 + i}, {"do_sample", i % 2 == 1}, {"top_logprobs", 4}};
    r.seed = static_cast<uint64_t>(40 + i);
    asked.push_back(r);
    r.stream = [&streamed, i](const StreamedToken& t) {
      streamed[i].push_back(t);
      return true;
    };
    handles.push_back(scheduler.submit(r));
  }
  for (int i = 0; i < 4; ++i) {
    const RequestResult got = scheduler.wait(handles[i]);
    solo.manual_seed(asked[i].seed);
    const Sequence alone = solo.generate({asked[i].prompt}, asked[i].settings).outputs[0][0];
    const std::string what = "request " + std::to_string(i);
    ASSERT_EQ(got.sequence.tokens, alone.tokens) << what;
    ASSERT_EQ(got.sequence.top_logprobs.size(), alone.tokens.size()) << what;
    ASSERT_EQ(streamed[i].size(), alone.tokens.size()) << what;
    for (size_t t = 0; t < alone.tokens.size(); ++t) {
      expect_same(got.sequence.top_logprobs[t], alone.top_logprobs[t], what);
      expect_same(streamed[i][t].top, alone.top_logprobs[t], what + " streamed");
      EXPECT_EQ(streamed[i][t].logprob, alone.token_scores[t]) << what;
    }
  }
  Request beams;
  beams.prompt = {1, 2, 3};
  beams.settings = {{"max_new_tokens", 4}, {"num_beams", 2}, {"top_logprobs", 1}};
  EXPECT_THAT(error_of([&] { scheduler.submit(beams); }), HasSubstr("'top_logprobs' (1) needs"));
  scheduler.drain();
}

}  // namespace
}  // namespace gengraph

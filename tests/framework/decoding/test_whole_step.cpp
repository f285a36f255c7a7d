// The whole-step loop (framework/decoding/generator.h): the same tokens as the host loop for
// every part that declares a whole-step form, reads of the done flag only every sync_every steps,
// and a named reason wherever a part keeps the host loop. Uncaptured here (any device); the
// captured graph is compared with the uncaptured step on CUDA only.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "backends/register_builtin.h"
#include "framework/backend/backend_registry.h"
#include "framework/decoding/generator.h"
#include "framework/decoding/search/rowwise_search.h"
#include "framework/model/causal_lm.h"
#include "framework/util/device.h"
#include "tests/support/fixed_logits_backend.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using ::testing::HasSubstr;

LoopOptions whole(LoopOptions::WholeStep mode = LoopOptions::WholeStep::kOn, int64_t sync = 3,
                  bool capture = false) {
  LoopOptions o;
  o.whole_step = mode;
  o.capture = capture;
  o.sync_every = sync;
  return o;
}

std::unique_ptr<ForwardBackend> backend(const std::string& name,
                                        std::shared_ptr<const CausalLM> model,
                                        std::map<std::string, std::string> options = {}) {
  register_builtin_backends();
  return BackendRegistry::instance().create(name, std::move(model),
                                            BackendOptions(name, std::move(options)));
}

void expect_same_outputs(const Generation& a, const Generation& b, const std::string& what) {
  ASSERT_EQ(a.outputs.size(), b.outputs.size()) << what;
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    ASSERT_EQ(a.outputs[i].size(), b.outputs[i].size()) << what << " input " << i;
    for (size_t j = 0; j < a.outputs[i].size(); ++j) {
      EXPECT_EQ(a.outputs[i][j].tokens, b.outputs[i][j].tokens)
          << what << " input " << i << " sequence " << j;
      ASSERT_EQ(a.outputs[i][j].score.has_value(), b.outputs[i][j].score.has_value()) << what;
      if (a.outputs[i][j].score) {
        EXPECT_NEAR(*a.outputs[i][j].score, *b.outputs[i][j].score, 1e-5) << what;
      }
    }
  }
  EXPECT_EQ(a.steps, b.steps) << what;
}

const std::vector<std::vector<int64_t>> kPrompts = {{3, 4, 5, 6, 7, 8}, {9}, {10, 11, 12}};

// Every processor that reads the token history, with ids taken from what the model generates
// (so that EOS, the stop sequence and the biased sequences actually occur): the arithmetic on a
// length that lives on the device is what differs from the host loop's.
ResolvedSettings history_config(const CausalLM& model) {
  auto eager = backend("eager", std::shared_ptr<const CausalLM>(&model, [](const CausalLM*) {}));
  ResolvedSettings plain;
  plain.max_new_tokens = 10;
  const auto out = Generator(plain).generate(*eager, kPrompts).outputs;
  const auto& t0 = out[0][0].tokens;
  const auto& t2 = out[2][0].tokens;
  ResolvedSettings g;
  g.max_new_tokens = 14;
  g.eos_token_id = {t0[4]};
  g.pad_token_id = 0;
  g.min_new_tokens = 3;
  g.repetition_penalty = 1.3;
  g.no_repeat_ngram_size = 3;
  g.frequency_penalty = 0.2;
  g.presence_penalty = 0.1;
  g.bad_words_ids = {{t2[0], t2[1]}};
  g.sequence_bias = {{{t0[1], t0[2]}, -1.5}, {{t2[3]}, 2.0}};
  g.begin_suppress_tokens = {t0[0]};
  g.suppress_tokens = {t2[5]};
  g.forced_eos_token_id = {t0[4]};
  g.exponential_decay_length_penalty = std::make_pair<int64_t, double>(5, 1.2);
  g.stop_sequences = {{t2[2], t2[3]}};
  return g;
}

TEST(WholeStep, HistoryReadingPartsMatchTheHostLoop) {
  for (const std::string which : {"tiny", "llama-a"}) {
    const auto model = testing::test_model(which, 5);
    auto configs = testing::every_strategy(history_config(*model));
    // Length penalties other than 1, and early_stopping "never" with its length bound.
    configs[2].second.length_penalty = 0.7;
    configs.emplace_back("beam_never", configs[2].second);
    configs.back().second.early_stopping = EarlyStopping::kNever;
    configs.back().second.length_penalty = 1.5;
    const auto host = backend("eager", model);
    const auto stat = backend("cuda_graph", model, {{"capture", "false"}});
    for (const auto& [what, g] : configs) {
      for (const int64_t sync : {1, 4}) {
        const std::string label = which + "/" + what + "/sync_every " + std::to_string(sync);
        at::manual_seed(23);
        const auto a = Generator(g).generate(*host, kPrompts);
        at::manual_seed(23);
        const auto b =
            Generator(g, {}, whole(LoopOptions::WholeStep::kOn, sync)).generate(*stat, kPrompts);
        EXPECT_TRUE(b.whole_step) << label;
        EXPECT_FALSE(b.captured) << label;
        expect_same_outputs(a, b, label);
        // Steps past the end: fewer than sync_every.
        EXPECT_GE(b.steps_run, b.steps) << label;
        EXPECT_LT(b.steps_run - b.steps, sync) << label;
      }
    }
  }
}

// Fixed logits in which a few tokens compete, so that the history decides every choice: EOS is
// the best token for row 0 (it ends the row as soon as min_new_tokens allows), and the penalties
// rotate the others, which repeats n-grams for no_repeat_ngram_size to ban.
TEST(WholeStep, PenaltiesAndBansOverACompetitiveHistory) {
  const auto model = testing::test_model("tiny", 3);
  const int64_t vocab = model->config().vocab_size, eos = 7;
  at::manual_seed(1);
  at::Tensor logits = at::randn({16, vocab}) * 0.1;
  for (int64_t r = 0; r < 16; ++r) {
    for (int64_t t = 1; t <= 6; ++t) logits[r][t] = 5.0 - 0.07 * double(t) + 0.013 * double(r);
    logits[r][eos] = r == 0 ? 6.0 : 3.2 + 0.2 * double(r);
  }
  testing::FixedLogitsBackend fixed(model, logits);
  ResolvedSettings g;
  g.max_new_tokens = 16;
  g.eos_token_id = {eos};
  g.pad_token_id = 0;
  g.min_new_tokens = 3;
  g.repetition_penalty = 1.15;
  g.no_repeat_ngram_size = 2;
  g.frequency_penalty = 0.3;
  g.sequence_bias = {{{2, 3}, -0.4}, {{5}, 0.2}};
  g.bad_words_ids = {{4, 1}};
  g.exponential_decay_length_penalty = std::make_pair<int64_t, double>(6, 1.3);
  g.stop_sequences = {{6, 2}};
  const std::vector<std::vector<int64_t>> prompts = {{1, 2, 3}, {4}, {5, 6}, {2, 2, 2, 2}};
  for (const auto& [what, config] : testing::every_strategy(g)) {
    at::manual_seed(4);
    const auto a = Generator(config).generate(fixed, prompts);
    at::manual_seed(4);
    const auto b =
        Generator(config, {}, whole(LoopOptions::WholeStep::kOn, 2)).generate(fixed, prompts);
    EXPECT_TRUE(b.whole_step) << what;
    expect_same_outputs(a, b, what);
  }
  // Row 0 of the greedy run ends with EOS right after min_new_tokens (3 tokens, then EOS).
  const auto greedy = Generator(g).generate(fixed, prompts).outputs;
  ASSERT_EQ(greedy[0][0].tokens.size(), 4u);
  EXPECT_EQ(greedy[0][0].tokens.back(), eos);
}

// One Generator keeps its whole-step state (buffers, strategy state, pipeline; on CUDA the graph)
// for the next generation of the same shape: every generation must start from a clean state.
TEST(WholeStep, LaterGenerationsOfAShapeReuseItsStateCleanly) {
  const auto model = testing::test_model("gpt2-a", 5);
  const auto host = backend("eager", model);
  const auto stat = backend("cuda_graph", model, {{"capture", "false"}, {"max_length", "32"}});
  ResolvedSettings g;
  g.max_new_tokens = 8;
  g.repetition_penalty = 1.4;
  g.no_repeat_ngram_size = 2;
  const std::vector<std::vector<std::vector<int64_t>>> batches = {
      {{3, 4, 5}, {6, 7, 8}},   // a shape
      {{9, 1, 2}, {5, 5, 5}},   // the same shape, other tokens
      {{3, 4, 5}, {6, 7, 8}},   // the first again
      {{1, 2, 3, 4, 5}, {7}}};  // another prompt length: new state
  for (const auto& [what, config] : testing::every_strategy(g)) {
    Generator reference(config);
    Generator whole_step(config, {}, whole(LoopOptions::WholeStep::kOn, 2));
    for (size_t i = 0; i < batches.size(); ++i) {
      at::manual_seed(31);
      const auto a = reference.generate(*host, batches[i]);
      at::manual_seed(31);
      const auto b = whole_step.generate(*stat, batches[i]);
      expect_same_outputs(a, b, what + " batch " + std::to_string(i));
    }
  }
}

TEST(WholeStep, ReadsTheDoneFlagEverySyncEverySteps) {
  const auto model = testing::test_model("tiny", 3);
  at::manual_seed(0);
  testing::FixedLogitsBackend fixed(model, at::randn({4, model->config().vocab_size}));
  ResolvedSettings g;
  g.max_new_tokens = 10;  // no EOS: every generation makes 10 decisions
  for (const int64_t sync : {1, 3, 4, 20}) {
    const auto a = Generator(g).generate(fixed, {{1, 2}, {3}});
    const auto b =
        Generator(g, {}, whole(LoopOptions::WholeStep::kOn, sync)).generate(fixed, {{1, 2}, {3}});
    expect_same_outputs(a, b, "sync_every " + std::to_string(sync));
    // Before decisions 1 and every sync-th one below 10.
    int64_t reads = 1;
    for (int64_t run = 2; run < 10; ++run) reads += run % sync == 0;
    EXPECT_EQ(b.flag_reads, reads) << sync;
    EXPECT_EQ(b.steps_run, 10) << sync;
    EXPECT_EQ(b.steps, 10) << sync;
  }
}

class Silent final : public LogitsProcessor {
 public:
  std::string name() const override { return "silent"; }
  at::Tensor process(const TokenHistory&, at::Tensor scores) const override { return scores; }
};
class SilentStop final : public StoppingCriterion {
 public:
  std::string name() const override { return "silent_stop"; }
  at::Tensor should_stop(const TokenHistory& seqs) const override {
    return at::zeros({seqs.rows()}, at::kBool);
  }
};
class SilentChoice final : public RowwiseSearch {
 public:
  using RowwiseSearch::RowwiseSearch;
  std::string name() const override { return "silent_choice"; }

 protected:
  at::Tensor choose(const at::Tensor& scores) override { return scores.argmin(-1); }
};

TEST(WholeStep, APartWithoutAWholeStepFormIsNamed) {
  const auto model = testing::test_model("tiny", 3);
  const auto stat = backend("cuda_graph", model, {{"capture", "false"}});
  ResolvedSettings g;
  g.max_new_tokens = 5;

  ResolvedSettings timed = g;
  timed.max_time = 100.0;
  const auto fell_back =
      Generator(timed, {}, whole(LoopOptions::WholeStep::kAuto)).generate(*stat, kPrompts);
  EXPECT_FALSE(fell_back.whole_step);
  EXPECT_THAT(fell_back.whole_step_fallback, HasSubstr("'max_time'"));
  expect_same_outputs(Generator(g).generate(*stat, kPrompts), fell_back, "max_time fallback");
  EXPECT_THAT(testing::error_of([&] { Generator(timed, {}, whole()).generate(*stat, kPrompts); }),
              HasSubstr("'max_time' reads the host clock"));

  // Parts from elsewhere that say nothing are taken to have no whole-step form.
  ProcessorChain chain;
  chain.add(std::make_unique<Silent>());
  EXPECT_THAT(chain.whole_step_blocker(),
              HasSubstr("logits processor 'silent' does not say it can run in a whole-step graph"));
  StoppingCriteria criteria;
  criteria.add(std::make_unique<SilentStop>());
  EXPECT_THAT(criteria.whole_step_blocker(), HasSubstr("stopping criterion 'silent_stop'"));
  EXPECT_THAT(SilentChoice(std::nullopt).whole_step_blocker(),
              HasSubstr("search strategy 'silent_choice' does not say it can run in a whole-step"));

  const auto eager = backend("eager", model);
  EXPECT_THAT(testing::error_of([&] { Generator(g, {}, whole()).generate(*eager, kPrompts); }),
              HasSubstr("backend 'eager' has no static decode step"));

  EXPECT_THAT(testing::error_of([&] {
                Generator(g, {}, whole()).generate(*stat, kPrompts, [](const StreamedToken&) {
                  return true;
                });
              }),
              HasSubstr("streaming"));

  if (!cuda_available()) {
    EXPECT_THAT(testing::error_of([&] {
                  Generator(g, {}, whole(LoopOptions::WholeStep::kOn, 3, /*capture=*/true))
                      .generate(*stat, kPrompts);
                }),
                HasSubstr("needs the model on a CUDA device"));
  }
  EXPECT_THAT(testing::error_of([&] { Generator(g, {}, whole(LoopOptions::WholeStep::kOn, 0)); }),
              HasSubstr("sync_every: expected an integer >= 1, found 0"));
  EXPECT_THAT(testing::error_of([] { parse_whole_step("sometimes", "loop.whole_step"); }),
              HasSubstr("loop.whole_step: expected off, auto or on, found 'sometimes'"));
}

// The helpers parts read the history through give the same answers with the length on the host
// (the host loop) and on the device (the whole step); the host's form is views and host values.
TEST(WholeStep, TheSequenceHelpersAgreeOnBothForms) {
  const at::Tensor buffer = at::arange(16, at::kLong).view({2, 8});
  const at::Tensor valid = at::ones({2, 3}, at::kBool);
  const TokenHistory host{buffer, valid, 3, Length(5)};
  const TokenHistory device{buffer, valid, 3, Length(at::scalar_tensor(5, at::kLong))};
  EXPECT_THAT(testing::error_of([&] { (void)device.length.known(); }),
              HasSubstr("lives on the device"));
  EXPECT_TRUE(host.length.ge(5).always());
  EXPECT_FALSE(device.length.ge(5).known().has_value());
  for (const TokenHistory* s : {&host, &device}) {
    const std::string form = s == &host ? "host" : "device";
    EXPECT_TRUE(at::equal(last_tokens(*s, 2), at::tensor({3, 4, 11, 12}, at::kLong).view({2, 2})))
        << form;
    EXPECT_TRUE(at::equal(last_token(*s), at::tensor({4, 12}, at::kLong))) << form;
    EXPECT_TRUE(at::equal(written_columns(*s).to(at::kLong),
                          at::tensor({1, 1, 1, 1, 1, 0, 0, 0}, at::kLong)))
        << form;
    EXPECT_TRUE(
        at::equal(flag_rows(s->length.eq(5), 2, buffer.options()), at::ones({2}, at::kBool)))
        << form;
    EXPECT_TRUE(at::equal(read_column(buffer, 1, s->length), at::tensor({5, 13}, at::kLong)))
        << form;
    // Generated columns 3 and 4 weigh 1, everything else 0 (or is not there).
    const auto [ids, weight] = weighted_tokens(*s, 3, at::kFloat);
    const at::Tensor counts = at::zeros({2, 16}).scatter_add_(1, ids, weight);
    at::Tensor want = at::zeros({2, 16});
    for (const auto& [r, c] : std::vector<std::pair<int, int>>{{0, 3}, {0, 4}, {1, 11}, {1, 12}})
      want[r][c] = 1;
    EXPECT_TRUE(at::equal(counts, want)) << form;
    // Writing column 5, then the fill from column 6 on.
    at::Tensor b = buffer.clone();
    write_column(b, 1, s->length, at::tensor({-1, -2}, at::kLong));
    fill_from(b, s->length.plus(1), -9);
    EXPECT_TRUE(
        at::equal(b.narrow(1, 5, 3), at::tensor({-1, -9, -9, -2, -9, -9}, at::kLong).view({2, 3})))
        << form;
    EXPECT_TRUE(at::equal(b.narrow(1, 0, 5), buffer.narrow(1, 0, 5))) << form;
    // Length arithmetic as a scalar factor: (5 + 1) ** 2 and 2 ** (5 - 3).
    EXPECT_TRUE(at::equal(s->length.power(2.0, 1).multiply(at::ones({2})), at::full({2}, 36.0f)))
        << form;
    EXPECT_TRUE(at::equal(s->length.exponential(2.0, -3).minus(1).divide(at::ones({2})),
                          at::full({2}, 1.0f / 3)))
        << form;
  }
}

// On CUDA: the captured graph replays exactly what the uncaptured step computes, for every
// strategy, in the generation that captures it and in a later one that reuses it.
TEST(WholeStepCuda, CapturedEqualsUncaptured) {
  if (!cuda_available()) GTEST_SKIP() << "no CUDA device";
  LoadOptions on_cuda;
  on_cuda.device = c10::Device(c10::kCUDA, 0);
  const auto model = testing::test_model("gpt2-a", 5, on_cuda);
  const auto graphs = backend("cuda_graph", model);
  ResolvedSettings g;
  g.max_new_tokens = 12;
  for (const auto& [what, config] : testing::every_strategy(g)) {
    at::manual_seed(9);
    const auto a = Generator(config, {}, whole(LoopOptions::WholeStep::kOn, 4, false))
                       .generate(*graphs, kPrompts);
    // Twice through one generator: the second replays the first one's graph from its first
    // decode step.
    Generator captured(config, {}, whole(LoopOptions::WholeStep::kOn, 4, true));
    for (int pass = 0; pass < 2; ++pass) {
      at::manual_seed(9);
      const auto b = captured.generate(*graphs, kPrompts);
      EXPECT_TRUE(b.captured) << what;
      EXPECT_EQ(b.capture_s > 0, pass == 0) << what;
      expect_same_outputs(a, b, what + " pass " + std::to_string(pass));
    }
  }
}

}  // namespace
}  // namespace gengraph

// NaN or inf in a backend's logits at a decode step (issue 49): refused naming the backend and the
// step, on the host loop, the whole step and speculative decoding's verify, for greedy search,
// sampling and beam search; before, search over them picked token 0 and ended with exit 0. And a
// draft model whose context is shorter than the generation: refused up front, naming both
// models' contexts, where it ended in LibTorch's "index out of range in self".
#include <ATen/ATen.h>
#include <gengraph/gengraph.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "framework/backend/forward_backend.h"
#include "framework/decoding/generator.h"
#include "framework/model/causal_lm.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Json = nlohmann::json;

// Fixed logits (as tests/support/fixed_logits_backend.h) at every step, except decode step
// `poison_step` (1 is the first after the prefill; 0 poisons the prefill), whose logits hold
// `value` at [row, token]. Host loop, whole step (its StaticDecode) and verify (one decode per
// position) alike; rewinding is free (no cache).
class PoisonedBackend final : public ForwardBackend, public StaticDecode {
 public:
  PoisonedBackend(std::shared_ptr<const CausalLM> model, at::Tensor logits, int64_t poison_step,
                  int64_t row, int64_t token, float value)
      : ForwardBackend(std::move(model)),
        logits_(std::move(logits)),
        step_(poison_step),
        row_(row),
        token_(token),
        value_(value) {}
  std::string name() const override { return "poisoned"; }
  int64_t decodes() const { return decodes_; }

  StaticDecode* static_decode() override { return whole_ ? this : nullptr; }
  void offer_whole_step(bool on) { whole_ = on; }
  void start() override {
    slot.fill_(length());
    parents.copy_(at::arange(parents.size(0), parents.options()));
  }
  void run(bool) override { logits.copy_(next(logits.size(0))); }

 protected:
  void do_prepare(int64_t rows, int64_t) override {
    decodes_ = 0;
    if (ids.defined() && ids.size(0) == rows) return;
    const auto l = logits_.options().dtype(at::kLong);
    ids = at::zeros({rows, 1}, l);
    positions = at::zeros({rows, 1}, l);
    slot = at::zeros({1}, l);
    parents = at::arange(rows, l);
    logits = at::empty({rows, logits_.size(1)}, logits_.options());
  }
  at::Tensor do_prefill(const StepInputs& in, const at::Tensor&) override {
    decodes_ = 0;
    at::Tensor out = logits_.narrow(0, 0, in.input_ids.size(0) * in.copies).clone();
    if (step_ == 0) out[row_][token_] = value_;
    return out;
  }
  at::Tensor do_decode(const StepInputs& in, const at::Tensor&) override {
    return next(in.input_ids.size(0));
  }
  void do_rewind(int64_t) override {}

 private:
  at::Tensor next(int64_t rows) {
    ++decodes_;
    at::Tensor out = logits_.narrow(0, 0, rows).clone();
    if (decodes_ == step_) out[row_][token_] = value_;
    return out;
  }
  at::Tensor logits_;
  int64_t step_, row_, token_;
  float value_;
  int64_t decodes_ = 0;
  bool whole_ = false;
};

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

struct Fixture {
  std::shared_ptr<const CausalLM> model = testing::test_model("tiny", 1);
  int64_t vocab = model->config().vocab_size;
  at::Tensor logits = [&] {
    at::manual_seed(4);
    return at::randn({8, vocab});
  }();
};

ResolvedSettings settings(const std::string& strategy) {
  ResolvedSettings g;
  g.max_new_tokens = 12;
  if (strategy == "sampling") g.do_sample = true;
  if (strategy == "beam search") g.num_beams = 2;
  return g;
}

LoopOptions whole_step(int64_t sync_every) {
  LoopOptions o;
  o.whole_step = LoopOptions::WholeStep::kOn;
  o.capture = false;
  o.sync_every = sync_every;
  return o;
}

// The host loop checks every step before deciding over it: the error names the backend, the
// step, the row, the token and the value.
TEST(NonFiniteLogits, AtADecodeStepAreRefusedNamingTheBackendAndTheStep) {
  Fixture f;
  for (const std::string strategy : {"greedy", "sampling", "beam search"}) {
    for (const float value : {kNaN, kInf, -kInf}) {
      const std::string what = strategy + " " + std::to_string(value);
      SCOPED_TRACE(what);
      PoisonedBackend backend(f.model, f.logits, 7, 1, 123, value);
      const std::string err = testing::error_of([&] {
        Generator(settings(strategy)).generate(backend, {{1, 2, 3}, {4, 5}});
      });
      const std::string name = value != value ? "NaN" : (value > 0 ? "inf" : "-inf");
      EXPECT_THAT(err, HasSubstr("backend 'poisoned' gave non-finite logits at decode step 7 "
                                 "(row 1: " +
                                 name + " at token 123)"));
      EXPECT_EQ(backend.decodes(), 7) << "the error comes at the step, not at the end";
    }
  }
}

// The prefill's logits: NaN as before, and now infinite values too, naming the backend.
TEST(NonFiniteLogits, InThePrefillAreRefusedNamingTheBackend) {
  Fixture f;
  for (const float value : {kNaN, kInf}) {
    PoisonedBackend backend(f.model, f.logits, 0, 0, 5, value);
    const std::string err = testing::error_of([&] {
      Generator(settings("greedy")).generate(backend, {{1, 2}});
    });
    EXPECT_THAT(err, HasSubstr(std::string("the model's logits for the prompts hold ") +
                               (value != value ? "NaN" : "infinite") +
                               " values (backend 'poisoned', row 0: " +
                               (value != value ? "NaN" : "inf") + " at token 5)"));
  }
}

// Finite logits, however large, pass: their float sum overflows to inf, and the exact test then
// finds every value finite.
TEST(NonFiniteLogits, LargeFiniteLogitsPass) {
  Fixture f;
  at::Tensor big = at::full({8, f.vocab}, 3.0e38f);
  big.select(1, 9).fill_(3.4e38f);
  PoisonedBackend backend(f.model, big, -1, 0, 0, 0);
  for (const std::string strategy : {"greedy", "sampling", "beam search"}) {
    const Generation g = Generator(settings(strategy)).generate(backend, {{1, 2}});
    EXPECT_EQ(g.steps, 12) << strategy;
  }
  // The whole step's sums, read later, are in double: no overflow either.
  backend.offer_whole_step(true);
  for (const std::string strategy : {"greedy", "sampling", "beam search"}) {
    const Generation g =
        Generator(settings(strategy), {}, whole_step(3)).generate(backend, {{1, 2}});
    EXPECT_TRUE(g.whole_step) << strategy;
    EXPECT_EQ(g.steps, 12) << strategy;
  }
}

// The whole step keeps each step's check on the device and reads it with the done flag (every
// sync_every steps, and at the end): the step is still named, and a step past the last flag read
// is not missed.
TEST(NonFiniteLogits, TheWholeStepNamesTheStepAtItsNextRead) {
  Fixture f;
  for (const std::string strategy : {"greedy", "sampling", "beam search"}) {
    for (const int64_t sync : {1, 3, 20}) {
      for (const int64_t at_step : {2, 7, 11}) {
        const std::string what =
            strategy + " sync " + std::to_string(sync) + " step " + std::to_string(at_step);
        SCOPED_TRACE(what);
        PoisonedBackend backend(f.model, f.logits, at_step, 1, 40, kNaN);
        backend.offer_whole_step(true);
        Generation g;
        const std::string err = testing::error_of([&] {
          g = Generator(settings(strategy), {}, whole_step(sync))
                  .generate(backend, {{1, 2, 3}, {4, 5}});
        });
        EXPECT_THAT(err, HasSubstr("backend 'poisoned' gave non-finite logits at decode step " +
                                   std::to_string(at_step) + " ("));
        EXPECT_THAT(err, HasSubstr("NaN"));
      }
    }
  }
  // Unpoisoned, the same loop runs to its end.
  PoisonedBackend clean(f.model, f.logits, -1, 0, 0, 0);
  clean.offer_whole_step(true);
  const Generation g = Generator(settings("greedy"), {}, whole_step(3)).generate(clean, {{1, 2}});
  EXPECT_TRUE(g.whole_step);
  EXPECT_EQ(g.steps, 12);
}

// Speculative decoding checks each verified position's logits before deciding over it.
TEST(NonFiniteLogits, SpeculativeDecodingsVerifyIsChecked) {
  Fixture f;
  // Token 5 is the best everywhere, and the prompt repeats it: prompt lookup proposes 5s.
  at::Tensor logits = f.logits.clone();
  logits.select(1, 5).fill_(10.0);
  for (const std::string strategy : {"greedy", "sampling"}) {
    SCOPED_TRACE(strategy);
    PoisonedBackend backend(f.model, logits, 6, 0, 17, kInf);
    ResolvedSettings g = settings(strategy);
    g.prompt_lookup_num_tokens = 3;
    const std::string err = testing::error_of([&] {
      Generator(g).generate(backend, {{5, 5, 5, 5, 5}});
    });
    EXPECT_THAT(err, HasSubstr("backend 'poisoned' gave non-finite logits at decode step "));
    EXPECT_THAT(err, HasSubstr("inf at token 17"));
  }
}

// A draft model of 64 positions under a target of 128, with a 70-token prompt.
TEST(DraftModelContext, AShorterDraftContextIsRefusedUpFrontNamingBothModels) {
  const std::string models = testing::fixtures_dir() + "/models/";
  Engine engine(models + "llama-a");  // 128 positions, 128 tokens
  const Json draft = {{"max_new_tokens", 8},
                      {"candidate_generator",
                       {{"name", "draft_model"}, {"model", models + "gpt2-c"}}}};  // 64 positions
  std::vector<int64_t> prompt(70);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int64_t>(3 + i % 50);
  const std::string err = testing::error_of([&] { engine.generate({prompt}, draft); });
  const std::string contexts = "the draft model " + models +
                               "gpt2-c/config.json has a context of 64 positions (the target "
                               "model " +
                               models + "llama-a/config.json has 128)";
  EXPECT_THAT(err, HasSubstr(contexts + ": the longest prompt has 70 tokens"));
  EXPECT_THAT(err, Not(HasSubstr("index out of range")));
  // A prompt that fits, but not with the new tokens.
  prompt.resize(60);
  EXPECT_THAT(testing::error_of([&] { engine.generate({prompt}, draft); }),
              HasSubstr(contexts + ": the longest prompt (60 tokens) plus 8 new tokens needs 68"));
  // Within both contexts it runs.
  prompt.resize(40);
  const Generation g = engine.generate({prompt}, draft);
  EXPECT_GE(g.outputs[0][0].tokens.size(), 1u);
  EXPECT_LE(g.outputs[0][0].tokens.size(), 8u);
}

}  // namespace
}  // namespace gengraph

// Engine::plan: a generation decided once (settings resolved, prompts checked, pipeline built,
// memory estimated) and executed by generate(plan, prompts) as it is.
#include <gengraph/gengraph.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>

#include "framework/decoding/processors/logits_processor.h"
#include "framework/decoding/registry.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using testing::error_of;
using ::testing::HasSubstr;
using Json = nlohmann::json;

// How many times the pipeline was built with the counting processor in it.
std::atomic<int> builds{0};

// Leaves the scores as they are; counts how often a pipeline is built with it.
class CountedIdentity final : public LogitsProcessor {
 public:
  std::string name() const override { return "test_counted_identity"; }
  at::Tensor process(const TokenHistory&, at::Tensor scores) const override { return scores; }
};

void register_counted_identity() {
  static const bool done = [] {
    ProcessorInfo p;
    p.name = "test_counted_identity";
    p.create = [](const Json&, const PartContext&) {
      ++builds;
      return std::make_unique<CountedIdentity>();
    };
    processor_registry().add(p);
    return true;
  }();
  (void)done;
}

const std::vector<std::vector<int64_t>> kPrompts = {{5, 9, 2}, {7, 1}};

TEST(EnginePlan, APlanRunsAsGenerateDoesAndSaysWhatItDecided) {
  Engine engine("preset:gpt2-tiny");
  const Json settings = {{"max_new_tokens", 6}, {"num_beams", 3}, {"num_return_sequences", 2}};
  const Plan plan = engine.plan(kPrompts, settings);
  EXPECT_EQ(plan.inputs(), 2);
  EXPECT_EQ(plan.rows_per_input(), 3);
  EXPECT_EQ(plan.prompt_length(), 3);
  EXPECT_EQ(plan.max_length(), 9);
  EXPECT_EQ(plan.settings().at("num_beams"), 3);
  EXPECT_GT(plan.memory_bytes(), 0.0);
  EXPECT_THAT(plan.memory_breakdown(), HasSubstr("KV cache"));
  const Generation direct = engine.generate(kPrompts, settings);
  // The plan executed twice: the same tokens as generate, each time.
  for (int i = 0; i < 2; ++i) {
    const Generation planned = engine.generate(plan, kPrompts);
    ASSERT_EQ(planned.outputs.size(), direct.outputs.size());
    for (size_t k = 0; k < direct.outputs.size(); ++k) {
      ASSERT_EQ(planned.outputs[k].size(), 2u);
      for (size_t s = 0; s < direct.outputs[k].size(); ++s)
        EXPECT_EQ(planned.outputs[k][s].tokens, direct.outputs[k][s].tokens);
    }
    EXPECT_EQ(planned.settings, plan.settings());
  }
}

TEST(EnginePlan, ThePipelineIsBuiltOncePerGeneration) {
  register_counted_identity();
  Engine engine("preset:gpt2-tiny");
  const Json settings = {{"max_new_tokens", 3},
                         {"processors", Json::array({{{"name", "test_counted_identity"}}})}};
  builds = 0;
  engine.generate(kPrompts, settings);
  EXPECT_EQ(builds.load(), 1) << "generate: one plan, one pipeline";
  builds = 0;
  const Plan plan = engine.plan(kPrompts, settings);
  EXPECT_EQ(builds.load(), 1) << "the plan builds the pipeline (and so checks it)";
  engine.generate(plan, kPrompts);
  EXPECT_EQ(builds.load(), 1) << "the first generation runs the plan's pipeline";
  engine.generate(plan, kPrompts);
  EXPECT_EQ(builds.load(), 2) << "a later one builds its own";
}

TEST(EnginePlan, APlanIsRefusedWithTheFirstErrorOrWhereItDoesNotApply) {
  Engine engine("preset:gpt2-tiny");
  EXPECT_THAT(error_of([&] { engine.plan(kPrompts, {{"num_beams", 0}}); }), HasSubstr("num_beams"));
  EXPECT_THAT(error_of([&] { engine.plan({{5, 1000000}}); }), HasSubstr("outside the vocabulary"));
  EXPECT_THAT(error_of([&] {
                engine.plan(kPrompts, {{"processors", Json::array({{{"name", "no_such"}}})}});
              }),
              HasSubstr("no_such"));
  const Plan plan = engine.plan(kPrompts, {{"max_new_tokens", 2}});
  EXPECT_THAT(error_of([&] {
                engine.generate(plan, {{5, 9, 2}});
              }),
              HasSubstr("the plan was made for 2 prompt(s) of up to 3 tokens; found 1"));
  EXPECT_THAT(error_of([&] {
                engine.generate(plan, {{5, 9, 2, 4}, {1}});
              }),
              HasSubstr("found 2 of up to 4"));
  EXPECT_THAT(error_of([&] {
                engine.generate(plan, {{5, 9, 2}, {7, 1000000}});
              }),
              HasSubstr("outside the vocabulary"));
  Engine other(engine.model());
  EXPECT_THAT(error_of([&] { other.generate(plan, kPrompts); }),
              HasSubstr("the plan was made by another Engine"));
  EXPECT_THAT(error_of([&] { engine.generate(Plan(), kPrompts); }), HasSubstr("or is empty"));
}

TEST(EnginePlan, TheModelDescribesItselfAndSavesAFolderThatLoadsAgain) {
  const Model model("preset:gpt2-tiny");
  const Json d = model.describe();
  EXPECT_EQ(d.at("source"), "preset:gpt2-tiny");
  EXPECT_EQ(d.at("weights"), "float");
  EXPECT_EQ(d.at("vocab_size").get<int64_t>(), model.vocab_size());
  EXPECT_GT(d.at("parameters").get<int64_t>(), 0);
  // A step reads the weights once and more cache with more rows and positions.
  EXPECT_GT(model.decode_read_bytes(1, 0), 0.0);
  EXPECT_GT(model.decode_read_bytes(4, 10), model.decode_read_bytes(1, 10));
  testing::TempDir dir;
  model.save((dir.path() / "m").string());
  Engine a(model), b((dir.path() / "m").string());
  EXPECT_EQ(a.generate(kPrompts).outputs[1][0].tokens, b.generate(kPrompts).outputs[1][0].tokens);
}

}  // namespace
}  // namespace gengraph

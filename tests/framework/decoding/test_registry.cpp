// Processors, stopping criteria and strategies registered by name: selected from settings and
// YAML, refused by name when unknown or duplicated, their parameters checked before a run.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "framework/decoding/generator.h"
#include "framework/decoding/registry.h"
#include "framework/decoding/search/rowwise_search.h"
#include "framework/model/loader.h"
#include "tests/support/fixed_logits_backend.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using testing::error_of;
using ::testing::HasSubstr;
using Json = nlohmann::json;

// Adds `bias` to one token: with fixed logits, that token wins once the bias is large enough.
class AddToToken final : public LogitsProcessor {
 public:
  AddToToken(int64_t token, double bias) : token_(token), bias_(bias) {}
  std::string name() const override { return "test_add_to_token"; }
  at::Tensor process(const TokenHistory&, at::Tensor scores) const override {
    scores.select(1, token_).add_(bias_);
    return scores;
  }

 private:
  int64_t token_;
  double bias_;
};

// Stops every row after `after` generated tokens.
class StopAfter final : public StoppingCriterion {
 public:
  StopAfter(int64_t prompt_length, int64_t after) : end_(prompt_length + after) {}
  std::string name() const override { return "test_stop_after"; }
  at::Tensor should_stop(const TokenHistory& seqs) const override {
    return flag_rows(seqs.length.ge(end_), seqs.rows(), seqs.buffer.options());
  }

 private:
  int64_t end_;
};

// The lowest-scoring token: the opposite of greedy, easy to predict over fixed logits.
class Argmin final : public RowwiseSearch {
 public:
  using RowwiseSearch::RowwiseSearch;
  std::string name() const override { return "test_argmin"; }

 protected:
  at::Tensor choose(const at::Tensor& scores) override { return scores.argmin(-1); }
};

void register_test_parts() {
  static bool done = false;
  if (done) return;
  done = true;
  ProcessorInfo p;
  p.name = "test_add_to_token";
  p.check_params = [](const Json& params) {
    if (!params.contains("token")) throw Error("parameter 'token' is required");
  };
  p.create = [](const Json& params, const PartContext&) {
    return std::make_unique<AddToToken>(params.at("token").get<int64_t>(),
                                        params.value("bias", 100.0));
  };
  processor_registry().add(p);
  StoppingCriterionInfo s;
  s.name = "test_stop_after";
  s.create = [](const Json& params, const PartContext& ctx) {
    return std::make_unique<StopAfter>(ctx.prompt_length, params.value("tokens", int64_t{1}));
  };
  stopping_registry().add(s);
  SearchStrategyInfo g;
  g.name = "test_argmin";
  g.create = [](const Json&, const PartContext& ctx) {
    return std::make_unique<Argmin>(ctx.finished_pad);
  };
  strategy_registry().add(g);
}

struct Fixture {
  std::shared_ptr<const CausalLM> model = testing::test_model("tiny", 0);
  at::Tensor logits;
  Fixture() {
    at::manual_seed(0);
    logits = at::randn({8, model->config().vocab_size});
  }
  std::vector<int64_t> run(const Json& settings) {
    ResolvedSettings c;
    for (auto it = settings.begin(); it != settings.end(); ++it)
      apply_generation_key(c, it.key(), it.value(), "test");
    return run(c);
  }
  std::vector<int64_t> run(const ResolvedSettings& c) {
    testing::FixedLogitsBackend backend(model, logits);
    return Generator(c).generate(backend, {{1, 2, 3}}).outputs.at(0).at(0).tokens;
  }
};

// Parts the caller built, passed as objects beside (or instead of) the ones the settings name,
// and kept from one generation to the next.
TEST(Registry, CallersPassPartObjects) {
  register_test_parts();
  Fixture f;
  const int64_t best = f.logits[0].argmax().item<int64_t>();
  const int64_t worst = f.logits[0].argmin().item<int64_t>();
  ResolvedSettings c;
  c.max_new_tokens = 5;
  c.processor_objects = {std::make_shared<AddToToken>(7, 100.0)};
  c.stopping_objects = {std::make_shared<StopAfter>(3, 2)};  // the prompt is 3 tokens
  EXPECT_EQ(f.run(c), std::vector<int64_t>(2, 7));
  EXPECT_EQ(f.run(c), std::vector<int64_t>(2, 7));  // the same objects, a second generation
  // After the chain the settings build: the settings' processor and the object both apply.
  c.processors = {PartSpec{"test_add_to_token", {{"token", 9}, {"bias", 50.0}}}};
  EXPECT_EQ(f.run(c), std::vector<int64_t>(2, 7));
  c.processor_objects.push_back(std::make_shared<AddToToken>(9, 100.0));
  EXPECT_EQ(f.run(c), std::vector<int64_t>(2, 9));
  // A strategy object replaces the one the settings select.
  ResolvedSettings s;
  s.max_new_tokens = 3;
  s.strategy_object = std::make_shared<Argmin>(std::nullopt);
  EXPECT_EQ(f.run(s), std::vector<int64_t>(3, worst));
  EXPECT_EQ(f.run(ResolvedSettings{}).front(), best);
  const Json j = c.to_json();
  EXPECT_EQ(j.at("processor_objects"), Json::array({"test_add_to_token", "test_add_to_token"}));
  EXPECT_EQ(j.at("stopping_objects"), Json::array({"test_stop_after"}));
  EXPECT_EQ(s.to_json().at("strategy_object"), "test_argmin");

  ResolvedSettings bad;
  bad.processor_objects = {nullptr};
  EXPECT_THAT(error_of([&] { bad.validate(); }), HasSubstr("'processor_objects[0]' is null"));
  bad.processor_objects.clear();
  bad.stopping_objects = {nullptr};
  EXPECT_THAT(error_of([&] { bad.validate(); }), HasSubstr("'stopping_objects[0]' is null"));
  ResolvedSettings both = s;
  both.strategy = PartSpec{"test_argmin", Json::object()};
  EXPECT_THAT(error_of([&] { both.validate(); }),
              HasSubstr("a strategy object was passed too; give one"));
  ResolvedSettings beams = s;
  beams.num_beams = 2;
  EXPECT_THAT(error_of([&] { beams.validate(); }),
              HasSubstr("the strategy object 'test_argmin' uses 1 row(s) per input, but num_beams "
                        "is 2"));
}

TEST(Registry, RegisteredPartsAreSelectedByName) {
  register_test_parts();
  Fixture f;
  const int64_t best = f.logits[0].argmax().item<int64_t>();
  const int64_t worst = f.logits[0].argmin().item<int64_t>();
  EXPECT_EQ(f.run({{"max_new_tokens", 3}}), std::vector<int64_t>(3, best));
  // Processor: token 7 lifted far above the rest wins every step.
  EXPECT_EQ(f.run({{"max_new_tokens", 3},
                   {"processors", {{{"name", "test_add_to_token"}, {"token", 7}}}}}),
            std::vector<int64_t>(3, 7));
  // Stopping criterion: two tokens, then stop, though max_new_tokens allows five.
  EXPECT_EQ(f.run({{"max_new_tokens", 5},
                   {"stopping_criteria", {{{"name", "test_stop_after"}, {"tokens", 2}}}}}),
            std::vector<int64_t>(2, best));
  // Strategy: the lowest score every step.
  EXPECT_EQ(f.run({{"max_new_tokens", 3}, {"strategy", "test_argmin"}}),
            std::vector<int64_t>(3, worst));
}

TEST(Registry, UnknownDuplicateAndBuiltinNamesAreRefused) {
  register_test_parts();
  ResolvedSettings c;
  apply_generation_key(c, "strategy", "test_argmn", "run.yaml: generation");
  EXPECT_THAT(error_of([&] { c.validate(); }),
              HasSubstr("strategy 'test_argmn': unknown search strategy 'test_argmn' (did you "
                        "mean 'test_argmin'?)"));
  // Beams a named strategy would not run are refused, not silently ignored.
  ResolvedSettings beams;
  apply_generation_key(beams, "strategy", "test_argmin", "run.yaml: generation");
  beams.num_beams = 2;
  EXPECT_THAT(error_of([&] { beams.validate(); }),
              HasSubstr("strategy 'test_argmin': uses 1 row(s) per input, but num_beams is 2"));
  apply_generation_key(beams, "strategy", "beam_search", "run.yaml: generation");
  EXPECT_NO_THROW(beams.validate());
  ResolvedSettings p;
  apply_generation_key(p, "processors", Json::array({{{"name", "test_add_to_token"}}}), "x");
  EXPECT_THAT(error_of([&] { p.validate(); }),
              HasSubstr("processors[0] 'test_add_to_token': parameter 'token' is required"));
  EXPECT_THAT(error_of([&] { apply_generation_key(c, "stopping_criteria", 3, "run.yaml"); }),
              HasSubstr("'stopping_criteria': expected a list of {name: ..., <parameters>}"));
  SearchStrategyInfo again;
  again.name = "test_argmin";
  again.create = [](const Json&, const PartContext&) { return std::unique_ptr<SearchStrategy>(); };
  EXPECT_THAT(error_of([&] { strategy_registry().add(again); }),
              HasSubstr("search strategy 'test_argmin' is already registered"));
  ProcessorInfo top_k;
  top_k.name = "top_k";  // a built-in processor's name
  top_k.create = [](const Json&, const PartContext&) { return std::unique_ptr<LogitsProcessor>(); };
  EXPECT_THAT(error_of([&] { processor_registry().add(top_k); }),
              HasSubstr("logits processor 'top_k' is already registered"));
  StoppingCriterionInfo nameless;
  EXPECT_THAT(error_of([&] { stopping_registry().add(nameless); }),
              HasSubstr("needs a name and a create function"));
}

TEST(Registry, SettingsRecordRegisteredPartsOnlyWhenSet) {
  register_test_parts();
  ResolvedSettings c;
  EXPECT_FALSE(c.to_json().contains("strategy"));
  EXPECT_FALSE(c.to_json().contains("stopping_criteria"));
  apply_generation_key(c, "strategy", Json{{"name", "test_argmin"}, {"k", 1}}, "x");
  EXPECT_EQ(c.to_json()["strategy"], (Json{{"name", "test_argmin"}, {"k", 1}}));
}

// A part built outside gengraph sees ResolvedSettings only declared (<gengraph/ext/registry.h>)
// and reads the resolved settings as JSON, transformers' key names.
TEST(Registry, PartsReadTheResolvedSettingsAsJson) {
  ResolvedSettings c;
  apply_generation_key(c, "temperature", Json(0.5), "x");
  apply_generation_key(c, "output_scores", Json(true), "x");
  const Json settings = generation_settings_json(c);
  EXPECT_DOUBLE_EQ(settings.value("temperature", 1.0), 0.5);
  EXPECT_TRUE(settings.value("output_scores", false));
  EXPECT_EQ(settings.value("num_beams", 0), 1);
}

// One registration path: gengraph's own parts are entries of the same registries, first and in
// the order the pipeline walks them.
TEST(Registry, BuiltinsAreRegisteredFirstInTheOrderThePipelineWalks) {
  register_test_parts();
  const auto processors = processor_registry().names();
  ASSERT_GE(processors.size(), 22u);
  EXPECT_EQ(std::vector<std::string>(processors.begin(), processors.begin() + 3),
            (std::vector<std::string>{"sequence_bias", "logit_bias", "repetition_penalty"}));
  EXPECT_EQ(processors.back(), "test_add_to_token");  // added after the built-ins
  const auto stopping = stopping_registry().names();
  EXPECT_EQ(std::vector<std::string>(stopping.begin(), stopping.begin() + 4),
            (std::vector<std::string>{"max_length", "max_time", "stop_sequences", "eos"}));
  const auto strategies = strategy_registry().names();
  EXPECT_EQ(std::vector<std::string>(strategies.begin(), strategies.begin() + 4),
            (std::vector<std::string>{"group_beam_search", "beam_search", "sample", "greedy"}));
  for (const auto& info : processor_registry().all()) {
    if (info.name.rfind("test_", 0) == 0) continue;
    EXPECT_TRUE(info.enabled && info.from_settings && info.create) << info.name;
  }
}

// A built-in named in a list is checked like a registered part, before anything runs: its
// parameters are its ResolvedSettings keys.
TEST(Registry, ABuiltinInAListIsCheckedAtValidation) {
  ResolvedSettings c;
  apply_generation_key(c, "processors",
                       Json::array({{{"name", "top_k"}, {"top_k", 3}, {"top_p", 0.5}}}), "x");
  EXPECT_THAT(error_of([&] { c.validate(); }),
              HasSubstr("generation: processors[0] 'top_k': unknown parameter 'top_p'"));
  ResolvedSettings s;
  apply_generation_key(s, "strategy", Json{{"name", "greedy"}, {"k", 1}}, "x");
  EXPECT_THAT(error_of([&] { s.validate(); }), HasSubstr("strategy 'greedy': takes no parameters"));
}

// Naming a built-in strategy gives what the settings would select; a part registered with
// `enabled` joins the chain the settings build, after the built-ins.
TEST(Registry, NamedBuiltinStrategyAndEnabledExtensionFollowTheSamePath) {
  register_test_parts();
  Fixture f;
  EXPECT_EQ(f.run({{"max_new_tokens", 4}, {"num_beams", 2}}),
            f.run({{"max_new_tokens", 4}, {"num_beams", 2}, {"strategy", "beam_search"}}));
  EXPECT_EQ(f.run({{"max_new_tokens", 3}, {"strategy", "greedy"}}), f.run({{"max_new_tokens", 3}}));
  static bool added = false;
  if (!added) {
    added = true;
    ProcessorInfo p;
    p.name = "test_lift_at_repetition_penalty_1_234";
    p.enabled = [](const ResolvedSettings& c) { return c.repetition_penalty == 1.234; };
    p.from_settings = [](const ResolvedSettings&, const PartContext&) {
      return std::make_unique<AddToToken>(5, 1e4);
    };
    p.create = [](const Json&, const PartContext&) { return std::make_unique<AddToToken>(5, 1e4); };
    processor_registry().add(p);
  }
  EXPECT_EQ(f.run({{"max_new_tokens", 3}, {"repetition_penalty", 1.234}}),
            std::vector<int64_t>(3, 5));
  EXPECT_NE(f.run({{"max_new_tokens", 3}, {"repetition_penalty", 1.5}}),
            std::vector<int64_t>(3, 5));
}

}  // namespace
}  // namespace gengraph

// Speculative decoding (framework/decoding/candidates, Generator::run_speculative): prompt
// lookup's candidates equal transformers' PromptLookupCandidateGenerator's, what cannot be
// verified is refused by name before any work, and the results say what the candidates did.
// Token equality with plain decoding on every backend is in tests/backends/
// test_backend_conformance.cpp; equality with transformers' assisted generation in the parity
// fixtures (tools/fixture_cases.py, speculative_cases).
#include <ATen/ATen.h>
#include <gengraph/gengraph.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "backends/register_builtin.h"
#include "framework/backend/backend_registry.h"
#include "framework/decoding/candidates/draft_model.h"
#include "framework/decoding/candidates/prompt_lookup.h"
#include "framework/decoding/registry.h"
#include "framework/decoding/resolved_settings.h"
#include "framework/model/causal_lm.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

TEST(PromptLookup, ProposesWhatTransformersProposes) {
  std::ifstream in(testing::fixtures_dir() + "/prompt_lookup.json");
  ASSERT_TRUE(in) << "tests/fixtures/prompt_lookup.json (tools/make_fixtures.py)";
  const Json doc = Json::parse(in);
  int64_t with_candidates = 0;
  for (const auto& c : doc.at("cases")) {
    const auto history = c.at("history").get<std::vector<int64_t>>();
    PromptLookup lookup(c.at("num_tokens").get<int64_t>(),
                        c.at("max_matching_ngram_size").get<int64_t>(),
                        c.at("eos").get<std::vector<int64_t>>());
    const int64_t room =
        c.at("max_length").get<int64_t>() - static_cast<int64_t>(history.size()) - 1;
    const auto got = lookup.propose(history, room, {});
    EXPECT_EQ(got, c.at("candidates").get<std::vector<int64_t>>()) << c.dump();
    with_candidates += !got.empty();
  }
  EXPECT_GT(with_candidates, 50);  // the fixture exercises matches, not only misses
}

TEST(PromptLookup, ACandidateTheProcessorsBanEndsTheListOrPassesTheWindowOver) {
  PromptLookup lookup(4, 1, {});
  const std::vector<int64_t> history = {7, 1, 2, 7, 3, 7};
  // The first window after 7 is 1 2 7 3; banning token 2 keeps 1.
  EXPECT_EQ(
      lookup.propose(history, 10,
                     [](const std::vector<int64_t>& c) {
                       return static_cast<size_t>(std::find(c.begin(), c.end(), 2) - c.begin());
                     }),
      (std::vector<int64_t>{1}));
  // Banning 1 leaves the first window empty: the next occurrence of 7 gives 3 7.
  EXPECT_EQ(
      lookup.propose(history, 10,
                     [](const std::vector<int64_t>& c) {
                       return static_cast<size_t>(std::find(c.begin(), c.end(), 1) - c.begin());
                     }),
      (std::vector<int64_t>{3, 7}));
  EXPECT_EQ(lookup.propose(history, 1, {}), (std::vector<int64_t>{1}));  // the room left
  EXPECT_TRUE(lookup.propose(history, 0, {}).empty());
  EXPECT_THROW(PromptLookup(0, 2, {}), Error);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

TEST(Speculative, WhatCannotBeVerifiedIsRefusedByName) {
  Engine engine("gpt2-tiny");
  const Json lookup = {{"max_new_tokens", 4}, {"prompt_lookup_num_tokens", 3}};
  EXPECT_THAT(error_of([&] {
                engine.generate({{1, 2, 1}, {3, 4}}, lookup);
              }),
              HasSubstr("verifies one sequence at a time"));
  Json beams = lookup;
  beams["num_beams"] = 2;
  EXPECT_THAT(error_of([&] {
                engine.generate({{1, 2, 1}}, beams);
              }),
              HasSubstr("cannot run beam search (num_beams 2)"));
  Json samples = lookup;
  samples["do_sample"] = true;
  samples["num_return_sequences"] = 2;
  EXPECT_THAT(error_of([&] {
                engine.generate({{1, 2, 1}}, samples);
              }),
              HasSubstr("'num_return_sequences' must be 1"));
  EXPECT_THAT(error_of([&] {
                engine.generate({{1, 2, 1}}, Json{{"prompt_lookup_num_tokens", 0}});
              }),
              HasSubstr("prompt_lookup_num_tokens"));
  EXPECT_THAT(
      error_of([&] {
        engine.generate({{1, 2, 1}}, Json{{"candidate_generator", {{"name", "prompt_lookpu"}}}});
      }),
      HasSubstr("unknown candidate generator 'prompt_lookpu' (did you mean 'prompt_lookup'?)"));
  RunOptions whole;
  whole.whole_step = WholeStep::kOn;
  whole.backend = "cuda_graph";
  whole.backend_options = {{"capture", "false"}};
  Engine stat(engine.model(), whole);
  EXPECT_THAT(error_of([&] {
                stat.generate({{1, 2, 1}}, lookup);
              }),
              HasSubstr("runs in the host loop"));
}

TEST(Speculative, TheGenerationSaysWhatTheCandidatesDid) {
  Engine engine("gpt2-tiny");
  // A prompt that repeats: candidates from the first verify on.
  const std::vector<std::vector<int64_t>> prompt = {{5, 6, 7, 8, 5, 6, 7, 8, 5, 6}};
  const Generation plain = engine.generate(prompt, Json{{"max_new_tokens", 20}});
  const Generation spec =
      engine.generate(prompt, Json{{"max_new_tokens", 20}, {"prompt_lookup_num_tokens", 4}});
  EXPECT_EQ(spec.outputs[0][0].tokens, plain.outputs[0][0].tokens);
  EXPECT_EQ(spec.steps, 20);
  EXPECT_GT(spec.verify_steps, 0);
  EXPECT_LE(spec.candidates_accepted, spec.candidates_proposed);
  // Each verify keeps its accepted candidates and one token of its own.
  EXPECT_EQ(spec.steps - 1, spec.verify_steps + spec.candidates_accepted);
  EXPECT_EQ(spec.settings.at("prompt_lookup_num_tokens"), 4);
  EXPECT_EQ(plain.verify_steps, 0);
}

// A draft model: the same preset as the target proposes exactly what the target chooses (every
// candidate kept); its int8 form mostly agrees (some rejected); either way the tokens are plain
// greedy's, and seeded sampling's.
TEST(DraftModel, ProposesItsGreedyContinuationAndChangesNoToken) {
  Engine engine("gpt2-tiny");
  const std::vector<std::vector<int64_t>> prompt = {{11, 42, 7, 99, 3}};
  const Json plain = {{"max_new_tokens", 24}};
  const auto want = engine.generate(prompt, plain).outputs[0][0].tokens;
  const auto with_draft = [&](Json draft, bool sample = false) {
    draft["name"] = "draft_model";
    Json g = plain;
    g["candidate_generator"] = draft;
    if (sample) g["do_sample"] = true;
    engine.manual_seed(3);
    return engine.generate(prompt, g);
  };
  const Generation same = with_draft({{"model", "preset:gpt2-tiny"}, {"num_tokens", 4}});
  EXPECT_EQ(same.outputs[0][0].tokens, want);
  EXPECT_GT(same.candidates_proposed, 0);
  EXPECT_EQ(same.candidates_accepted, same.candidates_proposed);
  EXPECT_EQ(same.steps - 1, same.verify_steps + same.candidates_accepted);
  // The heuristic schedule grows the proposals while every one is kept: fewer verify forwards.
  const Generation grown =
      with_draft({{"model", "preset:gpt2-tiny"}, {"num_tokens", 2}, {"schedule", "heuristic"}});
  const Generation fixed = with_draft({{"model", "preset:gpt2-tiny"}, {"num_tokens", 2}});
  EXPECT_EQ(grown.outputs[0][0].tokens, want);
  EXPECT_LT(grown.verify_steps, fixed.verify_steps);
  const Generation int8 =
      with_draft({{"model", "preset:gpt2-tiny"}, {"weights", "int8"}, {"num_tokens", 4}});
  EXPECT_EQ(int8.outputs[0][0].tokens, want);
  EXPECT_GT(int8.candidates_accepted, 0);
  // Seeded sampling with sampling: plain_draws: the plain draws, whatever the draft proposes.
  engine.manual_seed(3);
  const auto sampled = engine.generate(prompt, Json{{"max_new_tokens", 24}, {"do_sample", true}});
  const Generation drafted = with_draft({{"model", "preset:gpt2-tiny"},
                                         {"weights", "int8"},
                                         {"num_tokens", 3},
                                         {"sampling", "plain_draws"}},
                                        true);
  EXPECT_EQ(drafted.outputs[0][0].tokens, sampled.outputs[0][0].tokens);
  EXPECT_GT(drafted.verify_steps, 0);
  // By default the draft samples and speculative sampling decides (test_speculative_sampling.cpp
  // checks the distribution): other draws from the same seed.
  const Generation speculative =
      with_draft({{"model", "preset:gpt2-tiny"}, {"weights", "int8"}, {"num_tokens", 3}}, true);
  EXPECT_GT(speculative.candidates_accepted, drafted.candidates_accepted);
}

// The draft's backend is kept for the next generation: a trace draft is traced once for a run
// of generations, not per generation. Drafts built at the same time get backends of their own.
TEST(DraftModel, ItsBackendIsKeptForTheNextGenerationAndNeverShared) {
  Engine engine("gpt2-tiny");
  const std::vector<std::vector<int64_t>> prompt = {{11, 42, 7, 99, 3}};
  const auto want = engine.generate(prompt, Json{{"max_new_tokens", 12}}).outputs[0][0].tokens;
  const Json g = {{"max_new_tokens", 12},
                  {"candidate_generator",
                   {{"name", "draft_model"},
                    {"model", "preset:gpt2-tiny"},
                    {"backend", "trace"},
                    {"num_tokens", 3}}}};
  EXPECT_EQ(engine.generate(prompt, g).outputs[0][0].tokens, want);
  const int64_t made = draft_backends_created();
  EXPECT_EQ(engine.generate(prompt, g).outputs[0][0].tokens, want);
  EXPECT_EQ(draft_backends_created(), made);

  const DraftModelOptions o =
      read_draft_model_options({{"model", "preset:gpt2-tiny"}, {"options", {{"cache", "static"}}}});
  const auto target = testing::test_model("preset:gpt2-tiny", 0);
  { DraftModel a(o, target.get(), 16), b(o, target.get(), 16); }
  const int64_t two = draft_backends_created();
  { DraftModel a(o, target.get(), 16), b(o, target.get(), 16); }  // both given back, both kept
  EXPECT_EQ(draft_backends_created(), two);
  { DraftModel a(o, target.get(), 16), b(o, target.get(), 16), c(o, target.get(), 16); }
  EXPECT_EQ(draft_backends_created(), two + 1);
}

TEST(DraftModel, BadParametersAndAnotherVocabularyAreRefusedByName) {
  Engine engine("gpt2-tiny");
  const auto refusal = [&](const Json& draft) {
    return error_of([&] {
      engine.generate({{1, 2, 3}}, Json{{"max_new_tokens", 4}, {"candidate_generator", draft}});
    });
  };
  EXPECT_THAT(refusal({{"name", "draft_model"}}), HasSubstr("parameter 'model' is required"));
  EXPECT_THAT(refusal({{"name", "draft_model"}, {"model", "preset:gpt2-tiny"}, {"num_token", 3}}),
              HasSubstr("unknown parameter 'num_token' (did you mean 'num_tokens'?)"));
  EXPECT_THAT(refusal({{"name", "draft_model"}, {"model", "preset:gpt2-tiny"}, {"schedule", "x"}}),
              HasSubstr("'schedule': expected constant or heuristic"));
  EXPECT_THAT(refusal({{"name", "draft_model"}, {"model", "preset:gpt2-tiny"}, {"sampling", "x"}}),
              HasSubstr("'sampling': expected speculative or plain_draws, found 'x'"));
  EXPECT_THAT(
      refusal({{"name", "draft_model"}, {"model", "preset:gpt2-tiny"}, {"backend", "egaer"}}),
      HasSubstr("unknown backend 'egaer'"));
  EXPECT_THAT(refusal({{"name", "draft_model"}, {"model", "/no/such/folder"}}),
              HasSubstr("'model': '/no/such/folder': no such model folder"));
  const std::string other = testing::fixtures_dir() + "/models/gpt2-a";  // 96 tokens
  EXPECT_THAT(refusal({{"name", "draft_model"}, {"model", other}}),
              HasSubstr("a draft must share the target's vocabulary"));
}

// Early exit: the target's own first layers draft. Their proposals are the truncated model's
// greedy continuation, so the tokens are plain greedy's (and seeded sampling's) whatever they
// propose, on every architecture and with quantized weights; with every layer but none it is the
// target itself.
TEST(EarlyExit, TheFirstLayersDraftAndChangeNoToken) {
  for (const std::string which : {"gpt2-tiny", "llama-tiny", "gptj-tiny"}) {
    for (const std::string weights : {"float", "int8"}) {
      EngineOptions o;
      o.model_config = {{which == "llama-tiny" ? "num_hidden_layers" : "n_layer", 4}};
      o.weights = weights;
      Engine engine(which, o);
      const std::vector<std::vector<int64_t>> prompt = {{11, 42, 7, 99, 3}};
      const Json plain = {{"max_new_tokens", 20}};
      const auto want = engine.generate(prompt, plain).outputs[0][0].tokens;
      const std::string what = which + " " + weights;
      for (const int64_t layers : {1, 3}) {
        Json g = plain;
        g["assistant_early_exit"] = layers;
        const Generation r = engine.generate(prompt, g);
        EXPECT_EQ(r.outputs[0][0].tokens, want) << what << " layers " << layers;
        EXPECT_GT(r.verify_steps, 0) << what;
        EXPECT_EQ(r.steps - 1, r.verify_steps + r.candidates_accepted) << what;
        EXPECT_EQ(r.settings.at("assistant_early_exit"), layers);
      }
      engine.manual_seed(4);
      const auto sampled =
          engine.generate(prompt, Json{{"max_new_tokens", 20}, {"do_sample", true}});
      engine.manual_seed(4);
      const auto drafted = engine.generate(prompt, Json{{"max_new_tokens", 20},
                                                        {"do_sample", true},
                                                        {"candidate_generator",
                                                         {{"name", "early_exit"},
                                                          {"layers", 2},
                                                          {"num_tokens", 3},
                                                          {"sampling", "plain_draws"}}}});
      EXPECT_EQ(drafted.outputs[0][0].tokens, sampled.outputs[0][0].tokens) << what;
      EXPECT_GT(drafted.verify_steps, 0) << what;
    }
  }
}

// The draft is the target's first layers, not the target: its layer count, the embeddings and
// head shared as tensors with the target's, and other logits than the whole model's.
TEST(EarlyExit, TheDraftIsTheFirstLayersOfTheTarget) {
  register_builtin_backends();
  const auto target = testing::test_model("preset:llama-tiny", 3);
  const auto draft = early_exit_model(*target, 1);
  EXPECT_EQ(draft->config().num_layers, 1);
  EXPECT_EQ(target->config().num_layers, 2);
  for (const std::string name :
       {"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"}) {
    ASSERT_TRUE(draft->weights().count(name)) << name;
    EXPECT_EQ(draft->weights().at(name).data_ptr(), target->weights().at(name).data_ptr()) << name;
  }
  EXPECT_FALSE(draft->weights().count("model.layers.1.mlp.down_proj.weight"));
  auto& registry = BackendRegistry::instance();
  const auto logits = [&](std::shared_ptr<const CausalLM> m) {
    auto be = registry.create("eager", m, BackendOptions("eager", {}));
    be->prepare(1, 8);
    const auto ids = at::tensor({3, 4, 5}, at::kLong).unsqueeze(0);
    return be->prefill(StepInputs{ids, at::arange(3, at::kLong).unsqueeze(0), ids.ne(-1), {}});
  };
  const at::Tensor a = logits(target), b = logits(draft);
  EXPECT_TRUE(b.isfinite().all().item<bool>());
  EXPECT_GT((a - b).abs().max().item<float>(), 1e-3);
  EXPECT_THAT(error_of([&] { early_exit_model(*target, 2); }), HasSubstr("expected 1 .. 1"));
}

TEST(EarlyExit, BadLayerCountsAndTwoCandidateSourcesAreRefusedByName) {
  Engine engine("gpt2-tiny");  // 2 layers
  const auto refusal = [&](const Json& g) {
    return error_of([&] {
      Json s = g;
      s["max_new_tokens"] = 4;
      engine.generate({{1, 2, 3}}, s);
    });
  };
  EXPECT_THAT(refusal({{"assistant_early_exit", 2}}),
              HasSubstr("early exit after 2 layer(s): expected 1 .. 1"));
  EXPECT_THAT(refusal({{"assistant_early_exit", 0}}), HasSubstr("assistant_early_exit"));
  EXPECT_THAT(refusal({{"assistant_early_exit", 1}, {"prompt_lookup_num_tokens", 3}}),
              HasSubstr("each choose speculative decoding's candidates; give one"));
  EXPECT_THAT(refusal({{"assistant_early_exit", 1}, {"num_beams", 2}}),
              HasSubstr("assistant_early_exit) verifies the candidates of one sequence"));
  EXPECT_THAT(refusal({{"candidate_generator", {{"name", "early_exit"}}}}),
              HasSubstr("parameter 'layers': expected an integer >= 1"));
  EXPECT_THAT(refusal({{"candidate_generator",
                        {{"name", "early_exit"}, {"layers", 1}, {"model", "preset:gpt2-tiny"}}}}),
              HasSubstr("unknown parameter 'model'"));
}

}  // namespace
}  // namespace gengraph

// The public facade: the CLI's tokens for the same model and settings, streaming, and errors that
// name the input before any weight is loaded. Text in and out: test_engine_text.cpp.
#include <gengraph/gengraph.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <thread>
#include <type_traits>

#include "framework/decoding/resolved_settings.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using testing::error_of;
using ::testing::HasSubstr;
using Json = nlohmann::json;

// The first sequence of every input of the first row of a results file the CLI wrote.
std::vector<std::vector<int64_t>> cli_tokens(const std::vector<std::string>& args) {
  testing::TempDir dir;
  std::vector<std::string> a = args;
  const std::string out = (dir / "out.json").string();
  for (const std::string& x : {std::string("--quiet"), std::string("--output"), out})
    a.push_back(x);
  EXPECT_EQ(testing::cli(a), 0);
  const Json doc = Json::parse(testing::read_file(out));
  std::vector<std::vector<int64_t>> tokens;
  for (const auto& input : doc["runs"][0]["outputs"])
    tokens.push_back(input["sequences"][0]["tokens"].get<std::vector<int64_t>>());
  return tokens;
}

std::vector<std::vector<int64_t>> first_sequences(const Generation& g) {
  std::vector<std::vector<int64_t>> out;
  for (const auto& in : g.outputs) out.push_back(in.at(0).tokens);
  return out;
}

TEST(Engine, GivesTheCliTokensForAPresetAndAFolder) {
  const std::vector<std::vector<int64_t>> prompts = {{11, 42, 7}, {5, 6}};
  Engine preset("gpt2-tiny");
  EXPECT_EQ(first_sequences(preset.generate(prompts, {{"max_new_tokens", 9}, {"num_beams", 3}})),
            cli_tokens({"generate", "--model", "gpt2-tiny", "--prompt", "11,42,7", "--prompt",
                        "5,6", "--max-new-tokens", "9", "--set", "generation.num_beams=3"}));
  // A folder: its generation_config.json is layered under the settings, as the CLI does.
  const std::string folder = testing::fixtures_dir() + "/models/gpt2-a";
  EngineOptions o;
  o.backend = "trace";
  Engine from_folder(folder, o);
  EXPECT_EQ(from_folder.model_source(), folder);
  EXPECT_EQ(first_sequences(from_folder.generate(prompts, {{"max_new_tokens", 7}})),
            cli_tokens({"generate", "--model", folder, "--backend", "trace", "--prompt", "11,42,7",
                        "--prompt", "5,6", "--max-new-tokens", "7"}));
}

TEST(Engine, SampledTokensMatchTheCliWhenSeededAsItSeeds) {
  Engine engine("gpt2-tiny");
  const Json settings = {{"max_new_tokens", 10}, {"do_sample", true}, {"top_k", 20}};
  // Generated before the CLI runs (an argument order would let the CLI's run draw first).
  engine.manual_seed(0);
  const auto sampled = first_sequences(engine.generate({{3, 4, 5}}, settings));
  EXPECT_EQ(sampled, cli_tokens({"generate", "--model", "gpt2-tiny", "--prompt", "3,4,5",
                                 "--max-new-tokens", "10", "--set", "generation.do_sample=true",
                                 "--set", "generation.top_k=20"}));
}

TEST(Engine, StreamsEveryOutputTokenOnceInOrderAndNoPadding) {
  Engine engine("gpt2-tiny");
  const std::vector<std::vector<int64_t>> prompts = {{11, 42, 7}, {5}};
  const auto plain = first_sequences(engine.generate(prompts, {{"max_new_tokens", 10}}));
  // Make input 0 finish early: its first token not seen before it becomes an EOS id, so it
  // receives padding after.
  size_t k = 1;
  while (k < plain[0].size() &&
         std::find(plain[0].begin(), plain[0].begin() + k, plain[0][k]) != plain[0].begin() + k)
    ++k;
  ASSERT_LT(k, plain[0].size()) << "greedy repeated one token throughout; pick other prompts";
  const int64_t eos = plain[0][k];
  const Json settings = {{"max_new_tokens", 10}, {"eos_token_id", eos}, {"pad_token_id", 0}};
  std::vector<std::vector<int64_t>> streamed(prompts.size());
  int64_t last_step = -1;
  const Generation g = engine.generate(prompts, settings, [&](const StreamedToken& t) {
    EXPECT_GE(t.step, last_step);  // step order
    last_step = t.step;
    EXPECT_EQ(t.sequence, 0);
    EXPECT_EQ(t.step, static_cast<int64_t>(streamed.at(t.input).size()));
    streamed.at(t.input).push_back(t.token);
    return true;
  });
  EXPECT_EQ(streamed, first_sequences(g));
  EXPECT_EQ(streamed[0].size(), k + 1);  // stopped at the EOS, which is streamed; no padding after
  EXPECT_EQ(streamed[0].back(), eos);
}

TEST(Engine, StreamsEachSampledSequence) {
  Engine engine("gpt2-tiny");
  engine.manual_seed(3);
  std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> streamed;
  const Generation g = engine.generate(
      {{1, 2}, {3}}, {{"max_new_tokens", 5}, {"do_sample", true}, {"num_return_sequences", 2}},
      [&](const StreamedToken& t) {
        streamed[{t.input, t.sequence}].push_back(t.token);
        return true;
      });
  ASSERT_EQ(streamed.size(), 4u);
  for (const auto& [key, tokens] : streamed)
    EXPECT_EQ(tokens, g.outputs.at(key.first).at(key.second).tokens);
}

// A stream that returns false stops the generation after that step; the result holds every
// sequence as far as it got, the prefix of what the full generation gives.
TEST(Engine, AStreamThatReturnsFalseStopsWithThePartialResult) {
  Engine engine("gpt2-tiny");
  const std::vector<std::vector<int64_t>> prompts = {{1, 2, 3}, {4, 5}};
  const Json settings = {{"max_new_tokens", 10}};
  const Generation full = engine.generate(prompts, settings);
  int64_t handed = 0;
  const Generation part = engine.generate(prompts, settings, [&](const StreamedToken& t) {
    ++handed;
    return !(t.input == 0 && t.step == 2);  // stop after the third token of the first prompt
  });
  EXPECT_EQ(handed, 6);  // the rest of that step's tokens are still handed over
  EXPECT_EQ(part.steps, 3);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto& got = part.outputs.at(i).at(0).tokens;
    const auto& all = full.outputs.at(i).at(0).tokens;
    ASSERT_EQ(got.size(), 3u) << i;
    EXPECT_EQ(got, std::vector<int64_t>(all.begin(), all.begin() + 3)) << i;
  }
}

// output_scores: each token's log-probability, streamed and returned, the sequence's score their
// sum for greedy search; beam search's tokens sum to its length-normalised score. (Their values
// against transformers' are in the parity suite.)
TEST(Engine, OutputScoresGiveEachTokensLogProbability) {
  Engine engine("gpt2-tiny");
  std::vector<double> streamed;
  std::vector<bool> last;
  const Generation g = engine.generate(
      {{1, 2, 3}}, {{"max_new_tokens", 6}, {"output_scores", true}}, [&](const StreamedToken& t) {
        streamed.push_back(t.logprob);
        last.push_back(t.last);
        return true;
      });
  const Sequence& s = g.outputs.at(0).at(0);
  ASSERT_EQ(s.token_scores.size(), s.tokens.size());
  EXPECT_EQ(streamed, s.token_scores);
  EXPECT_EQ(last, std::vector<bool>({false, false, false, false, false, true}));
  double sum = 0;
  for (double x : s.token_scores) {
    EXPECT_LE(x, 0.0);
    sum += x;
  }
  ASSERT_TRUE(s.score.has_value());
  EXPECT_DOUBLE_EQ(*s.score, sum);
  EXPECT_EQ(g.settings.at("output_scores"), true);
  // Without it: no scores, NaN in the stream.
  const Generation plain =
      engine.generate({{1, 2, 3}}, {{"max_new_tokens", 2}}, [&](const StreamedToken& t) {
        EXPECT_TRUE(std::isnan(t.logprob));
        return true;
      });
  EXPECT_TRUE(plain.outputs.at(0).at(0).token_scores.empty());
  EXPECT_FALSE(plain.outputs.at(0).at(0).score.has_value());

  const Generation beams = engine.generate(
      {{1, 2, 3}}, {{"max_new_tokens", 5}, {"num_beams", 3}, {"output_scores", true}});
  const Sequence& b = beams.outputs.at(0).at(0);
  ASSERT_EQ(b.token_scores.size(), b.tokens.size());
  double beam_sum = 0;
  for (double x : b.token_scores) beam_sum += x;
  ASSERT_TRUE(b.score.has_value());
  EXPECT_NEAR(*b.score, beam_sum / static_cast<double>(b.tokens.size()), 1e-5);  // length_penalty 1
  // Diverse beam search: every returned sequence, of every group, scores the sum of its tokens'
  // processed log-probabilities (the diversity penalty included) over its length. No EOS here, so
  // no sequence gets transformers' appended EOS.
  const Generation diverse = engine.generate({{1, 2}, {3, 4, 5}}, {{"max_new_tokens", 6},
                                                                   {"num_beams", 4},
                                                                   {"num_beam_groups", 2},
                                                                   {"diversity_penalty", 3.0},
                                                                   {"num_return_sequences", 4},
                                                                   {"eos_token_id", nullptr},
                                                                   {"output_scores", true}});
  ASSERT_EQ(diverse.outputs.size(), 2U);
  for (const auto& per_input : diverse.outputs) {
    ASSERT_EQ(per_input.size(), 4U);
    for (const Sequence& d : per_input) {
      ASSERT_EQ(d.tokens.size(), 6U);
      ASSERT_EQ(d.token_scores.size(), d.tokens.size());
      double sum = 0;
      for (double x : d.token_scores) {
        EXPECT_LE(x, 0.0);
        sum += x;
      }
      ASSERT_TRUE(d.score.has_value());
      EXPECT_NEAR(*d.score, sum / 6.0, 1e-5 * std::max(1.0, std::abs(*d.score)));
    }
  }
}

TEST(Engine, BeamSearchRefusesToStream) {
  Engine engine("gpt2-tiny");
  EXPECT_THAT(
      error_of([&] {
        engine.generate({{1, 2}}, {{"num_beams", 2}}, [](const StreamedToken&) { return true; });
      }),
      HasSubstr("'beam_search' strategy chooses its sequences only when it finishes"));
}

// The whole step through the facade: the same tokens as the host loop, or the reason it cannot.
TEST(Engine, RunsTheWholeStepOrSaysWhyNot) {
  EngineOptions o;
  o.backend = "cuda_graph";
  o.backend_options = {{"capture", "false"}};
  Engine host("gpt2-tiny", o);
  o.whole_step = WholeStep::kOn;
  o.capture = false;
  Engine whole("gpt2-tiny", o);
  const Json settings = {{"max_new_tokens", 6}, {"num_beams", 3}};
  // Calls with the same settings share one generator (and its whole-step state): the second one
  // must start clean.
  for (const std::vector<std::vector<int64_t>> prompts :
       {std::vector<std::vector<int64_t>>{{1, 2, 3}, {4}}, {{7, 8, 9}, {5, 5}}}) {
    const Generation a = host.generate(prompts, settings);
    const Generation b = whole.generate(prompts, settings);
    EXPECT_FALSE(a.whole_step);
    EXPECT_TRUE(b.whole_step);
    ASSERT_EQ(a.outputs.size(), b.outputs.size());
    for (size_t i = 0; i < a.outputs.size(); ++i)
      EXPECT_EQ(a.outputs[i][0].tokens, b.outputs[i][0].tokens);
  }
  EngineOptions e;
  e.whole_step = WholeStep::kAuto;
  const Generation c = Engine("gpt2-tiny", e).generate({{1, 2}}, {{"max_new_tokens", 2}});
  EXPECT_FALSE(c.whole_step);
  EXPECT_THAT(c.whole_step_fallback, HasSubstr("backend 'eager' has no static decode step"));
  // The device is typed too: text that names none is refused where it is given.
  EXPECT_THAT(error_of([&] { e.device = "tpu"; }),
              HasSubstr("Device: expected cpu, cuda or cuda:N, found 'tpu'"));
  EXPECT_THAT(error_of([&] { e.device = "cuda:x"; }), HasSubstr("found 'cuda:x'"));
  e.device = "cuda:1";
  EXPECT_EQ(e.device.kind, Device::Kind::kCuda);
  EXPECT_EQ(e.device.index, 1);
  EXPECT_EQ(e.device.str(), "cuda:1");
  EXPECT_EQ(Device().str(), "cpu");
}

// Typed settings are the JSON form by other means: the same tokens, scores and resolved settings,
// the same errors naming the key; a key given twice is refused.
TEST(Engine, TypedSettingsAreTheJsonSettings) {
  Engine engine("gpt2-tiny");
  const std::vector<std::vector<int64_t>> prompts = {{11, 42, 7}, {5, 6}};
  GenerationSettings typed;
  typed.max_new_tokens = 7;
  typed.num_beams = 3;
  typed.length_penalty = 0.5;
  typed.early_stopping = GenerationSettings::EarlyStopping::kNever;
  typed.output_scores = true;
  const Json processors =
      Json::parse(R"([{"name": "repetition_penalty", "repetition_penalty": 1.3}])");
  typed.more = {{"processors", processors}};
  const Json json = {{"max_new_tokens", 7},   {"num_beams", 3},
                     {"length_penalty", 0.5}, {"early_stopping", "never"},
                     {"output_scores", true}, {"processors", processors}};
  EXPECT_EQ(typed.to_json(), json);
  const Generation a = engine.generate(prompts, typed), b = engine.generate(prompts, json);
  EXPECT_EQ(a.settings, b.settings);
  ASSERT_EQ(a.outputs.size(), b.outputs.size());
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    ASSERT_EQ(a.outputs[i].size(), b.outputs[i].size());
    for (size_t k = 0; k < a.outputs[i].size(); ++k) {
      EXPECT_EQ(a.outputs[i][k].tokens, b.outputs[i][k].tokens);
      EXPECT_EQ(a.outputs[i][k].token_scores, b.outputs[i][k].token_scores);
    }
  }
  // Sampling, typed.
  GenerationSettings sample;
  sample.do_sample = true;
  sample.top_k = 20;
  sample.temperature = 0.7;
  sample.max_new_tokens = 5;
  engine.manual_seed(3);
  const auto s1 = first_sequences(engine.generate({{3, 4}}, sample));
  engine.manual_seed(3);
  EXPECT_EQ(s1, first_sequences(engine.generate({{3, 4}}, sample.to_json())));
  // Errors: the same message as the JSON form's, naming the key.
  GenerationSettings bad;
  bad.num_beams = 0;
  EXPECT_EQ(error_of([&] { engine.generate(prompts, bad); }), error_of([&] {
              engine.generate(prompts, {{"num_beams", 0}});
            }));
  EXPECT_THAT(error_of([&] { engine.generate(prompts, bad); }), HasSubstr("num_beams"));
  GenerationSettings twice;
  twice.top_k = 5;
  twice.more = {{"top_k", 6}};
  EXPECT_THAT(error_of([&] { twice.to_json(); }),
              HasSubstr("GenerationSettings: 'top_k' is given both as a field and in `more`"));
  twice.more = Json::array();
  EXPECT_THAT(error_of([&] { twice.to_json(); }),
              HasSubstr("GenerationSettings::more: expected a JSON object of generation keys"));
}

// Every field of GenerationSettings is a generation key gengraph reads (transformers' names).
TEST(Engine, EveryTypedSettingIsAGenerationKey) {
  GenerationSettings all;
  all.max_new_tokens = all.min_new_tokens = all.max_length = all.min_length = 1;
  all.max_time = 1;
  all.do_sample = true;
  all.num_beams = all.num_beam_groups = all.num_return_sequences = 1;
  all.length_penalty = all.diversity_penalty = 1;
  all.early_stopping = GenerationSettings::EarlyStopping::kTrue;
  all.temperature = all.top_p = all.min_p = all.typical_p = all.epsilon_cutoff = 0.5;
  all.eta_cutoff = 0.5;
  all.top_k = 1;
  all.repetition_penalty = all.presence_penalty = all.frequency_penalty = 1;
  all.no_repeat_ngram_size = 1;
  all.bad_words_ids = all.stop_sequences = std::vector<std::vector<int64_t>>{{1}};
  all.suppress_tokens = all.begin_suppress_tokens = all.forced_eos_token_id =
      std::vector<int64_t>{1};
  all.forced_bos_token_id = 1;
  all.exponential_decay_length_penalty = std::make_pair(int64_t{1}, 1.5);
  all.remove_invalid_values = all.renormalize_logits = true;
  all.eos_token_id = std::vector<int64_t>{1};
  all.pad_token_id = all.bos_token_id = 1;
  all.output_scores = true;
  all.top_logprobs = 1;
  all.prompt_lookup_num_tokens = all.max_matching_ngram_size = all.assistant_early_exit = 1;
  const Json j = all.to_json();
  // Every key but the parts (candidate_generator among them) and the token maps, which `more`
  // carries as JSON.
  std::vector<std::string> expected, got;
  for (const std::string& key : generation_keys()) {
    if (key != "processors" && key != "stopping_criteria" && key != "strategy" &&
        key != "candidate_generator" && key != "logit_bias" && key != "sequence_bias") {
      expected.push_back(key);
    }
  }
  for (auto it = j.begin(); it != j.end(); ++it) got.push_back(it.key());
  std::sort(expected.begin(), expected.end());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, expected);
  // ... and each is read as the JSON form reads it.
  ResolvedSettings c;
  for (auto it = j.begin(); it != j.end(); ++it) apply_generation_key(c, it.key(), it.value(), "t");
  EXPECT_EQ(c.exponential_decay_length_penalty->second, 1.5);
}

TEST(Engine, ErrorsNameTheInputBeforeAnyLoad) {
  EXPECT_THAT(error_of([] { Engine("no/such/folder"); }),
              HasSubstr("model 'no/such/folder': no such model folder"));
  // A file where a model folder belongs is named as a file.
  const std::string file = ::testing::TempDir() + "/engine_model_is_a_file.txt";
  { std::ofstream(file) << "not a model\n"; }
  EXPECT_THAT(error_of([&] { Engine{file}; }),
              HasSubstr("model '" + file + "' is not a folder: it is a file"));
  EXPECT_THAT(error_of([] { Engine("gpt2-tinny"); }), HasSubstr("gpt2-tiny"));
  EngineOptions o;
  o.backend = "eagre";
  EXPECT_THAT(error_of([&] { Engine("gpt2-tiny", o); }),
              HasSubstr("unknown backend 'eagre' (did you mean 'eager'?)"));
  o.backend = "eager";
  o.backend_options = {{"cache", "staic"}};
  EXPECT_THAT(error_of([&] { Engine("gpt2-tiny", o); }), HasSubstr("staic"));
  o.backend_options = {{"cahce", "static"}};
  EXPECT_THAT(error_of([&] { Engine("gpt2-tiny", o); }), HasSubstr("cahce"));
  Engine engine("gpt2-tiny");
  EXPECT_THAT(error_of([&] {
                engine.generate({{1}}, {{"max_new_tokns", 3}});
              }),
              HasSubstr("max_new_tokns"));
  // One prefix for every settings error, whether the key's reader or the combined check finds it
  // (both said "generation:" in the CLI, the Engine's reader said "settings:").
  EXPECT_THAT(error_of([&] { engine.generate({{1}}, Json::array()); }),
              HasSubstr("generation: expected a mapping of generation keys"));
  EXPECT_THAT(error_of([&] {
                engine.generate({{1}}, {{"top_k", -1}});
              }),
              HasSubstr("generation: 'top_k': expected an integer >= 0, found -1"));
  EXPECT_THAT(error_of([&] {
                engine.generate({{1}}, {{"num_beams", 2}, {"num_return_sequences", 3}});
              }),
              HasSubstr("generation: 'num_return_sequences' (3) must not exceed num_beams (2)"));
  EXPECT_THAT(error_of([&] {
                engine.generate({{1, 5000}});
              }),
              HasSubstr("id 5000 is outside the vocabulary [0, 1024)"));
}

TEST(Engine, ReportsTheModelsDefaultsAndItsBackend) {
  EngineOptions o;
  o.backend_options = {{"cache", "static"}};
  Engine engine("gpt2-tiny", o);
  EXPECT_EQ(engine.backend(), "eager");
  EXPECT_EQ(engine.vocab_size(), 1024);
  EXPECT_EQ(engine.backend_report().value("static_cache", 0.0), 1.0);
  const Json d = engine.default_settings();
  EXPECT_EQ(d["num_beams"], 1);
  EXPECT_EQ(d["top_k"], 50);
}

// EngineOptions::group_size went to the quantizer unchecked: 0 divided by zero (SIGFPE), 16 was
// refused only by the kernel at the first generate. Now model.group_size's one check, at once.
TEST(Engine, GroupSizeIsCheckedAsModelGroupSizeIs) {
  // 0 is not given: int4's groups of 32.
  for (const int64_t g : {-32, 7, 16, 48, 512}) {
    EngineOptions o;
    o.weights = "int4";
    o.group_size = g;
    EXPECT_EQ(error_of([&] { Engine("gpt2-tiny", o); }),
              "EngineOptions::group_size: expected 32, 64, 128 or 256, found " + std::to_string(g) +
                  " (or not given: int4 groups of 32, int8 a scale per output channel)")
        << g;
  }
  EngineOptions o;
  o.weights = "int4";
  o.group_size = 64;
  Engine engine("gpt2-tiny", o);
  EXPECT_EQ(engine.generate({{1, 2, 3}}, {{"max_new_tokens", 2}}).outputs.size(), 1u);
}

// Two threads on one Engine segfaulted inside the model's forward (issue 25): calls are now
// serialised, so each thread gets what it gets alone, whatever the interleaving; and a call from
// the Engine's own stream callback, which would wait on itself, is refused.
TEST(Engine, CallsFromSeveralThreadsAreSerialised) {
  for (const char* cache : {"growing", "static"}) {
    SCOPED_TRACE(cache);
    EngineOptions o;
    o.backend_options = {{"cache", cache}};
    Engine engine("gpt2-tiny", o);
    // Settings that differ per thread, so the Engine also swaps its reused generator between
    // calls.
    const std::vector<Json> settings = {{{"max_new_tokens", 12}},
                                        {{"max_new_tokens", 7}, {"num_beams", 3}},
                                        {{"max_new_tokens", 9}, {"repetition_penalty", 1.3}}};
    const std::vector<std::vector<std::vector<int64_t>>> prompts = {
        {{1, 2, 3}, {9}}, {{4, 5}}, {{6, 7, 8, 9}, {10, 11}}};
    std::vector<std::vector<std::vector<int64_t>>> alone;
    for (size_t t = 0; t < settings.size(); ++t)
      alone.push_back(first_sequences(engine.generate(prompts[t], settings[t])));
    std::vector<std::vector<std::vector<std::vector<int64_t>>>> got(settings.size());
    std::vector<std::string> errors(settings.size());
    std::vector<std::thread> threads;
    for (size_t t = 0; t < settings.size(); ++t) {
      threads.emplace_back([&, t] {
        try {
          for (int i = 0; i < 4; ++i)
            got[t].push_back(first_sequences(engine.generate(prompts[t], settings[t])));
        } catch (const std::exception& e) {
          errors[t] = e.what();
        }
      });
    }
    for (auto& th : threads) th.join();
    for (size_t t = 0; t < settings.size(); ++t) {
      EXPECT_EQ(errors[t], "") << "thread " << t;
      ASSERT_EQ(got[t].size(), 4u) << "thread " << t;
      for (const auto& g : got[t]) EXPECT_EQ(g, alone[t]) << "thread " << t;
    }
  }
}

// One loaded Model serves several Engines (backends side by side without a second load): each
// gives the tokens an Engine that loaded the model itself gives, they may run at the same time on
// separate threads, and the weights outlive the Model object while an Engine holds them.
static_assert(!std::is_constructible_v<Engine, const Model&, const EngineOptions&>,
              "an Engine on a Model takes RunOptions: the Model's form is fixed");

TEST(Engine, OneModelServesSeveralEnginesSharingItsWeights) {
  const std::vector<std::vector<int64_t>> prompts = {{11, 42, 7}, {5, 6}};
  const Json settings = {{"max_new_tokens", 9}, {"num_beams", 3}};
  Engine alone("gpt2-tiny");
  const auto want = first_sequences(alone.generate(prompts, settings));
  std::unique_ptr<Engine> eager, traced;
  {
    const Model model("gpt2-tiny");
    EXPECT_EQ(model.source(), "preset:gpt2-tiny");
    EXPECT_EQ(model.vocab_size(), alone.vocab_size());
    eager = std::make_unique<Engine>(model);
    RunOptions trace;
    trace.backend = "trace";
    traced = std::make_unique<Engine>(model, trace);
    EXPECT_THAT(error_of([&] {
                  RunOptions bad;
                  bad.backend = "eagre";
                  Engine e(model, bad);
                }),
                HasSubstr("unknown backend 'eagre'"));
  }  // the Model object is gone; its weights are not
  // One loaded model under both (the same load's record), another under the Engine that loaded
  // its own.
  EXPECT_EQ(&eager->model().warnings(), &traced->model().warnings());
  EXPECT_NE(&eager->model().warnings(), &alone.model().warnings());
  EXPECT_EQ(traced->backend(), "trace");
  std::vector<std::vector<int64_t>> got_eager, got_traced;
  std::thread a([&] { got_eager = first_sequences(eager->generate(prompts, settings)); });
  std::thread b([&] { got_traced = first_sequences(traced->generate(prompts, settings)); });
  a.join();
  b.join();
  EXPECT_EQ(got_eager, want);
  EXPECT_EQ(got_traced, want);
  // A third Engine from an Engine's model.
  Engine third(eager->model());
  EXPECT_EQ(first_sequences(third.generate(prompts, settings)), want);
}

TEST(Engine, PresetPrefixAlwaysNamesAPreset) {
  // Model::source() gives a preset as "preset:NAME", and the same text loads it again.
  const Model model("preset:gpt2-tiny");
  EXPECT_EQ(model.source(), "preset:gpt2-tiny");
  const Model again(model.source());
  EXPECT_EQ(again.vocab_size(), model.vocab_size());
  // A folder named like the preset is read as a folder (here not a model); the prefix always
  // means the preset, and an unknown preset is named.
  const std::string folder = ::testing::TempDir() + "/gpt2-tiny";
  std::filesystem::create_directories(folder);
  EXPECT_THAT(error_of([&] { Model m(folder); }), HasSubstr(folder));
  EXPECT_EQ(Model("preset:gpt2-tiny").source(), "preset:gpt2-tiny");
  EXPECT_THAT(error_of([] { Model m("preset:gpt2-tinyy"); }), HasSubstr("gpt2-tinyy"));
}

TEST(Engine, ACallFromItsOwnStreamCallbackIsRefused) {
  Engine engine("gpt2-tiny");
  std::string inner;
  const Generation g =
      engine.generate({{1, 2}}, {{"max_new_tokens", 3}}, [&](const StreamedToken&) {
        if (inner.empty())
          inner = error_of([&] { engine.generate({{3}}, {{"max_new_tokens", 2}}); });
        return true;
      });
  EXPECT_THAT(inner, HasSubstr("Engine::generate: called from inside this Engine's own generate"));
  EXPECT_EQ(g.outputs.at(0).at(0).tokens.size(), 3u);  // the outer call went on
  // And the Engine serves the next call as usual.
  EXPECT_EQ(engine.generate({{3}}, {{"max_new_tokens", 2}}).outputs.at(0).at(0).tokens.size(), 2u);
}

}  // namespace
}  // namespace gengraph

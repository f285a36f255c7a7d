// The example's parts, each registered by name and checked against gengraph's own behaviour.
#include <gengraph/cli.h>
#include <gengraph/extension.h>
#include <gtest/gtest.h>

#include <fstream>

#include "decoding_parts.h"
#include "recompute_backend.h"

namespace {

using Json = nlohmann::json;
const std::vector<std::vector<int64_t>> kPrompts = {{1, 2, 3, 4}, {5}};

void register_all() {
  static bool done = false;
  if (done) return;
  example::register_recompute_backend();
  example::register_decoding_parts();
  done = true;
}

std::vector<std::vector<int64_t>> tokens(const gengraph::Generation& g) {
  std::vector<std::vector<int64_t>> out;
  for (const auto& in : g.outputs) out.push_back(in.at(0).tokens);
  return out;
}

TEST(Extension, EveryPartIsRegisteredByName) {
  register_all();
  EXPECT_TRUE(gengraph::BackendRegistry::instance().contains("recompute"));
  EXPECT_TRUE(gengraph::processor_registry().contains("ban_token_range"));
  EXPECT_TRUE(gengraph::stopping_registry().contains("stop_on_repeat"));
  EXPECT_TRUE(gengraph::strategy_registry().contains("epsilon_greedy"));
}

TEST(Extension, RecomputeBackendIsTokenIdenticalToEager) {
  register_all();
  gengraph::EngineOptions o;
  gengraph::Engine eager("gpt2-tiny");
  o.backend = "recompute";
  gengraph::Engine recompute("gpt2-tiny", o);
  const Json settings = {{"max_new_tokens", 10}};
  EXPECT_EQ(tokens(eager.generate(kPrompts, settings)),
            tokens(recompute.generate(kPrompts, settings)));
  const Json beams = {{"max_new_tokens", 6}, {"num_beams", 3}};
  EXPECT_EQ(tokens(eager.generate(kPrompts, beams)), tokens(recompute.generate(kPrompts, beams)));
}

// The checks the built-in backends pass, through the installed header: every strategy's tokens
// and scores and the logits against eager; the recompute backend keeps no cache to rewind, so
// the speculative check is skipped, and says why.
TEST(Extension, RecomputeBackendPassesTheConformanceChecks) {
  register_all();
  const Json report = gengraph::check_backend_conformance("recompute", {});
  EXPECT_TRUE(report["passed"].get<bool>()) << report.dump(2);
  int skipped = 0;
  for (const auto& c : report["checks"]) skipped += c["skipped"].get<bool>();
  EXPECT_LE(skipped, 2);  // at most the speculative check, on each of the two models
}

TEST(Extension, BannedRangeIsNeverChosenAndAnUnusedRangeChangesNothing) {
  register_all();
  gengraph::Engine engine("gpt2-tiny");
  const auto greedy = tokens(engine.generate(kPrompts, {{"max_new_tokens", 12}}));
  // Ban the range around greedy's first token: it must disappear from every output.
  const int64_t t = greedy[0][0];
  const Json banned = {
      {"max_new_tokens", 12},
      {"processors", {{{"name", "ban_token_range"}, {"first", t}, {"last", t + 5}}}}};
  const auto out = tokens(engine.generate(kPrompts, banned));
  for (const auto& row : out)
    for (int64_t x : row) EXPECT_TRUE(x < t || x > t + 5) << x;
  EXPECT_NE(out, greedy);
  // A range past the vocabulary bans nothing: greedy's tokens exactly.
  const Json none = {
      {"max_new_tokens", 12},
      {"processors", {{{"name", "ban_token_range"}, {"first", 1 << 20}, {"last", 1 << 21}}}}};
  EXPECT_EQ(tokens(engine.generate(kPrompts, none)), greedy);
}

TEST(Extension, StopOnRepeatStopsARowAtItsFirstRepeat) {
  register_all();
  gengraph::Engine engine("gpt2-tiny");
  const int64_t max_new = 24;
  const auto plain = tokens(engine.generate(kPrompts, {{"max_new_tokens", max_new}}));
  const auto stopped = tokens(
      engine.generate(kPrompts, {{"max_new_tokens", max_new},
                                 {"stopping_criteria", {{{"name", "stop_on_repeat"}, {"n", 2}}}}}));
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    // The expected output: plain greedy cut after the first token equal to the one before it
    // (the prompt's last token counts as "before" for the first generated token).
    std::vector<int64_t> expected;
    int64_t prev = kPrompts[i].back();
    for (int64_t x : plain[i]) {
      expected.push_back(x);
      if (x == prev) break;
      prev = x;
    }
    EXPECT_EQ(stopped[i], expected) << "input " << i;
  }
}

TEST(Extension, EpsilonGreedyIsGreedyAtZeroAndSeededOtherwise) {
  register_all();
  gengraph::Engine engine("gpt2-tiny");
  const auto greedy = tokens(engine.generate(kPrompts, {{"max_new_tokens", 12}}));
  const Json eps0 = {{"max_new_tokens", 12},
                     {"strategy", {{"name", "epsilon_greedy"}, {"epsilon", 0.0}}}};
  EXPECT_EQ(tokens(engine.generate(kPrompts, eps0)), greedy);
  const Json eps1 = {{"max_new_tokens", 12},
                     {"strategy", {{"name", "epsilon_greedy"}, {"epsilon", 1.0}}}};
  engine.manual_seed(7);
  const auto a = tokens(engine.generate(kPrompts, eps1));
  engine.manual_seed(7);
  EXPECT_EQ(tokens(engine.generate(kPrompts, eps1)), a);
  EXPECT_NE(a, greedy);
}

TEST(Extension, BadParametersAreRefusedNamingThePart) {
  register_all();
  gengraph::Engine engine("gpt2-tiny");
  auto error_of = [&](const Json& settings) {
    try {
      engine.generate(kPrompts, settings);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of({{"strategy", {{"name", "epsilon_greedy"}, {"epsilon", 2}}}})
                .find("strategy 'epsilon_greedy': 'epsilon': expected a number in [0, 1], found 2"),
            std::string::npos);
  EXPECT_NE(
      error_of({{"stopping_criteria", {{{"name", "stop_on_repeet"}}}}})
          .find("unknown stopping criterion 'stop_on_repeet' (did you mean 'stop_on_repeat'?)"),
      std::string::npos);
  EXPECT_NE(error_of({{"processors", {{{"name", "ban_token_range"}, {"first", 3}}}}})
                .find("processors[0] 'ban_token_range': parameter 'last' is required"),
            std::string::npos);
}

TEST(Extension, YamlSelectsEveryPart) {
  register_all();
  std::vector<std::string> args = {"my_gengraph", "run",      EXAMPLE_YAML,
                                   "--quiet",     "--output", EXAMPLE_OUT};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  ASSERT_EQ(gengraph::cli_main(static_cast<int>(argv.size()), argv.data()), 0);
  std::ifstream in(EXAMPLE_OUT);
  const Json doc = Json::parse(in);
  EXPECT_EQ(doc["generation"]["strategy"]["name"], "epsilon_greedy");
  EXPECT_EQ(doc["generation"]["stopping_criteria"][0]["name"], "stop_on_repeat");
  ASSERT_EQ(doc["runs"].size(), 2u);
  EXPECT_EQ(doc["runs"][1]["backend"], "recompute");
  EXPECT_TRUE(doc["runs"][1]["tokens_match_first_row"].get<bool>());
  for (const auto& input : doc["runs"][0]["outputs"]) {
    const auto t = input["sequences"][0]["tokens"].get<std::vector<int64_t>>();
    ASSERT_FALSE(t.empty());
    for (int64_t x : t) EXPECT_GT(x, 99);
  }
}

}  // namespace

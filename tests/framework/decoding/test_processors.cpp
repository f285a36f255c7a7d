// Table tests for logits processors (scores in, scores out) and for the pipeline's configuration
// errors. Parity of the transformers processors with transformers itself is in tests/parity.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>

#include "framework/decoding/pipeline.h"
#include "framework/decoding/processors/constraints.h"
#include "framework/decoding/processors/penalties.h"
#include "framework/decoding/processors/warpers.h"
#include "framework/decoding/registry.h"
#include "framework/decoding/stopping/stopping_criteria.h"
#include "framework/util/op_counter.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using testing::error_of;
using ::testing::HasSubstr;

constexpr float kInf = std::numeric_limits<float>::infinity();

// One row; prompt_length tokens of `tokens` are prompt, the rest generated; then three unwritten
// columns holding `filler` (a part must not read them). The length on the host (the host loop) or
// on the device (the whole step).
TokenHistory seqs(std::vector<int64_t> tokens, int64_t prompt_length, bool on_device = false,
                  int64_t filler = 0) {
  const auto n = static_cast<int64_t>(tokens.size());
  tokens.insert(tokens.end(), 3, filler);
  const auto t = at::tensor(tokens, at::kLong).unsqueeze(0);
  return TokenHistory{t, at::ones({1, prompt_length}, at::kBool), prompt_length,
                      on_device ? Length(at::scalar_tensor(n, at::kLong)) : Length(n)};
}

at::Tensor row(std::vector<float> v) { return at::tensor(v, at::kFloat).unsqueeze(0); }

void expect_row(const at::Tensor& got, std::vector<float> want) {
  ASSERT_EQ(got.size(1), static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    const float g = got[0][i].item<float>();
    if (std::isinf(want[i])) {
      EXPECT_EQ(g, want[i]) << "index " << i;
    } else {
      EXPECT_NEAR(g, want[i], 1e-6) << "index " << i;
    }
  }
}

struct Row {
  std::string name;
  std::function<std::unique_ptr<LogitsProcessor>()> make;
  std::vector<int64_t> tokens;
  int64_t prompt_length;
  std::vector<float> in, out;
};

void PrintTo(const Row& r, std::ostream* os) { *os << r.name; }

class ProcessorTable : public ::testing::TestWithParam<Row> {};

// The same scores whether the length is on the host or on the device, whatever the unwritten
// columns hold.
TEST_P(ProcessorTable, ScoresInScoresOut) {
  const Row& r = GetParam();
  const auto last_id = static_cast<int64_t>(r.in.size()) - 1;
  for (const bool on_device : {false, true}) {
    for (const int64_t filler : {int64_t{0}, last_id}) {
      SCOPED_TRACE(std::string(on_device ? "length on the device" : "length on the host") +
                   ", unwritten columns hold " + std::to_string(filler));
      expect_row(r.make()->process(seqs(r.tokens, r.prompt_length, on_device, filler), row(r.in)),
                 r.out);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Processors, ProcessorTable,
    ::testing::Values(
        Row{"temperature",
            [] { return std::make_unique<Temperature>(2.0); },
            {0},
            1,
            {2, -4, 1},
            {1, -2, 0.5}},
        Row{"top_k_2",
            [] { return std::make_unique<TopK>(2, 1); },
            {0},
            1,
            {1, 3, 2, 0},
            {-kInf, 3, 2, -kInf}},
        Row{"top_k_min_keep",
            [] { return std::make_unique<TopK>(1, 3); },
            {0},
            1,
            {1, 3, 2, 0},
            {1, 3, 2, -kInf}},
        // softmax([0, ln 2, ln 7]) = [0.1, 0.2, 0.7]: top_p 0.75 keeps {0.7, 0.2}
        Row{"top_p",
            [] { return std::make_unique<TopP>(0.75, 1); },
            {0},
            1,
            {0, std::log(2.0f), std::log(7.0f)},
            {-kInf, std::log(2.0f), std::log(7.0f)}},
        Row{"min_p",
            [] { return std::make_unique<MinP>(0.2, 1); },
            {0},
            1,
            {0, std::log(2.0f), std::log(7.0f)},
            {-kInf, std::log(2.0f), std::log(7.0f)}},
        Row{"repetition_penalty",
            [] { return std::make_unique<RepetitionPenalty>(2.0); },
            {1, 2},
            1,
            {4, 4, -4, 4},
            {4, 2, -8, 4}},
        Row{"frequency_presence",
            [] { return std::make_unique<FrequencyPresencePenalty>(0.5, 1.0); },
            {3, 1, 1, 2},
            1,
            {0, 0, 0, 0},
            {0, -2, -1.5, 0}},  // prompt token 3 is not counted
        Row{"no_repeat_bigram",
            [] { return std::make_unique<NoRepeatNGram>(2); },
            {1, 2, 3, 1},
            1,
            {0, 0, 0, 0},
            {0, 0, -kInf, 0}},
        Row{"sequence_bias",
            [] {
              return std::make_unique<SequenceBias>(
                  std::vector<std::pair<std::vector<int64_t>, double>>{
                      {{0}, 1.0}, {{2, 3}, -2.0}, {{1, 3}, 5.0}},
                  4);
            },
            {1, 2},
            1,
            {0, 0, 0, 0},
            {1, 0, 0, -2}},
        Row{"bad_words_keep_eos",
            [] {
              return std::make_unique<BadWords>(std::vector<std::vector<int64_t>>{{3}, {0}},
                                                std::vector<int64_t>{0}, 4);
            },
            {1},
            1,
            {1, 1, 1, 1},
            {1, 1, 1, -kInf}},
        Row{"logit_bias",
            [] {
              return std::make_unique<LogitBias>(std::vector<std::pair<int64_t, double>>{{1, 2.5}},
                                                 3);
            },
            {0},
            1,
            {0, 0, 0},
            {0, 2.5, 0}},
        Row{"suppress",
            [] {
              return std::make_unique<SuppressTokens>(std::vector<int64_t>{0, 2});
            },
            {1},
            1,
            {1, 1, 1},
            {-kInf, 1, -kInf}},
        Row{"begin_suppress_fires_at_first_step",
            [] { return std::make_unique<SuppressTokens>(std::vector<int64_t>{1}, 0, true); },
            {1, 2},
            2,
            {1, 1, 1},
            {1, -kInf, 1}},
        Row{"begin_suppress_later_no_op",
            [] { return std::make_unique<SuppressTokens>(std::vector<int64_t>{1}, 0, true); },
            {1, 2, 0},
            2,
            {1, 1, 1},
            {1, 1, 1}},
        Row{"forced_eos_at_trigger",
            [] { return std::make_unique<ForceTokens>("forced_eos", std::vector<int64_t>{2}, 3); },
            {1, 1, 1},
            1,
            {5, 5, 5},
            {-kInf, -kInf, 0}},
        Row{"min_new_tokens_blocks_eos",
            [] { return std::make_unique<MinLength>(2, std::vector<int64_t>{0}, true); },
            {1, 1, 1},
            2,
            {3, 1, 1},
            {-kInf, 1, 1}},
        // An EOS id past the vocabulary blocks nothing (transformers' isin over the vocabulary).
        Row{"min_new_tokens_eos_outside_vocab",
            [] {
              return std::make_unique<MinLength>(2, std::vector<int64_t>{7, 2}, true);
            },
            {1, 1, 1},
            2,
            {3, 1, 1},
            {3, 1, -kInf}},
        Row{"min_new_tokens_reached",
            [] { return std::make_unique<MinLength>(1, std::vector<int64_t>{0}, true); },
            {1, 1, 1},
            2,
            {3, 1, 1},
            {3, 1, 1}},
        Row{"remove_invalid",
            [] { return std::make_unique<RemoveInvalidValues>(); },
            {0},
            1,
            {std::nanf(""), kInf, -kInf, 1},
            {0, std::numeric_limits<float>::max(), std::numeric_limits<float>::lowest(), 1}},
        Row{"renormalize",
            [] { return std::make_unique<Renormalize>(); },
            {0},
            1,
            {0, 0},
            {-std::log(2.0f), -std::log(2.0f)}}),
    [](const auto& info) { return info.param.name; });

TEST(ProcessorChain, TimesEachMemberWhenAsked) {
  ProcessorChain chain;
  chain.add(std::make_unique<Temperature>(2.0));
  chain.add(std::make_unique<TopK>(1, 1));
  chain.enable_timing(true);
  const auto out = chain.process(seqs({0}, 1), row({1, 3, 2}));
  expect_row(out, {-kInf, 1.5, -kInf});
  ASSERT_EQ(chain.member_seconds().size(), 2u);
  EXPECT_EQ(chain.name(), "chain(temperature, top_k)");
}

ResolvedSettings sampling() {
  ResolvedSettings c;
  c.do_sample = true;
  c.eos_token_id = {0};
  return c;
}

std::vector<std::string> chain_names(const ResolvedSettings& c) {
  Pipeline p = build_pipeline(c, 20, 5, 100);
  std::vector<std::string> out;
  for (size_t i = 0; i < p.processors.size(); ++i) out.push_back(p.processors.at(i).name());
  return out;
}

TEST(ProcessorFactory, DefaultChainFollowsTransformersOrder) {
  ResolvedSettings c = sampling();
  c.temperature = 0.7;
  c.top_p = 0.9;
  c.repetition_penalty = 1.1;
  c.min_new_tokens = 2;
  c.suppress_tokens = {5};
  EXPECT_EQ(chain_names(c),
            (std::vector<std::string>{"repetition_penalty", "min_new_tokens", "suppress_tokens",
                                      "temperature", "top_k", "top_p"}));
  c.do_sample = false;  // warpers only act when sampling, as in transformers
  EXPECT_EQ(chain_names(c),
            (std::vector<std::string>{"repetition_penalty", "min_new_tokens", "suppress_tokens"}));
}

TEST(ProcessorFactory, ExplicitListKeepsItsOrderAndValidatesParameters) {
  ResolvedSettings c = sampling();
  c.top_k = 50;
  c.processors = {{"top_p", {{"top_p", 0.5}}},
                  {"temperature", {{"temperature", 0.5}}},
                  {"top_k", {{"top_k", 3}}}};
  EXPECT_EQ(chain_names(c), (std::vector<std::string>{"top_p", "temperature", "top_k"}));
  c.processors = {{"top_pp", {}}};
  EXPECT_THAT(error_of([&] { chain_names(c); }),
              HasSubstr("generation.processors[0] 'top_pp': unknown logits processor 'top_pp' "
                        "(did you mean 'top_p'?)"));
  c.processors = {{"top_p", {{"top_k", 3}}}};
  EXPECT_THAT(error_of([&] { chain_names(c); }), HasSubstr("unknown parameter 'top_k'"));
  c.processors = {{"top_p", {{"top_p", 1.5}}}};
  EXPECT_THAT(error_of([&] { chain_names(c); }),
              HasSubstr("'top_p': expected a number in (0, 1], found 1.5"));
  c.processors = {{"temperature", {{"temperature", 0.5}}}};
  c.temperature = 0.9;
  EXPECT_THAT(error_of([&] { c.validate(); }), HasSubstr("'processors' replaces the chain"));
}

TEST(ProcessorFactory, OutOfVocabularyTokensAreRefused) {
  ResolvedSettings c;
  c.sequence_bias = {{{1, 500}, 1.0}};
  EXPECT_THAT(error_of([&] { chain_names(c); }),
              HasSubstr("sequence_bias: token id 500 is outside the vocabulary [0, 100)"));
}

struct BadCombo {
  std::string name;
  std::function<void(ResolvedSettings&)> set;
  std::string expected;
};
void PrintTo(const BadCombo& b, std::ostream* os) { *os << b.name; }

class GenerationConfigErrors : public ::testing::TestWithParam<BadCombo> {};

TEST_P(GenerationConfigErrors, ClearMessage) {
  ResolvedSettings c;
  c.eos_token_id = {0};
  GetParam().set(c);
  EXPECT_THAT(error_of([&] { c.validate(); }), HasSubstr(GetParam().expected));
}

INSTANTIATE_TEST_SUITE_P(
    Combos, GenerationConfigErrors,
    ::testing::Values(BadCombo{"return_more_than_beams",
                               [](auto& c) {
                                 c.num_beams = 2;
                                 c.num_return_sequences = 3;
                               },
                               "'num_return_sequences' (3) must not exceed num_beams (2)"},
                      BadCombo{"greedy_many_returns", [](auto& c) { c.num_return_sequences = 2; },
                               "greedy search returns one"},
                      BadCombo{"min_length_without_eos",
                               [](auto& c) {
                                 c.eos_token_id.clear();
                                 c.min_length = 3;
                               },
                               "'min_length' needs an 'eos_token_id'"}),
    [](const auto& info) { return info.param.name; });

TEST(GenerationConfigKeys, ValueErrorsNameKeyAndValue) {
  ResolvedSettings c;
  EXPECT_THAT(error_of([&] { apply_generation_key(c, "top_p", 0.0, "g"); }),
              HasSubstr("g: 'top_p': expected a number in (0, 1], found 0.0"));
  EXPECT_THAT(error_of([&] { apply_generation_key(c, "early_stopping", "sometimes", "g"); }),
              HasSubstr("'early_stopping': expected true, false or \"never\""));
  EXPECT_THAT(error_of([&] { apply_generation_key(c, "temperature", -1, "g"); }),
              HasSubstr("expected a number > 0"));
  EXPECT_THAT(error_of([&] {
                apply_generation_key(c, "bad_words_ids", nlohmann::json::array({1, 2}), "g");
              }),
              HasSubstr("non-empty lists of token ids"));
  EXPECT_THAT(error_of([&] {
                apply_generation_key(c, "sequence_bias", nlohmann::json::parse("[[1, 2.0]]"), "g");
              }),
              HasSubstr("[[token ids], bias] pairs"));
  EXPECT_THAT(error_of([&] {
                apply_generation_key(c, "logit_bias", nlohmann::json::parse(R"({"x": 1})"), "g");
              }),
              HasSubstr("token id keys with numeric biases"));
  EXPECT_THAT(error_of([&] { apply_generation_key(c, "top_kk", 3, "g"); }),
              HasSubstr("did you mean 'top_k'"));
  EXPECT_THAT(error_of([&] { apply_generation_key(c, "output_scores", "yes", "g"); }),
              HasSubstr("'output_scores': expected true or false"));
}

TEST(StoppingCriteria, StopSequencesAndMaxTime) {
  StopSequencesCriterion stop({{2, 3}, {9}});
  const auto t = at::tensor({1, 3, 2, 4, 2, 3, 5, 9, 9}, at::kLong).reshape({3, 3});
  const TokenHistory s{t, at::ones({3, 1}, at::kBool), 1, Length(3)};
  const auto got = stop.should_stop(s);
  EXPECT_FALSE(got[0].item<bool>());
  EXPECT_TRUE(got[1].item<bool>());
  EXPECT_TRUE(got[2].item<bool>());
  MaxTimeCriterion expired(1e-9);
  EXPECT_TRUE(expired.should_stop(s).all().item<bool>());
  MaxTimeCriterion later(3600);
  EXPECT_FALSE(later.should_stop(s).any().item<bool>());
}

// The chain: any member says stop. Members the host can decide (max_length from the host length)
// add no operator; with the length on the device (the whole step) every member is asked on the
// device; both agree.
TEST(StoppingCriteria, TheChainIsTheOrOfItsMembersInBothForms) {
  // Row 0 ends with EOS 7, row 1 with the stop sequence "2 5", row 2 with neither.
  const auto t = at::tensor({1, 3, 7, 4, 2, 5, 5, 9, 6}, at::kLong).reshape({3, 3});
  const auto valid = at::ones({3, 1}, at::kBool);
  for (const int64_t max_length : {3, 4}) {
    StoppingCriteria chain;
    chain.add(std::make_unique<MaxLengthCriterion>(max_length));
    chain.add(std::make_unique<EosCriterion>(std::vector<int64_t>{7}));
    chain.add(std::make_unique<StopSequencesCriterion>(std::vector<std::vector<int64_t>>{{2, 5}}));
    at::Tensor got;
    int64_t ops = 0;
    {
      AtenOpCounter counter;
      got = chain.should_stop(TokenHistory{t, valid, 1, Length(3)});
      ops = counter.top_level();
    }
    // max_length 3 is reached: every row stops, decided on the host (one fill, no member's
    // operators); 4 is not: the other members decide.
    const auto want =
        (max_length == 3 ? at::tensor({1, 1, 1}) : at::tensor({1, 1, 0})).to(at::kBool);
    EXPECT_TRUE(at::equal(got, want)) << max_length;
    if (max_length == 3) EXPECT_EQ(ops, 1);
    // A [rows, capacity] buffer with 3 columns written (unwritten ones hold EOS), the length on
    // the host and on the device.
    const auto buffer = at::cat({t, at::full({3, 2}, 7, at::kLong)}, 1);
    const TokenHistory host{buffer, valid, 1, Length(3)};
    const TokenHistory fixed{buffer, valid, 1, Length(at::scalar_tensor(3, at::kLong))};
    EXPECT_TRUE(at::equal(chain.should_stop(host), want)) << max_length;
    EXPECT_TRUE(at::equal(chain.should_stop(fixed), want)) << max_length;
  }
}

}  // namespace
}  // namespace gengraph

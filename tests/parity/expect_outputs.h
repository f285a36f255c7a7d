// The one comparison of a generation with what transformers recorded (tools/make_fixtures.py,
// tools/make_real_fixtures.py): per input and sequence, the exact tokens, and for beam strategies
// the score within 1e-5 relative (absolute below 1).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "framework/decoding/generator.h"

namespace gengraph::testing {

// Sums of float32 log-probabilities: 1e-5 relative (absolute below 1), as the fixture checks
// compare them. An absolute 1e-5 is under one float32 step above |score| 128 (an aoti package
// rebuilt by another compile gave -143.867706 against -143.867691: 1 ulp).
inline void expect_near_score(double got, double want, const std::string& what,
                              double tolerance = 1e-5) {
  EXPECT_NEAR(got, want, tolerance * std::max(1.0, std::abs(want))) << what;
}

// `scores`: the generation ran with output_scores, and the fixture holds each token's score as
// transformers' compute_transition_scores gave it (tools/make_fixtures.py): those are compared
// too (null: not recorded for this sequence), and a sequence transformers does not score
// (greedy, sampling) must score the sum of its tokens' scores.
// `token_tolerance`: for the token scores (one log-probability each, not sums).
inline void expect_outputs(const Generation& r, const nlohmann::json& expected, bool scores = false,
                           double token_tolerance = 1e-5) {
  ASSERT_EQ(r.outputs.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(r.outputs[i].size(), expected[i].size()) << "input " << i;
    for (size_t j = 0; j < expected[i].size(); ++j) {
      const auto& want = expected[i][j];
      const auto& got = r.outputs[i][j];
      EXPECT_EQ(got.tokens, want["tokens"].get<std::vector<int64_t>>())
          << "input " << i << " sequence " << j
          << (want.contains("text") ? ": transformers gave " + want["text"].dump() : "");
      const std::string where = "input " + std::to_string(i) + " sequence " + std::to_string(j);
      if (scores && want.at("token_scores").is_null()) {
        // Diverse beam search where transformers 4.55's own token scores are wrong
        // (tools/groupbeam_oracle.py): one score per token; its sequence score is compared below.
        EXPECT_EQ(got.token_scores.size(), got.tokens.size()) << where;
      } else if (scores) {
        const auto token_scores = want.at("token_scores").get<std::vector<double>>();
        ASSERT_EQ(got.token_scores.size(), token_scores.size()) << where;
        for (size_t k = 0; k < token_scores.size(); ++k) {
          expect_near_score(got.token_scores[k], token_scores[k],
                            where + " token " + std::to_string(k), token_tolerance);
        }
      } else {
        EXPECT_TRUE(got.token_scores.empty()) << where;
      }
      if (want["score"].is_null() && scores) {
        double sum = 0;
        for (double x : want.at("token_scores").get<std::vector<double>>()) sum += x;
        ASSERT_TRUE(got.score.has_value()) << where;
        expect_near_score(
            *got.score, sum, where + " (the sum of its token scores)",
            token_tolerance * static_cast<double>(std::max<size_t>(1, got.tokens.size())));
      } else if (want["score"].is_null()) {
        EXPECT_FALSE(got.score.has_value()) << where;
      } else {
        ASSERT_TRUE(got.score.has_value()) << where;
        expect_near_score(*got.score, want["score"].get<double>(), where);
      }
    }
  }
}

}  // namespace gengraph::testing

// The one comparison of a generation with what transformers recorded (tools/make_fixtures.py,
// tools/make_real_fixtures.py): per input and sequence, the exact tokens, and for beam strategies
// the score within 1e-5 relative (absolute below 1).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "framework/decoding/generator.h"

namespace gengraph::testing {

// Sums of float32 log-probabilities: 1e-5 relative (absolute below 1), as the fixture checks
// compare them. An absolute 1e-5 is under one float32 step above |score| 128 (an aoti package
// rebuilt by another compile gave -143.867706 against -143.867691: 1 ulp).
inline void expect_outputs(const GenerationResult& r, const nlohmann::json& expected) {
  ASSERT_EQ(r.outputs.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(r.outputs[i].size(), expected[i].size()) << "input " << i;
    for (size_t j = 0; j < expected[i].size(); ++j) {
      const auto& want = expected[i][j];
      const auto& got = r.outputs[i][j];
      EXPECT_EQ(got.tokens, want["tokens"].get<std::vector<int64_t>>())
          << "input " << i << " sequence " << j
          << (want.contains("text") ? ": transformers gave " + want["text"].dump() : "");
      if (want["score"].is_null()) {
        EXPECT_FALSE(got.score.has_value());
      } else {
        ASSERT_TRUE(got.score.has_value());
        const double w = want["score"].get<double>();
        EXPECT_NEAR(*got.score, w, 1e-5 * std::max(1.0, std::abs(w)))
            << "input " << i << " sequence " << j;
      }
    }
  }
}

}  // namespace gengraph::testing

// Compares two results files (docs/results-schema.md) row by row: how much faster or slower each
// row of AFTER is than the same row (same label, same sweep point) of BEFORE, with a
// distribution-free interval from the repeats of both, and which settings differ between them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace gengraph {

// The speed-up of AFTER over BEFORE from two independent sets of repeat timings (lower is
// better): the Hodges-Lehmann estimate of the shift between log(before) and log(after), i.e. the
// median of the n1 x n2 ratios before_i / after_j, and the Moses interval for it:
// [r(k), r(n1 n2 + 1 - k)] over the sorted ratios, with the largest k whose coverage
// 1 - 2 P(U <= k - 1) is at least 95%, U being the Mann-Whitney statistic under no change
// (exact for up to 100 repeats a side, normal approximation above), or k = 1 (min to max ratio)
// with the coverage that reaches when none does. It assumes the change scales the timing
// distribution; the repeats of each file are taken as independent.
struct Speedup {
  double estimate = 0;        // > 1: AFTER is faster
  double low = 0, high = 0;   // the interval (equal to estimate when there is none)
  double confidence = 0;      // its coverage; 0 when there is no interval
  bool has_interval = false;  // needs >= 2 repeats on each side, all > 0
};
Speedup speedup(const std::vector<double>& before, const std::vector<double>& after);

// P(U <= u) for u = 0..n1*n2 under no difference (exact; n1, n2 <= 100).
std::vector<double> mann_whitney_cdf(size_t n1, size_t n2);

// The comparison as a document ("schema": "gengraph-compare-1"; docs/experiments.md): both files,
// the settings that differ, and per sweep point per row its status, the values of both sides,
// and for compared rows speedup, low, high, confidence and verdict.
nlohmann::json compare_documents(const nlohmann::json& before, const std::string& before_name,
                                 const nlohmann::json& after, const std::string& after_name,
                                 const std::string& metric);
// The readable table of such a document.
std::string format_comparison(const nlohmann::json& comparison);

// The comparison table (format_comparison of compare_documents). `metric` is one of total_ms
// (default), decode_ms_per_token, time_to_first_token_ms, tokens_per_second; for tokens_per_second
// higher is better, and the speed-up is after / before. Throws Error (naming the file) for what is
// not a results file.
std::string compare_results(const nlohmann::json& before, const std::string& before_name,
                            const nlohmann::json& after, const std::string& after_name,
                            const std::string& metric);

extern const std::vector<std::string> kCompareMetrics;

}  // namespace gengraph

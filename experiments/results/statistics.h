// The statistics of experiments, shared by the runner (per-row summaries, ratios to the baseline)
// and `gengraph compare` (speed-ups between two files): one median, one set of intervals.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace gengraph {

class JsonAt;

// The median of values already sorted ascending (0 for none).
double median_of_sorted(const std::vector<double>& sorted);
double median(std::vector<double> values);

// {median, min, max, mean, stdev, values} of a set of timings; an empty object for none.
nlohmann::json summary(const std::vector<double>& values);

// The rank k of a distribution-free confidence interval [x(k), x(n+1-k)] for the median of n
// samples, and its coverage 1 - 2 P(Binomial(n, 1/2) < k): the largest k with coverage >= 95%,
// or k = 1 (min to max) when none reaches it (n <= 5).
std::pair<size_t, double> median_interval_rank(size_t n);

// "93.8% confidence" for the interval median_interval_rank gives at this many repeats.
std::string ratio_confidence_text(int64_t repeats);

// Whether a results row is a peer timed apart from gengraph's rows (in its own process after
// them): its repeats do not pair with theirs. A peer timed in turn with them (run.peer_order:
// interleaved; its row's "order") does.
// Read through JsonAt, so that a damaged row is named by its place in its file.
bool unpaired_peer(const JsonAt& row);

// How much faster a results row is than the baseline row (total time, baseline / row): paired
// per-repeat ratios with an order-statistic interval for rows timed in the same interleaved
// repeats, the ratio of medians for unpaired peers. {baseline, median, [low, high, confidence],
// method}.
nlohmann::json ratio_to_baseline(const nlohmann::json& row, const nlohmann::json& base);
// The same from the rows' total_ms values (times > 0) and whether each is an unpaired peer;
// `base_label` is the baseline's label.
nlohmann::json ratio_to_baseline(const std::vector<double>& row, bool row_is_peer,
                                 const std::vector<double>& base, bool base_is_peer,
                                 const std::string& base_label);

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

}  // namespace gengraph

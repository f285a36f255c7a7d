#include "experiments/results/statistics.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <optional>
#include <sstream>
#include <utility>

#include "framework/util/error.h"
#include "framework/util/json_at.h"

namespace gengraph {

double median_of_sorted(const std::vector<double>& s) {
  const size_t n = s.size();
  if (n == 0) return 0.0;
  return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return median_of_sorted(v);
}

nlohmann::json summary(const std::vector<double>& v) {
  nlohmann::json j;
  if (v.empty()) return j;
  std::vector<double> s = v;
  std::sort(s.begin(), s.end());
  const size_t n = s.size();
  double mean = 0;
  for (double x : s) mean += x;
  mean /= static_cast<double>(n);
  double var = 0;
  for (double x : s) var += (x - mean) * (x - mean);
  j["median"] = median_of_sorted(s);
  j["min"] = s.front();
  j["max"] = s.back();
  j["mean"] = mean;
  j["stdev"] = n > 1 ? std::sqrt(var / static_cast<double>(n - 1)) : 0.0;
  j["values"] = v;
  return j;
}

std::pair<size_t, double> median_interval_rank(size_t n) {
  std::vector<double> cdf(n + 1);  // cdf[j] = P(Binomial(n, 1/2) <= j)
  double pmf = std::pow(0.5, static_cast<double>(n)), acc = 0;
  for (size_t j = 0; j <= n; ++j) {
    if (n > 1000) {
      // 0.5^n underflows past n = 1074 (every term would be 0): each term in logarithms instead.
      const double dn = static_cast<double>(n), dj = static_cast<double>(j);
      pmf = std::exp(std::lgamma(dn + 1) - std::lgamma(dj + 1) - std::lgamma(dn - dj + 1) +
                     dn * std::log(0.5));
    }
    acc += pmf;
    cdf[j] = acc;
    pmf = pmf * static_cast<double>(n - j) / static_cast<double>(j + 1);
  }
  size_t k = 1;
  while (k + 1 <= n / 2 && 1 - 2 * cdf[k] >= 0.95) ++k;
  return {k, 1 - 2 * cdf[k - 1]};
}

std::string ratio_confidence_text(int64_t repeats) {
  if (repeats < 2) return "none with one repeat";
  std::ostringstream s;
  s << std::fixed << std::setprecision(1)
    << 100 * median_interval_rank(static_cast<size_t>(repeats)).second << "% confidence";
  return s.str();
}

// How much faster a row is than the baseline, as baseline total time / row total time.
//
// Rows timed in the same interleaved repeats as the baseline (gengraph's backends) are paired
// repeat by repeat: repeat i of both ran back to back, so drift hits both alike. The point is the
// median of the n per-repeat ratios, and the interval a distribution-free confidence interval for
// that median from order statistics: [r(k), r(n+1-k)] with the largest k whose coverage
// 1 - 2 P(Binomial(n, 1/2) < k) is still at least 95%, or k = 1 (min to max) when no k reaches it
// (n <= 5), with the coverage reached stated. Peers run after gengraph's rows, in their own
// process, are not paired: their ratio is the ratio of medians, with no interval. Peers timed in
// turn with the rows (run.peer_order: interleaved) are paired as the rows are.
nlohmann::json ratio_to_baseline(const nlohmann::json& row, const nlohmann::json& base) {
  // Rows of gengraph's own, or a peer's checked when it came; read through JsonAt all the same.
  auto values = [](const JsonAt& r) {
    std::vector<double> v;
    const auto timings = r.find("timings");
    const auto total = timings ? timings->find("total_ms") : std::nullopt;
    if (!total || total->json().is_null()) return v;
    if (const auto values = total->find("values")) {
      for (const auto& x : values->items()) v.push_back(x.number());
    }
    return v;
  };
  const JsonAt r(row, "the results row"), b(base, "the baseline row");
  return ratio_to_baseline(values(r), unpaired_peer(r), values(b), unpaired_peer(b),
                           b["label"].string());
}

bool unpaired_peer(const JsonAt& r) {
  return r.string_or("backend", "").rfind("peer:", 0) == 0 &&
         r.string_or("order", "") != "interleaved";
}

nlohmann::json ratio_to_baseline(const std::vector<double>& x, bool row_is_peer,
                                 const std::vector<double>& b, bool base_is_peer,
                                 const std::string& base_label) {
  nlohmann::json out = {{"baseline", base_label}};
  if (x.empty() || b.empty()) return out;
  if (row_is_peer || base_is_peer || x.size() != b.size() || x.size() < 2) {
    const double mx = median(x), mb = median(b);
    out["median"] = mx > 0 ? mb / mx : 0.0;
    const bool paired = !row_is_peer && !base_is_peer && x.size() == b.size();
    out["method"] = paired ? "one paired repeat: its ratio, no interval" : "ratio of medians";
    return out;
  }
  std::vector<double> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = x[i] > 0 ? b[i] / x[i] : 0.0;
  std::sort(r.begin(), r.end());
  const size_t n = r.size();
  const auto [k, confidence] = median_interval_rank(n);
  out["median"] = median_of_sorted(r);
  out["low"] = r[k - 1];
  out["high"] = r[n - k];
  out["confidence"] = confidence;
  out["method"] = "median of paired per-repeat ratios, order-statistic interval";
  return out;
}

std::vector<double> mann_whitney_cdf(size_t n1, size_t n2) {
  if (n1 > 100 || n2 > 100) throw Error("mann_whitney_cdf: exact only up to 100 per side");
  // counts[b] = the number of orderings of a x-values and b y-values with each U, row a at a
  // time: N(a, b, u) = N(a - 1, b, u - b) + N(a, b - 1, u), N(0, b) = N(a, 0) = [1].
  std::vector<std::vector<double>> prev(n2 + 1, std::vector<double>{1.0}), cur(n2 + 1);
  for (size_t a = 1; a <= n1; ++a) {
    cur[0] = {1.0};
    for (size_t b = 1; b <= n2; ++b) {
      std::vector<double> c(a * b + 1, 0.0);
      for (size_t u = 0; u < prev[b].size(); ++u) c[u + b] += prev[b][u];
      for (size_t u = 0; u < cur[b - 1].size(); ++u) c[u] += cur[b - 1][u];
      cur[b] = std::move(c);
    }
    std::swap(prev, cur);
  }
  std::vector<double> cdf = prev[n2];
  double total = 0;
  for (double c : cdf) total += c;
  double acc = 0;
  for (double& c : cdf) {
    acc += c;
    c = acc / total;
  }
  return cdf;
}

namespace {

// Doubles as integers of the same order (-0 and +0 alike), and back.
int64_t order_key(double x) {
  int64_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits >= 0 ? bits : -(bits & INT64_MAX);
}
double from_order_key(int64_t key) {
  const int64_t bits = key >= 0 ? key : (INT64_MIN | -key);
  double x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

// The log ratios log(before_i) - log(after_j) of all pairs, in order, as the k-th smallest
// (1-based) of them: sorted in memory for up to 2^20 pairs, else found without forming them.
class PairDifferences {
 public:
  PairDifferences(std::vector<double> lx, std::vector<double> ly)
      : lx_(std::move(lx)), ly_(std::move(ly)) {
    std::sort(lx_.begin(), lx_.end());
    std::sort(ly_.begin(), ly_.end());
    if (size() <= (size_t{1} << 20)) {
      all_.reserve(size());
      for (double x : lx_)
        for (double y : ly_) all_.push_back(x - y);
      std::sort(all_.begin(), all_.end());
    }
  }
  size_t size() const { return lx_.size() * ly_.size(); }

  double kth(size_t k) const {
    if (!all_.empty()) return all_[k - 1];
    // The smallest double t with at least k differences <= t is the k-th smallest: a bisection
    // over the doubles' order (64 steps), each counting the pairs in one pass. Rounding keeps
    // x - y monotone in x and y, so the count agrees with the differences as computed.
    int64_t lo = order_key(lx_.front() - ly_.back()), hi = order_key(lx_.back() - ly_.front());
    while (lo < hi) {
      const int64_t mid =
          lo + static_cast<int64_t>((static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo)) / 2);
      if (count_at_most(from_order_key(mid)) >= k)
        hi = mid;
      else
        lo = mid + 1;
    }
    return from_order_key(lo);
  }

  double median() const {
    const size_t n = size();
    return n % 2 ? kth(n / 2 + 1) : 0.5 * (kth(n / 2) + kth(n / 2 + 1));
  }

 private:
  // The pairs with x - y <= t: for each x (ascending) a suffix of the ascending y, which shrinks.
  size_t count_at_most(double t) const {
    size_t count = 0, j = 0;
    for (double x : lx_) {
      while (j < ly_.size() && x - ly_[j] > t) ++j;
      count += ly_.size() - j;
    }
    return count;
  }

  std::vector<double> lx_, ly_, all_;
};

}  // namespace

Speedup speedup(const std::vector<double>& before, const std::vector<double>& after) {
  Speedup s;
  if (before.empty() || after.empty()) return s;
  const bool positive = std::all_of(before.begin(), before.end(), [](double x) { return x > 0; }) &&
                        std::all_of(after.begin(), after.end(), [](double x) { return x > 0; });
  if (!positive || before.size() < 2 || after.size() < 2) {
    const double a = median(after);
    s.estimate = s.low = s.high = a > 0 ? median(before) / a : 0.0;
    return s;
  }
  std::vector<double> log_before, log_after;
  for (double x : before) log_before.push_back(std::log(x));
  for (double y : after) log_after.push_back(std::log(y));
  const PairDifferences d(std::move(log_before), std::move(log_after));
  const size_t n1 = before.size(), n2 = after.size(), n = d.size();
  size_t k = 1;
  double confidence = 0;
  if (n1 <= 100 && n2 <= 100) {
    const auto cdf = mann_whitney_cdf(n1, n2);
    while (k + 1 <= n / 2 && 1 - 2 * cdf[k] >= 0.95) ++k;
    confidence = 1 - 2 * cdf[k - 1];
  } else {
    // Normal approximation of U: mean n1 n2 / 2, variance n1 n2 (n1 + n2 + 1) / 12.
    const double mean = static_cast<double>(n) / 2;
    const double sd = std::sqrt(static_cast<double>(n1) * static_cast<double>(n2) *
                                static_cast<double>(n1 + n2 + 1) / 12.0);
    k = static_cast<size_t>(std::max(1.0, std::floor(mean - 1.959964 * sd + 0.5)));
    confidence = 1 - std::erfc((mean - (static_cast<double>(k) - 0.5)) / sd / std::sqrt(2.0));
  }
  s.estimate = std::exp(d.median());
  s.low = std::exp(d.kth(k));
  s.high = std::exp(d.kth(n + 1 - k));
  s.confidence = confidence;
  s.has_interval = true;
  return s;
}

}  // namespace gengraph

// Speculative sampling (Generator::run_speculative with a draft that samples, docs/decoding.md
// #speculative-sampling): the rejection rule keeps the output distributed as plain sampling's.
//
// The test draws many seeded generations of four tokens from a small-vocabulary model with a
// draft of the same shape and other weights (two candidates per verify, so the accepted, the
// replaced and the bonus positions all occur), computes the target's exact distribution of the
// four tokens from its logits over every history, and applies Pearson's chi-square test to the
// counts. Under a correct rule the statistic follows a chi-square law, so the test fails by chance
// with probability ALPHA = 0.001 for a random set of seeds (the seeds are fixed, so the outcome is
// fixed: they were not picked to pass). The same counts measured against the draft's own
// distribution must be refused: the test can tell a wrong distribution from the right one.
#include <ATen/ATen.h>
#include <gengraph/gengraph.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <vector>

#include "backends/register_builtin.h"
#include "framework/backend/backend_registry.h"
#include "framework/model/causal_lm.h"
#include "framework/model/loader.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using Json = nlohmann::json;

// The chi-square law's upper tail Q(df / 2, x / 2): the regularized upper incomplete gamma
// function, by its series below a + 1 and its continued fraction above (Lentz's method).
double chi_square_tail(double x, double df) {
  const double a = df / 2, z = x / 2;
  if (z <= 0) return 1;
  const double log_front = a * std::log(z) - z - std::lgamma(a);
  if (z < a + 1) {
    double term = 1 / a, sum = term;
    for (int n = 1; n < 10000 && std::abs(term) > 1e-16 * std::abs(sum); ++n) {
      term *= z / (a + n);
      sum += term;
    }
    return 1 - sum * std::exp(log_front);
  }
  const double tiny = 1e-300;
  double b = z + 1 - a, c = 1 / tiny, d = 1 / b, h = d;
  for (int n = 1; n < 10000; ++n) {
    const double an = -n * (n - a);
    b += 2;
    d = an * d + b;
    d = std::abs(d) < tiny ? tiny : d;
    c = b + an / c;
    c = std::abs(c) < tiny ? tiny : c;
    d = 1 / d;
    const double step = d * c;
    h *= step;
    if (std::abs(step - 1) < 1e-16) break;
  }
  return std::exp(log_front) * h;
}

TEST(ChiSquare, TailMatchesScipy) {
  // scipy.stats.chi2.sf(x, df)
  EXPECT_NEAR(chi_square_tail(20, 10), 0.029252688076961124, 1e-10);
  EXPECT_NEAR(chi_square_tail(3.5, 1), 0.0613688291394023, 1e-10);
  EXPECT_NEAR(chi_square_tail(150, 120), 0.03307348091130466, 1e-10);
  EXPECT_NEAR(chi_square_tail(0.5, 3), 0.9188914116546758, 1e-10);
  EXPECT_NEAR(chi_square_tail(400, 300), 9.678621994933555e-05, 1e-12);
}

constexpr int64_t kVocab = 5, kNew = 4, kEos = 0;  // gpt2-tiny's EOS is token 0
constexpr double kTemperature = 0.1;               // random weights' logits are close together
const std::vector<int64_t> kPrompt = {1, 2, 3, 4, 2};

// The exact distribution of up to kNew tokens after the prompt under `model` with the
// temperature, a sequence ending at EOS or after kNew tokens: {tokens -> probability}.
std::map<std::vector<int64_t>, double> exact(const std::shared_ptr<const CausalLM>& model) {
  auto backend = BackendRegistry::instance().create("eager", model, BackendOptions("eager", {}));
  std::map<std::vector<int64_t>, double> out;
  std::vector<std::pair<std::vector<int64_t>, double>> open = {{{}, 1.0}};
  for (int64_t step = 0; step < kNew; ++step) {
    std::vector<int64_t> ids;
    for (const auto& [tail, p] : open) {
      ids.insert(ids.end(), kPrompt.begin(), kPrompt.end());
      ids.insert(ids.end(), tail.begin(), tail.end());
    }
    const auto rows = static_cast<int64_t>(open.size());
    const int64_t len = static_cast<int64_t>(kPrompt.size()) + step;
    backend->prepare(rows, len + 1);
    const at::Tensor input = at::tensor(ids, at::kLong).view({rows, len});
    const at::Tensor probs = at::softmax(
        backend->prefill(StepInputs{
                             input, at::arange(len, at::kLong).repeat({rows, 1}), input.ne(-1), {}})
                .to(at::kDouble) /
            kTemperature,
        -1);
    std::vector<std::pair<std::vector<int64_t>, double>> next;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t t = 0; t < kVocab; ++t) {
        auto tail = open[static_cast<size_t>(r)].first;
        tail.push_back(t);
        const double p = open[static_cast<size_t>(r)].second * probs[r][t].item<double>();
        if (t == kEos || step + 1 == kNew) {
          out[tail] += p;
        } else {
          next.emplace_back(std::move(tail), p);
        }
      }
    }
    open = std::move(next);
  }
  return out;
}

// Pearson's statistic of `counts` against `expected` (probabilities), with the cells expected
// fewer than five times pooled into one; returns {statistic, degrees of freedom}.
std::pair<double, double> chi_square(const std::map<std::vector<int64_t>, int64_t>& counts,
                                     const std::map<std::vector<int64_t>, double>& expected,
                                     int64_t n) {
  std::vector<std::pair<double, double>> cells;  // {expected count, observed}
  for (const auto& [tokens, p] : expected) {
    const auto it = counts.find(tokens);
    cells.emplace_back(p * static_cast<double>(n), it == counts.end() ? 0.0 : it->second);
  }
  for (const auto& [tokens, c] : counts) {
    if (!expected.count(tokens)) cells.emplace_back(0.0, static_cast<double>(c));
  }
  std::sort(cells.begin(), cells.end());
  double stat = 0, pooled_e = 0, pooled_o = 0, used = 0;
  for (const auto& [e, o] : cells) {
    if (pooled_e < 5) {  // the smallest cells, pooled until the pool is expected five times
      pooled_e += e;
      pooled_o += o;
      continue;
    }
    stat += (o - e) * (o - e) / e;
    ++used;
  }
  stat += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e;
  return {stat, used};  // cells: used + 1, one constraint (the counts sum to n)
}

TEST(SpeculativeSampling, KeepsTheTargetsDistribution) {
  register_builtin_backends();
  EngineOptions o;
  o.model_config = {{"vocab_size", kVocab}};
  o.weights_seed = 5;
  Engine engine("gpt2-tiny", o);
  ModelSource src;
  src.preset = "gpt2-tiny";
  src.config_overrides = o.model_config;
  src.seed = o.weights_seed;
  const auto target = load_model(src).model;
  // The draft: the same shape with other random weights, saved as a folder for draft_model.
  src.seed = 6;
  const LoadedModel draft = load_model(src);
  const testing::TempDir dir;
  save_model_folder(draft, dir / "draft");

  const Json settings = {
      {"max_new_tokens", kNew},
      {"do_sample", true},
      {"temperature", kTemperature},
      {"candidate_generator",
       {{"name", "draft_model"}, {"model", (dir / "draft").string()}, {"num_tokens", 2}}}};
  const int64_t n = 3000;
  std::map<std::vector<int64_t>, int64_t> counts;
  int64_t proposed = 0, accepted = 0;
  for (int64_t seed = 0; seed < n; ++seed) {
    engine.manual_seed(static_cast<uint64_t>(seed));
    const Generation g = engine.generate({kPrompt}, settings);
    ++counts[g.outputs[0][0].tokens];
    proposed += g.candidates_proposed;
    accepted += g.candidates_accepted;
  }
  // The draft disagrees with the target often enough that both the kept and the replaced
  // candidates occur many times.
  EXPECT_GT(accepted, proposed / 10) << accepted << " of " << proposed;
  EXPECT_LT(accepted, proposed * 9 / 10) << accepted << " of " << proposed;

  const auto want = exact(target);
  double sum = 0;
  for (const auto& [tokens, p] : want) sum += p;
  EXPECT_NEAR(sum, 1.0, 1e-9);
  const auto [stat, df] = chi_square(counts, want, n);
  const double p_value = chi_square_tail(stat, df);
  RecordProperty("chi_square", std::to_string(stat) + " on " + std::to_string(df) + " df, p " +
                                   std::to_string(p_value) + "; kept " + std::to_string(accepted) +
                                   " of " + std::to_string(proposed) + " candidates");
  EXPECT_GT(p_value, 0.001) << "chi-square " << stat << " on " << df
                            << " degrees of freedom against the target's distribution";

  // Power: the draft's distribution is another law, and the same counts refuse it.
  const auto [draft_stat, draft_df] = chi_square(counts, exact(draft.model), n);
  RecordProperty("chi_square_against_draft",
                 std::to_string(draft_stat) + " on " + std::to_string(draft_df) + " df");
  EXPECT_LT(chi_square_tail(draft_stat, draft_df), 1e-6)
      << "chi-square " << draft_stat << " on " << draft_df << " degrees of freedom";
}

// The acceptance rule replaces only what it must: a draft identical to the target (early exit
// after every layer is not allowed, so a draft model that is the target) keeps every candidate.
TEST(SpeculativeSampling, ADraftEqualToTheTargetKeepsEveryCandidate) {
  Engine engine("gpt2-tiny");
  engine.manual_seed(1);
  const Generation g = engine.generate(
      {{11, 42, 7, 99, 3}},
      Json{{"max_new_tokens", 24},
           {"do_sample", true},
           {"candidate_generator",
            {{"name", "draft_model"}, {"model", "preset:gpt2-tiny"}, {"num_tokens", 4}}}});
  EXPECT_GT(g.candidates_proposed, 0);
  // p(c) / q(c) is 1 up to float rounding: a rejection needs the uniform draw within it of 1.
  EXPECT_GE(g.candidates_accepted, g.candidates_proposed - 1);
  EXPECT_EQ(g.steps - 1, g.verify_steps + g.candidates_accepted);
}

}  // namespace
}  // namespace gengraph

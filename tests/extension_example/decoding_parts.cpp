#include "decoding_parts.h"

#include <ATen/ATen.h>
#include <gengraph/extension.h>

#include <limits>

namespace example {
namespace {

using gengraph::Error;
using Json = nlohmann::json;

int64_t int_param(const Json& params, const char* key, int64_t fallback, int64_t min) {
  if (!params.contains(key)) {
    if (fallback < min) throw Error(std::string("parameter '") + key + "' is required");
    return fallback;
  }
  const Json& v = params.at(key);
  if (!v.is_number_integer() || v.get<int64_t>() < min)
    throw Error(std::string("'") + key + "': expected an integer >= " + std::to_string(min) +
                ", found " + v.dump());
  return v.get<int64_t>();
}

void only_keys(const Json& params, std::initializer_list<const char*> keys) {
  for (auto it = params.begin(); it != params.end(); ++it) {
    bool known = false;
    for (const char* k : keys) known = known || it.key() == k;
    if (!known) throw Error("unknown parameter '" + it.key() + "'");
  }
}

class BanTokenRange final : public gengraph::LogitsProcessor {
 public:
  BanTokenRange(int64_t first, int64_t last) : first_(first), last_(last) {}
  std::string name() const override { return "ban_token_range"; }
  at::Tensor process(const gengraph::TokenHistory&, at::Tensor scores) const override {
    const int64_t vocab = scores.size(1);
    const int64_t first = std::min(first_, vocab), end = std::min(last_ + 1, vocab);
    scores.narrow(1, first, end - first).fill_(-std::numeric_limits<float>::infinity());
    return scores;
  }

 private:
  int64_t first_, last_;
};

class StopOnRepeat final : public gengraph::StoppingCriterion {
 public:
  explicit StopOnRepeat(int64_t n) : n_(n) {}
  std::string name() const override { return "stop_on_repeat"; }
  at::Tensor should_stop(const gengraph::TokenHistory& seqs) const override {
    // The last n tokens (token_history.h's helpers read the history in either loop).
    const gengraph::Flag long_enough = seqs.length.ge(n_);
    if (long_enough.never())
      return at::zeros({seqs.rows()}, seqs.buffer.options().dtype(at::kBool));
    const at::Tensor tail = gengraph::last_tokens(seqs, n_);
    return gengraph::and_flag(tail.eq(tail.select(1, n_ - 1).unsqueeze(1)).all(1), long_enough);
  }

 private:
  int64_t n_;
};

class EpsilonGreedy final : public gengraph::RowwiseSearch {
 public:
  EpsilonGreedy(std::optional<int64_t> finished_pad, double epsilon)
      : RowwiseSearch(finished_pad), epsilon_(epsilon) {}
  std::string name() const override { return "epsilon_greedy"; }

 protected:
  at::Tensor choose(const at::Tensor& scores) override {
    const at::Tensor best = scores.argmax(-1);
    if (epsilon_ <= 0) return best;
    const at::Tensor drawn = at::multinomial(at::softmax(scores, -1), 1).squeeze(1);
    const at::Tensor explore = at::rand({scores.size(0)}, scores.options()).lt(epsilon_);
    return at::where(explore, drawn, best);
  }

 private:
  double epsilon_;
};

double epsilon_of(const Json& params) {
  only_keys(params, {"epsilon"});
  const Json v = params.value("epsilon", Json(0.1));
  if (!v.is_number() || v.get<double>() < 0 || v.get<double>() > 1)
    throw Error("'epsilon': expected a number in [0, 1], found " + v.dump());
  return v.get<double>();
}

}  // namespace

void register_decoding_parts() {
  gengraph::ProcessorInfo ban;
  ban.name = "ban_token_range";
  ban.description = "tokens first..last (inclusive) are never chosen";
  ban.check_params = [](const Json& p) {
    only_keys(p, {"first", "last"});
    if (int_param(p, "last", -1, 0) < int_param(p, "first", -1, 0))
      throw Error("'last' must not be below 'first'");
  };
  ban.create = [](const Json& p, const gengraph::PartContext&) {
    return std::make_unique<BanTokenRange>(int_param(p, "first", -1, 0),
                                           int_param(p, "last", -1, 0));
  };
  gengraph::processor_registry().add(std::move(ban));

  gengraph::StoppingCriterionInfo repeat;
  repeat.name = "stop_on_repeat";
  repeat.description = "stops a row once its last n tokens are the same token";
  repeat.check_params = [](const Json& p) {
    only_keys(p, {"n"});
    int_param(p, "n", 2, 1);
  };
  repeat.create = [](const Json& p, const gengraph::PartContext&) {
    return std::make_unique<StopOnRepeat>(int_param(p, "n", 2, 1));
  };
  gengraph::stopping_registry().add(std::move(repeat));

  gengraph::SearchStrategyInfo eps;
  eps.name = "epsilon_greedy";
  eps.description = "argmax, or with probability epsilon a draw from the softmax";
  eps.check_params = [](const Json& p) { epsilon_of(p); };
  eps.create = [](const Json& p, const gengraph::PartContext& ctx) {
    return std::make_unique<EpsilonGreedy>(ctx.finished_pad, epsilon_of(p));
  };
  gengraph::strategy_registry().add(std::move(eps));
}

}  // namespace example

#include "framework/decoding/candidates/prompt_lookup.h"

#include <algorithm>

#include "framework/util/error.h"

namespace gengraph {

PromptLookup::PromptLookup(int64_t num_tokens, int64_t max_ngram, std::vector<int64_t> eos)
    : num_tokens_(num_tokens), max_ngram_(max_ngram), eos_(std::move(eos)) {
  if (num_tokens_ < 1 || max_ngram_ < 1) {
    throw Error(
        "prompt_lookup: prompt_lookup_num_tokens and max_matching_ngram_size must be >= 1, "
        "found " +
        std::to_string(num_tokens_) + " and " + std::to_string(max_ngram_));
  }
}

std::vector<int64_t> PromptLookup::propose(
    const std::vector<int64_t>& history, int64_t max,
    const std::function<size_t(const std::vector<int64_t>&)>& allowed) {
  const auto len = static_cast<int64_t>(history.size());
  const int64_t take = std::min(num_tokens_, max);
  if (take <= 0 || len < 2) return {};
  for (int64_t n = std::min(max_ngram_, len - 1); n >= 1; --n) {
    const auto suffix = history.end() - n;
    // Windows start at 0 .. len - n; the last is the suffix itself, followed by nothing.
    for (int64_t start = 0; start + n < len; ++start) {
      if (!std::equal(suffix, history.end(), history.begin() + start)) continue;
      const int64_t from = start + n, to = std::min(from + take, len);
      std::vector<int64_t> chosen(history.begin() + from, history.begin() + to);
      if (allowed) chosen.resize(std::min(chosen.size(), allowed(chosen)));
      if (chosen.empty()) continue;  // the processors ban the first: the next window
      const auto eos = std::find_if(chosen.begin(), chosen.end(), [&](int64_t t) {
        return std::find(eos_.begin(), eos_.end(), t) != eos_.end();
      });
      chosen.erase(eos, chosen.end());
      return chosen;  // possibly empty: an EOS first (transformers then makes a plain step)
    }
  }
  return {};
}

}  // namespace gengraph

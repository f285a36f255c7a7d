#include "framework/util/error.h"

#include "framework/util/strings.h"

namespace gengraph {

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  const std::string best = closest_match(word, candidates);
  return best.empty() ? std::string() : " (did you mean '" + best + "'?)";
}

}  // namespace gengraph

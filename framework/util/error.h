// Errors and small string helpers shared by the whole framework.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace gengraph {

// Every user-facing failure (bad config, bad file, bad tensor) is a gengraph::Error whose message
// names the file/key/tensor, what was expected and what was found. Library code never exits.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The candidate closest to `word` by edit distance, or "" when none is reasonably close.
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

// "unknown key 'foo'" + " (did you mean 'bar'?)" when a close candidate exists.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

std::string join(const std::vector<std::string>& parts, const std::string& sep);

}  // namespace gengraph

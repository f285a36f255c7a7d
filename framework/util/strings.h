// Small string helpers shared by the whole framework.
#pragma once

#include <string>
#include <vector>

namespace gengraph {

// The candidate closest to `word` by edit distance, or "" when none is reasonably close.
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

// The parts with `sep` between them.
std::string join(const std::vector<std::string>& parts, const std::string& sep);

}  // namespace gengraph

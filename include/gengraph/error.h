// gengraph's error type, a public header: every user-facing failure (bad config, bad file, bad
// tensor, bad settings) is thrown as a gengraph::Error whose message names the file, key or tensor,
// what was expected and what was found. Library code never exits.
#pragma once

#include <stdexcept>

namespace gengraph {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace gengraph

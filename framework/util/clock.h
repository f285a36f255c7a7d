// Wall-clock seconds for the figures backends and the loop report (steady, never adjusted).
#pragma once

#include <chrono>

namespace gengraph {

using Clock = std::chrono::steady_clock;

inline double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace gengraph

// What the soaks (soak.cpp, soak_scheduler.cpp) share: the process's resident memory.
#pragma once

#include <cstdint>
#include <fstream>

namespace gengraph::bench {

// The resident set in bytes (/proc/self/statm's second field, in 4 KiB pages).
inline int64_t rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * 4096;
}

}  // namespace gengraph::bench

// libFuzzer's entry point for one target, chosen with -DGENGRAPH_FUZZ_TARGET=<name>
// (scripts/fuzz.sh builds one binary per target with clang).
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "tests/fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    gengraph::fuzz::GENGRAPH_FUZZ_TARGET(data, size);
  } catch (const std::exception& e) {  // not a gengraph::Error: a finding
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
    std::abort();
  }
  return 0;
}

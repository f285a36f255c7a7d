// The committed fuzz corpus (tests/fuzz/corpus/<target>/), every input replayed through its
// target: each must give a result or a gengraph::Error, never another exception or a crash. The
// corpus holds the seeds and what the fuzz runs found (docs/reliability.md).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/fuzz/fuzz_targets.h"

namespace gengraph {
namespace {

class FuzzCorpus : public ::testing::TestWithParam<fuzz::NamedTarget> {};

TEST_P(FuzzCorpus, EveryInputGivesAResultOrANamedError) {
  const auto dir =
      std::filesystem::path(GENGRAPH_SOURCE_DIR) / "tests" / "fuzz" / "corpus" / GetParam().name;
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string bytes = ss.str();
    try {
      GetParam().run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    } catch (const std::exception& ex) {
      ADD_FAILURE() << e.path() << ": " << ex.what();
    }
    ++n;
  }
  EXPECT_GT(n, 0) << "no corpus in " << dir;
  RecordProperty("inputs", n);
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzCorpus, ::testing::ValuesIn(fuzz::targets()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace gengraph

// Helpers shared by the tests: temporary folders and hand-made safetensors files.
#pragma once

#include <ATen/Tensor.h>
#include <gmock/gmock.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/conformance.h"
#include "framework/decoding/resolved_settings.h"
#include "framework/model/weights.h"

namespace gengraph {
class CausalLM;
}  // namespace gengraph

namespace gengraph::testing {

// Whether this build runs under AddressSanitizer (scripts/sanitize.sh).
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

// A fresh empty folder under the system temp dir, removed when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

void write_file(const std::filesystem::path& path, const std::string& bytes);
std::string read_file(const std::filesystem::path& path);

// Raw safetensors bytes from a header document and a data section.
std::string safetensors_bytes(const nlohmann::json& header, const std::string& data);
// A valid safetensors file holding `tensors` (contiguous CPU tensors) in their own dtypes.
void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, at::Tensor>>& tensors);

std::string fixtures_dir();

// Sets an environment variable for the object's lifetime, then restores (or unsets) it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

// Copies the fixture model folder `fixture` (e.g. "gpt2-a") to `folder` and writes
// tools/make_test_tokenizer.py's word-level tokenizer of `vocab` tokens into it.
void make_folder_with_test_tokenizer(const std::string& fixture,
                                     const std::filesystem::path& folder, int vocab);

// Runs the CLI in-process with `args` (the command and its arguments, without "gengraph"); returns
// its exit status.
int cli(std::vector<std::string> args);

// The CLI in-process with its stdout swallowed and its stderr captured: {exit status, stderr}.
// A usage error (exit 2) is checked to print at most 3 lines, all on stderr.
std::pair<int, std::string> cli_stderr(const std::vector<std::string>& args);

// The CLI binary beside the test binary's folder (build/gengraph for build/tests/gengraph_tests),
// or "" when it was not built there.
std::filesystem::path cli_binary();

// `gengraph run CONFIG --output OUT --quiet` in-process, its table (stdout) swallowed; returns the
// exit status.
int run_quietly(const std::filesystem::path& config, const std::filesystem::path& out);

// "tiny" (the gpt2-tiny preset with `seed`), "preset:NAME" (that preset with `seed`) or a fixture
// model folder by name, e.g. "gpt2-a".
std::shared_ptr<const CausalLM> test_model(const std::string& which, uint64_t seed,
                                           const LoadOptions& load = {});

// Every built-in strategy over the settings of `base` (engine/conformance.h).
using gengraph::every_strategy;

// The message of the gengraph::Error that `f` throws, or "<no error>".
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no error>";
}

// The names the CLI tests use unqualified: `using namespace gengraph::testing::cli_names;`.
namespace cli_names {
using gengraph::testing::cli;
using gengraph::testing::TempDir;
using gengraph::testing::write_file;
using ::testing::HasSubstr;
}  // namespace cli_names

}  // namespace gengraph::testing

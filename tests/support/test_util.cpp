#include "tests/support/test_util.h"

#include <ATen/ATen.h>
#include <gengraph/cli.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

#include "framework/model/loader.h"
#include "framework/model/safetensors.h"

namespace gengraph::testing {

TempDir::TempDir() {
  std::random_device rd;
  path_ = std::filesystem::temp_directory_path() / ("gengraph-test-" + std::to_string(rd()));
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string safetensors_bytes(const nlohmann::json& header, const std::string& data) {
  std::string h = header.dump();
  while (h.size() % 8) h += ' ';
  const uint64_t n = h.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  return out + h + data;
}

std::shared_ptr<const CausalLM> test_model(const std::string& which, uint64_t seed,
                                           const LoadOptions& load) {
  ModelSource s;
  if (which == "tiny") {
    s.preset = "gpt2-tiny";
    s.seed = seed;
  } else if (which.rfind("preset:", 0) == 0) {
    s.preset = which.substr(7);
    s.seed = seed;
  } else {
    s.path = fixtures_dir() + "/models/" + which;
  }
  s.load = load;
  return load_model(s).model;
}

void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  gengraph::write_safetensors(path, tensors);
}

ScopedEnv::ScopedEnv(const char* name, const std::string& value) : name_(name) {
  if (const char* v = std::getenv(name)) {
    had_ = true;
    old_ = v;
  }
  setenv(name, value.c_str(), 1);
}

ScopedEnv::~ScopedEnv() {
  if (had_) {
    setenv(name_, old_.c_str(), 1);
  } else {
    unsetenv(name_);
  }
}

void make_folder_with_test_tokenizer(const std::string& fixture,
                                     const std::filesystem::path& folder, int vocab) {
  std::filesystem::copy(std::filesystem::path(fixtures_dir()) / "models" / fixture, folder);
  const std::string root = GENGRAPH_SOURCE_DIR;
  const std::string cmd = "\"" + root + "/.venv/bin/python\" \"" + root +
                          "/tools/make_test_tokenizer.py\" \"" + folder.string() + "\" " +
                          std::to_string(vocab);
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("failed: " + cmd);
}

std::string fixtures_dir() {
  // A binary carried to another machine (scripts/gpu_check.sh) finds the fixtures there.
  if (const char* dir = std::getenv("GENGRAPH_FIXTURES_DIR")) return dir;
  return GENGRAPH_FIXTURES_DIR;
}

int cli(std::vector<std::string> args) {
  args.insert(args.begin(), "gengraph");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return cli_main(static_cast<int>(argv.size()), argv.data());
}

std::pair<int, std::string> cli_stderr(const std::vector<std::string>& args) {
  ::testing::internal::CaptureStderr();
  ::testing::internal::CaptureStdout();
  const int rc = cli(args);
  const std::string out = ::testing::internal::GetCapturedStdout();
  const std::string err = ::testing::internal::GetCapturedStderr();
  // A usage error is its message and where the usage is, never the usage itself (a command line
  // with no command is the one that gets the overview).
  if (rc == 2 && !args.empty()) {
    EXPECT_LE(std::count(err.begin(), err.end(), '\n'), 3) << err;
    EXPECT_EQ(out, "");
  }
  return {rc, err};
}

std::filesystem::path cli_binary() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  const auto bin = self.parent_path().parent_path() / "gengraph";
  return std::filesystem::is_regular_file(bin, ec) ? bin : std::filesystem::path();
}

int run_quietly(const std::filesystem::path& config, const std::filesystem::path& out) {
  ::testing::internal::CaptureStdout();
  const int rc = cli({"run", config.string(), "--output", out.string(), "--quiet"});
  ::testing::internal::GetCapturedStdout();
  return rc;
}

}  // namespace gengraph::testing

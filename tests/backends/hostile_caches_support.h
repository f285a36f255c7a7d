// Helpers shared by test_hostile_caches.cpp and test_hostile_cache_files.cpp (one file each was
// over 600 lines).
#pragma once

#include <ATen/ATen.h>
#include <fcntl.h>
#include <gengraph/cli.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <set>
#include <sstream>
#include <thread>

#include "backends/aoti/aoti_package.h"
#include "backends/aoti/aoti_step.h"
#include "backends/register_builtin.h"
#include "backends/trace/traced_step.h"
#include "experiments/tools/process.h"
#include "framework/backend/backend_registry.h"
#include "framework/decoding/generator.h"
#include "framework/util/error.h"
#include "tests/support/test_util.h"

namespace gengraph::hostile_caches {

using namespace testing::cli_names;  // NOLINT(build/namespaces)
using testing::error_of;
using ::testing::Not;
using testing::ScopedEnv;

namespace fs = std::filesystem;

inline std::shared_ptr<const CausalLM> tiny() { return testing::test_model("tiny", 11); }

inline std::unique_ptr<ForwardBackend> make(const std::string& name,
                                            std::shared_ptr<const CausalLM> m,
                                            std::map<std::string, std::string> options = {}) {
  register_builtin_backends();
  return BackendRegistry::instance().create(name, std::move(m),
                                            BackendOptions(name, std::move(options)));
}

inline ResolvedSettings greedy(int64_t n) {
  ResolvedSettings g;
  g.max_new_tokens = n;
  return g;
}

inline std::vector<int64_t> first_tokens(ForwardBackend& b) {
  return Generator(greedy(4)).generate(b, {{1, 2, 3}}).outputs.at(0).at(0).tokens;
}

// The package of the tiny model (seed 11) with default options, from the default cache: the one
// Registry/BackendConformance.*/aoti_tiny uses, built by whichever test needs it first.
inline const fs::path& good_package() {
  static const fs::path path = [] {
    register_builtin_backends();
    install_aoti_export_tool();
    AotiStep step(*tiny(), AotiStepOptions{}, "aoti");
    return step.path();
  }();
  return path;
}

// Writes a copy of `source` at `out` through the tools' Python (zipfile), changed as `mode` says:
// "truncate" cuts the program (.so) to half, "zero" blanks it after its first 4 KB,
// "blank_middle" blanks 64 bytes in its middle, "bogus_device"
// names a device no runner serves in the loader's metadata, "deflate" compresses every file,
// "escape" adds a file named outside the package; "+nomanifest" leaves out the manifest. The zip
// itself stays valid (its checksums are those of the changed files).
inline void rewrite_package(const fs::path& source, const fs::path& out, const std::string& mode) {
  static const char* kScript = R"(
import sys, zipfile
src, out, mode = sys.argv[1:4]
zi = zipfile.ZipFile(src)
with zipfile.ZipFile(out, "w") as zo:
    for i in zi.infolist():
        d = zi.read(i.filename)
        if "nomanifest" in mode and i.filename.endswith("gengraph/manifest.json"):
            continue
        if i.filename.endswith(".so") and "truncate" in mode:
            d = d[: len(d) // 2]
        if i.filename.endswith(".so") and "zero" in mode:
            d = d[:4096] + bytes(len(d) - 4096)
        if i.filename.endswith(".so") and "blank_middle" in mode:
            d = d[: len(d) // 2] + bytes(64) + d[len(d) // 2 + 64 :]
        if i.filename.endswith("_metadata.json") and "bogus_device" in mode:
            d = d.replace(b'"AOTI_DEVICE_KEY": "cpu"', b'"AOTI_DEVICE_KEY": "bogus"')
        if "deflate" in mode:
            zo.writestr(i.filename, d, compress_type=zipfile.ZIP_DEFLATED)
        else:
            zo.writestr(i, d)
    if "escape" in mode:
        zo.writestr(zi.infolist()[0].filename.split("/")[0] + "/data/aotinductor/model/../../../x", b"x")
)";
  const auto r = run_captured(
      {python_for_tools().string(), "-c", kScript, source.string(), out.string(), mode});
  ASSERT_EQ(r.rc, 0) << r.err;
}

// Writes a copy of the package `source` at `out` with its entry `name` holding `bytes` instead (the
// zip stays valid; the manifest is left as it was).
inline void replace_entry(const fs::path& source, const fs::path& out, const std::string& name,
                          const std::string& bytes) {
  static const char* kScript = R"(
import sys, zipfile
src, out, name, data = sys.argv[1:5]
zi = zipfile.ZipFile(src)
with zipfile.ZipFile(out, "w") as zo:
    for i in zi.infolist():
        zo.writestr(i, bytes.fromhex(data) if i.filename == name else zi.read(i.filename))
)";
  static const char* kHex = "0123456789abcdef";
  std::string hex;
  for (const unsigned char b : bytes) {
    hex += kHex[b >> 4];
    hex += kHex[b & 15];
  }
  const auto r = run_captured(
      {python_for_tools().string(), "-c", kScript, source.string(), out.string(), name, hex});
  ASSERT_EQ(r.rc, 0) << r.err;
}

// This user's folders /tmp/XXXXXX holding an unpacked package (LibTorch's loader makes them).
inline std::set<fs::path> unpacked_copies() {
  std::set<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it("/tmp", ec), end; !ec && it != end; it.increment(ec)) {
    struct stat st {};
    if (it->path().filename().string().size() != 6 || ::lstat(it->path().c_str(), &st) != 0 ||
        !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) {
      continue;
    }
    std::error_code e2;
    for (fs::recursive_directory_iterator r(it->path(), e2), rend; !e2 && r != rend;
         r.increment(e2)) {
      if (r->path().filename() == "aotinductor") {
        out.insert(it->path());
        break;
      }
    }
  }
  return out;
}

// The copies in /tmp that were not there `before` and are still there: those this process left
// behind. Tests of other processes (ctest runs two at a time) unpack packages into /tmp too, and
// remove their copies when their backends go; so a new copy is judged only after it has had up to
// `patience` to go. A copy left behind never goes.
inline std::set<fs::path> copies_left_behind(
    const std::set<fs::path>& before, std::chrono::seconds patience = std::chrono::seconds(120)) {
  const auto deadline = std::chrono::steady_clock::now() + patience;
  for (;;) {
    std::set<fs::path> left;
    for (const auto& d : unpacked_copies()) {
      if (!before.count(d)) left.insert(d);
    }
    if (left.empty() || std::chrono::steady_clock::now() > deadline) return left;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

// std::cerr into a string for the object's lifetime.
class CaptureCerr {
 public:
  CaptureCerr() : old_(std::cerr.rdbuf(text_.rdbuf())) {}
  ~CaptureCerr() { std::cerr.rdbuf(old_); }
  std::string text() const { return text_.str(); }

 private:
  std::ostringstream text_;
  std::streambuf* old_;
};

// `text` without the lines that say a load waits for the per-user unpack lock: another test
// process (CTest runs two at a time) may hold it, which is no part of what a test checks.
inline std::string without_unpack_waits(const std::string& text) {
  std::istringstream lines(text);
  std::string out;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("gengraph: waiting for the lock on unpacking AOTInductor packages", 0) != 0)
      out += line + "\n";
  }
  return out;
}

// The builder the tests install (a copy of the good package, counted), and the CLI's put back.
class CopyingBuilder {
 public:
  CopyingBuilder() {
    // The good package first, with the real builder: a test run alone (ctest runs each in its own
    // process) would otherwise build it through this very builder, which copies it.
    good_package();
    set_aoti_package_builder(
        [this](const CausalLM&, const AotiExportRequest&, const fs::path& out) {
          ++builds;
          fs::copy_file(good_package(), out, fs::copy_options::overwrite_existing);
          return AotiBuildReport{1.0, 2.0};
        },
        "hostile-copy");
  }
  ~CopyingBuilder() { install_aoti_export_tool(); }
  int builds = 0;
};

// A pid that is certainly not running: a child that has exited and been reaped.
inline pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

inline fs::path only_file_with_extension(const fs::path& dir, const std::string& ext) {
  fs::path found;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ext) {
      EXPECT_TRUE(found.empty()) << "a second " << ext << ": " << e.path();
      found = e.path();
    }
  }
  return found;
}

}  // namespace gengraph::hostile_caches

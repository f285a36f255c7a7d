// Fake set-ups of a known real model for the tests: a small fixture folder in a temporary
// GENGRAPH_CACHE, marked by the set-up's own marker writer (tools/fetch_real_model.py), so that the
// C++ check and the Python writer are tested against each other.
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>

#include "tests/support/test_util.h"

namespace gengraph::testing {

inline const std::string kRealModelName = "smollm2-135m";
// The fake source wheel's SHA-256: the folder is named by its first 12 hex digits.
inline const std::string kFakeWheelSha =
    "0123456789ab0123456789ab0123456789ab0123456789ab0123456789abcdef";

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (const char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

inline std::string project_python() {
  return std::string(GENGRAPH_SOURCE_DIR) + "/.venv/bin/python";
}

// Runs tools/fetch_real_model.py with `args` (already quoted) in this process's environment,
// bounded by 120 s; returns {exit status, stdout and stderr together}.
inline std::pair<int, std::string> run_fetch_real_model(const std::string& args,
                                                        const std::filesystem::path& scratch) {
  const std::filesystem::path out = scratch / "fetch_real_model.out";
  const std::string cmd =
      "timeout 120 " + shell_quote(project_python()) + " " +
      shell_quote(std::string(GENGRAPH_SOURCE_DIR) + "/tools/fetch_real_model.py") + " " + args +
      " > " + shell_quote(out.string()) + " 2>&1";
  const int status = std::system(cmd.c_str());
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return {rc, read_file(out)};
}

// tools/fetch_real_model.py's write_marker on `folder`: the marker of a conversion of the wheel
// `wheel_sha`, listing every file in the folder with its size and SHA-256.
inline void write_real_model_marker(const std::filesystem::path& folder,
                                    const std::string& wheel_sha = kFakeWheelSha) {
  const std::string cmd =
      shell_quote(project_python()) +
      " -c 'import sys; sys.path.insert(0, sys.argv[1]); import fetch_real_model as f; "
      "f.write_marker(sys.argv[2], sys.argv[3], source=\"a test\")' " +
      shell_quote(std::string(GENGRAPH_SOURCE_DIR) + "/tools") + " " +
      shell_quote(folder.string()) + " " + shell_quote(wheel_sha);
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("write_marker failed: " + cmd);
}

// A cache as the set-up leaves it: models/<name>-<12 hex> holding a copy of the fixture model
// `fixture` (with `tokenizer.json`, a small stand-in file, when `with_tokenizer`) and its marker,
// and the link models/<name> to it. Returns the folder (canonical).
inline std::filesystem::path set_up_fake_real_model(const std::filesystem::path& cache,
                                                    bool with_tokenizer = false,
                                                    const std::string& fixture = "gpt2-a") {
  const std::string folder_name = kRealModelName + "-" + kFakeWheelSha.substr(0, 12);
  const auto folder = cache / "models" / folder_name;
  std::filesystem::create_directories(folder);
  std::filesystem::copy(std::filesystem::path(fixtures_dir()) / "models" / fixture, folder,
                        std::filesystem::copy_options::recursive);
  if (with_tokenizer)
    write_file(folder / "tokenizer.json", "{\"model\": {\"type\": \"a stand-in\"}}\n");
  write_real_model_marker(folder);
  std::filesystem::create_directory_symlink(folder_name, cache / "models" / kRealModelName);
  return std::filesystem::canonical(folder);
}

}  // namespace gengraph::testing

// Helpers shared by test_hostile_slurm.cpp (the job script) and test_hostile_slurm_jobs.cpp (job
// folders, reruns, tasks): a stand-in sbatch, and job scripts read back as sbatch and bash read
// them.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/test_util.h"

namespace gengraph::hostile_slurm {

using namespace testing::cli_names;  // NOLINT(build/namespaces)
namespace fs = std::filesystem;
using Json = nlohmann::json;
using ::testing::AllOf;
using ::testing::Not;

inline std::string sweep_text() {
  return testing::read_file(std::string(GENGRAPH_SOURCE_DIR) + "/configs/slurm_sweep_tiny.yaml");
}

// A folder on PATH with an `sbatch` that records each script it is given and prints `out`.
struct StandInSbatch {
  TempDir bin;
  testing::ScopedEnv path;
  explicit StandInSbatch(const std::string& out = "4242")
      : path("PATH", bin.path().string() + ":/usr/bin:/bin") {
    write_file(bin / "sbatch",
               "#!/bin/sh\necho \"$2\" >> \"$(dirname \"$0\")/calls\"\necho " + out + "\n");
    fs::permissions(bin / "sbatch", fs::perms::owner_all);
  }
  bool called() const { return fs::exists(bin / "calls"); }
};

// Checks that every line of a job script is the shebang (first), a comment, an #SBATCH line or
// the one exec line (last); returns the exec line.
inline std::string checked_exec_line(const std::string& script) {
  std::istringstream in(script);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  EXPECT_FALSE(lines.empty());
  if (lines.empty()) return "";
  EXPECT_EQ(lines.front(), "#!/bin/bash");
  EXPECT_EQ(script.back(), '\n');
  for (size_t i = 1; i + 1 < lines.size(); ++i) {
    EXPECT_TRUE(lines[i].rfind("# ", 0) == 0 || lines[i].rfind("#SBATCH --", 0) == 0)
        << "line " << i << " is neither a comment nor an #SBATCH line: " << lines[i];
  }
  EXPECT_EQ(lines.back().rfind("exec ", 0), 0u) << lines.back();
  for (const auto& line : lines) EXPECT_EQ(line.find('\r'), std::string::npos) << line;
  return lines.back();
}

// The #SBATCH options as sbatch reads them (its documented rules: arguments split at
// whitespace, double and single quotes group, a backslash takes the next character as it is, an
// unquoted '#' ends the line).
inline std::map<std::string, std::string> sbatch_reads(const std::string& script) {
  std::map<std::string, std::string> out;
  std::istringstream in(script);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("#SBATCH", 0) != 0) continue;
    std::vector<std::string> args;
    std::string arg;
    bool in_arg = false, escaped = false;
    char quote = 0;
    for (size_t i = 7; i < line.size(); ++i) {
      const char ch = line[i];
      if (escaped) {
        arg += ch, escaped = false;
      } else if (ch == '\\') {
        escaped = in_arg = true;
      } else if (quote) {
        if (ch == quote)
          quote = 0;
        else
          arg += ch;
      } else if (ch == '"' || ch == '\'') {
        quote = ch, in_arg = true;
      } else if (ch == '#') {
        break;
      } else if (ch == ' ') {
        if (in_arg) args.push_back(arg);
        arg.clear(), in_arg = false;
      } else {
        arg += ch, in_arg = true;
      }
    }
    EXPECT_EQ(quote, 0) << "unmatched quote: " << line;
    if (in_arg) args.push_back(arg);
    EXPECT_EQ(args.size(), 1u) << "one argument per line: " << line;
    for (const auto& a : args) {
      const auto eq = a.find('=');
      out[a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2)] =
          eq == std::string::npos ? "" : a.substr(eq + 1);
    }
  }
  return out;
}

// The words of the exec line as bash reads them (bash runs `printf` in place of exec). Nothing
// in them runs: `marker` must not appear.
inline std::vector<std::string> bash_reads(const std::string& exec_line, const fs::path& work) {
  write_file(work / "words.sh", "printf '%s\\n' " + exec_line.substr(5) + "\n");
  const std::string cmd = "cd '" + work.string() + "' && bash words.sh > words.txt";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  std::istringstream in(testing::read_file(work / "words.txt"));
  std::vector<std::string> words;
  for (std::string w; std::getline(in, w);) words.push_back(w);
  return words;
}

}  // namespace gengraph::hostile_slurm

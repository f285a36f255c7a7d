#include "experiments/cli/output.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "experiments/cli/arguments.h"
#include "experiments/experiment/experiment_config.h"
#include "experiments/results/results.h"

namespace gengraph::cli {

// The standard output after this command's writes: flushed, and a failed write (a full disk, a
// closed stdout) is an error naming the system's reason (`write_errno` when the write that failed
// set it), followed by `note`.
void check_stdout(const std::string& note, int write_errno) {
  errno = 0;
  std::cout.flush();
  int err = errno ? errno : write_errno;
  if (std::fflush(stdout) != 0) err = errno;
  if (std::cout.fail() || std::ferror(stdout)) {
    throw Error(
        "writing to standard output failed: " + std::string(std::strerror(err ? err : EIO)) + note);
  }
}

// Writes `text` (a table) to stdout and checks that it got there.
void print(const std::string& text, const std::string& note) {
  errno = 0;
  std::cout << text;
  check_stdout(note, errno);
}

// Whether `path` lies in (or is) the folder `folder`, both made absolute and normal.
bool inside_folder(const std::filesystem::path& path, const std::filesystem::path& folder) {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::weakly_canonical(path, ec);
  std::filesystem::path f = std::filesystem::weakly_canonical(folder, ec);
  if (f.filename().empty()) f = f.parent_path();
  return std::mismatch(f.begin(), f.end(), p.begin(), p.end()).first == f.end();
}

// Outputs never replace inputs: the experiment file, or a file of the model folder (its
// config.json, weights or tokenizer). `what` names the output ("results", "plot").
void check_not_an_input(const std::string& what, const std::string& path,
                        const ExperimentConfig& c) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(c.file, ec) && same_file(path, c.file)) {
    throw UsageError("the " + what + " '" + path + "' is the experiment file '" + c.file +
                     "'; outputs never replace inputs: choose another output");
  }
  if (!c.model.path.empty() && std::filesystem::exists(path, ec) &&
      inside_folder(path, c.model.path)) {
    throw UsageError("the " + what + " '" + path + "' is a file of the model folder '" +
                     c.model.path + "'; outputs never replace inputs: choose another output");
  }
}

}  // namespace gengraph::cli

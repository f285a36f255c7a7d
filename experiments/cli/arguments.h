// The `gengraph` command line's arguments (experiments/cli/cli.cpp): the parsed options and
// positional arguments, the per-command usage check, token ids given as --prompt, and the error
// of a command line that does not fit the usage.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "framework/util/error.h"

namespace gengraph::cli {

// A command line that does not fit the usage: exit status 2.
struct UsageError : Error {
  explicit UsageError(const std::string& what) : Error(what) {}
};

struct Args {
  std::vector<std::string> positional;
  std::vector<std::string> sets;
  std::vector<std::string> prompts, texts, slurm_options;
  std::string job_dir, rerun, gengraph;  // gengraph: submit's --gengraph PATH
  std::string output, model, backend = "eager", device = "cpu", dtype = "float32",
                             metric = "total_ms";
  std::optional<std::string> max_new;          // --max-new-tokens as given
  std::optional<std::string> tokenizer;        // --tokenizer as given
  std::string prompt_file;                     // generate --prompts FILE
  std::optional<std::string> skip_special;     // --skip-special-tokens as given
  std::map<std::string, std::string> quality;  // gengraph quality's own flags, as given
  bool quiet = false, stream = false, chat = false, resume = false;
  bool help = false;               // --help or -h: the command's usage, nothing run
  std::vector<std::string> flags;  // every option given, for the per-command check
};

Args parse_args(int argc, char** argv, int first);

// Refuses options the command does not take, and a wrong number of positional arguments.
void check_usage(const std::string& cmd, const Args& a, const std::vector<std::string>& allowed,
                 size_t positional);

// "1,2,3" -> the ids, or an error naming the flag, the item and what it found.
std::vector<int64_t> parse_ids(const std::string& flag_value);

}  // namespace gengraph::cli

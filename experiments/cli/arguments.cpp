#include "experiments/cli/arguments.h"

#include <algorithm>
#include <sstream>

namespace gengraph::cli {

Args parse_args(int argc, char** argv, int first) {
  Args a;
  for (int i = first; i < argc; ++i) {
    const std::string s = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw UsageError("option " + s + " needs a value");
      const std::string v = argv[++i];
      // An empty value is never meant (an unset shell variable): --output '' would otherwise
      // fall back to the default path without a word. --text, --prompt and --max-new-tokens say it
      // themselves, naming what they expect.
      if (v.empty() && s != "--text" && s != "--prompt" && s != "--max-new-tokens")
        throw UsageError("option " + s + " needs a value, found an empty one");
      return v;
    };
    if (s == "--help" || s == "-h") {  // anywhere but as a value: the usage, whatever else
      a.help = true;
      continue;
    }
    if (s.rfind("--", 0) == 0) {
      const bool repeatable =
          s == "--set" || s == "--prompt" || s == "--text" || s == "--slurm-option";
      if (!repeatable && std::find(a.flags.begin(), a.flags.end(), s) != a.flags.end()) {
        throw UsageError("option " + s + " given twice");
      }
      a.flags.push_back(s);
    }
    if (s == "--set") {
      a.sets.push_back(value());
      const auto eq = a.sets.back().find('=');
      if (eq == std::string::npos || eq == 0) {
        throw UsageError("--set '" + a.sets.back() +
                         "': expected KEY=VALUE, e.g. generation.max_new_tokens=16");
      }
    } else if (s == "--output")
      a.output = value();
    else if (s == "--prompt")
      a.prompts.push_back(value());
    else if (s == "--text")
      a.texts.push_back(value());
    else if (s == "--model")
      a.model = value();
    else if (s == "--backend")
      a.backend = value();
    else if (s == "--device")
      a.device = value();
    else if (s == "--dtype")
      a.dtype = value();
    else if (s == "--max-new-tokens")
      a.max_new = value();
    else if (s == "--metric")
      a.metric = value();
    else if (s == "--quiet")
      a.quiet = true;
    else if (s == "--stream")
      a.stream = true;
    else if (s == "--chat")
      a.chat = true;
    else if (s == "--tokenizer")
      a.tokenizer = value();
    else if (s == "--prompts")
      a.prompt_file = value();
    else if (s == "--resume")
      a.resume = true;
    else if (s == "--skip-special-tokens")
      a.skip_special = value();
    else if (s == "--weights" || s == "--group-size" || s == "--text-file" || s == "--windows" ||
             s == "--window" || s == "--new-tokens")
      a.quality[s] = value();
    else if (s == "--slurm-option")
      a.slurm_options.push_back(value());
    else if (s == "--job-dir")
      a.job_dir = value();
    else if (s == "--rerun")
      a.rerun = value();
    else if (s == "--gengraph")
      a.gengraph = value();
    else if (s.rfind("--", 0) == 0)
      throw UsageError("unknown option '" + s + "'");
    else
      a.positional.push_back(s);
  }
  return a;
}

// Refuses options the command does not take, and a wrong number of positional arguments.
void check_usage(const std::string& cmd, const Args& a, const std::vector<std::string>& allowed,
                 size_t positional) {
  for (const auto& f : a.flags) {
    if (std::find(allowed.begin(), allowed.end(), f) == allowed.end()) {
      throw UsageError(cmd + ": option " + f + " does not apply to this command");
    }
  }
  if (a.positional.size() != positional) {
    throw UsageError(cmd + ": expected " + std::to_string(positional) + " argument(s), found " +
                     std::to_string(a.positional.size()));
  }
}

// "1,2,3" -> the ids, or an error naming the flag, the item and what it found.
std::vector<int64_t> parse_ids(const std::string& flag_value) {
  std::vector<int64_t> ids;
  std::stringstream ss(flag_value);
  size_t item = 0;
  for (std::string t; std::getline(ss, t, ',');) {
    const auto b = t.find_first_not_of(" \t"), e = t.find_last_not_of(" \t");
    const std::string v = b == std::string::npos ? "" : t.substr(b, e - b + 1);
    if (v.empty() || v.size() > 18 || v.find_first_not_of("0123456789") != std::string::npos) {
      throw UsageError("--prompt '" + flag_value + "': item " + std::to_string(item) +
                       ": expected a non-negative integer token id, found '" + v + "'");
    }
    ids.push_back(std::stoll(v));
    ++item;
  }
  if (ids.empty() || flag_value.back() == ',') {
    throw UsageError("--prompt '" + flag_value +
                     "': expected comma-separated token ids, e.g. 1,2,3");
  }
  return ids;
}

}  // namespace gengraph::cli

#include "experiments/cli.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "backends/register_builtin.h"
#include "experiments/compare.h"
#include "experiments/experiment_config.h"
#include "experiments/process.h"
#include "experiments/results.h"
#include "experiments/runner.h"
#include "experiments/slurm.h"
#include "experiments/table.h"
#include "framework/backend/backend_registry.h"
#include "framework/model/loader.h"
#include "framework/model/model_config.h"
#include "framework/model/model_registry.h"
#include "framework/util/error.h"

namespace gengraph {
namespace {

const char* kUsage = R"(usage:
  gengraph run CONFIG.yaml [--set KEY=VALUE]... [--output FILE] [--quiet]
      Run an experiment; write results JSON (default results/<name>.json) and print a table.
  gengraph generate --model PRESET|FOLDER (--prompt IDS | --text TEXT)... [--backend NAME]
                    [--max-new-tokens N] [--device cpu|cuda] [--dtype float32|bfloat16|float16]
                    [--set KEY=VALUE]... [--output FILE] [--stream]
      One-off generation; IDS are comma-separated token ids, e.g. --prompt 1,2,3. --text needs a
      model FOLDER with a Hugging Face tokenizer; the output is then decoded to text too.
      --stream prints each token as it is chosen, one line per step (greedy search and sampling).
  gengraph validate CONFIG.yaml [--set KEY=VALUE]...
      Parse and check an experiment (every sweep point, backend names and options) without running it.
  gengraph show RESULTS.json
      Print the table of a results file (for example one written on another machine).
  gengraph compare BEFORE.json AFTER.json [--metric total_ms|decode_ms_per_token|time_to_first_token_ms|tokens_per_second]
                   [--output FILE]
      Row by row (same label, same sweep point): the speed-up of AFTER over BEFORE with a
      distribution-free interval from both files' repeats, and the settings that differ; --output
      writes the comparison as JSON too.
  gengraph submit CONFIG.yaml [--set KEY=VALUE]... [--slurm-option KEY=VALUE]... [--job-dir DIR]
  gengraph submit --rerun DIR [--slurm-option KEY=VALUE]...
      Check every sweep point, then run them on Slurm as one job array (one task per point), with
      the resources of the experiment's cluster: block; --rerun submits the points without a
      result again. Parts land in DIR (default results/<name>.slurm/).
  gengraph collect DIR|JOB_ID [--output FILE]
      Merge a submitted job's parts into one results file, as `gengraph run` writes it; exit 3
      naming the points that failed or have no result yet.
  gengraph task DIR [INDEX]
      Run one point of a submitted job (what each array task runs; INDEX: $SLURM_ARRAY_TASK_ID).
  gengraph backends      List the registered backends and whether each is usable here.
  gengraph presets       List the built-in model presets.
Exit status: 0 done; 1 an error (nothing written); 2 a usage error; 3 results written, but some
runs (peers) failed: the results and the table say which and why.
)";

// A command line that does not fit the usage: exit status 2.
struct UsageError : Error {
  explicit UsageError(const std::string& what) : Error(what) {}
};

struct Args {
  std::vector<std::string> positional;
  std::vector<std::string> sets;
  std::vector<std::string> prompts, texts, slurm_options;
  std::string job_dir, rerun;
  std::string output, model, backend = "eager", device = "cpu", dtype = "float32",
                             metric = "total_ms";
  std::optional<std::string> max_new;  // --max-new-tokens as given
  bool quiet = false, stream = false;
  std::vector<std::string> flags;  // every option given, for the per-command check
};

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
    else if (s == "--slurm-option")
      a.slurm_options.push_back(value());
    else if (s == "--job-dir")
      a.job_dir = value();
    else if (s == "--rerun")
      a.rerun = value();
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

// Prints streamed tokens to stdout as they arrive: one line per step, each token as
// [input] or [input.sequence] followed by the id.
class StreamPrinter {
 public:
  void operator()(const StreamedToken& t) {
    if (t.step != step_) {
      if (step_ >= 0) std::cout << "\n";
      std::cout << "step " << t.step << ":";
      step_ = t.step;
    }
    std::cout << " [" << t.input;
    if (t.sequence > 0) std::cout << "." << t.sequence;
    std::cout << "] " << t.token << std::flush;
  }
  void finish() {
    if (step_ >= 0) std::cout << "\n";
    step_ = -1;
  }

 private:
  int64_t step_ = -1;
};

int run_and_report(const ExperimentConfig& config, const std::string& output_flag, bool quiet,
                   bool stream = false) {
  std::ostringstream sink;
  const std::string out = !output_flag.empty()     ? output_flag
                          : !config.output.empty() ? config.output
                                                   : "results/" + config.name + ".json";
  // Paths that can never be written fail before the run, not after it.
  check_output_path(out, "results");
  if (!config.plot.empty()) {
    check_output_path(config.plot, "plot");
    if (std::filesystem::weakly_canonical(config.plot) == std::filesystem::weakly_canonical(out)) {
      throw UsageError("the plot '" + config.plot + "' and the results '" + out +
                       "' are the same file");
    }
  }
  StreamPrinter printer;
  TokenStream on_token;
  if (stream) on_token = [&printer](const StreamedToken& t) { printer(t); };
  const nlohmann::json doc =
      run_experiment(config, quiet ? static_cast<std::ostream&>(sink) : std::cerr, on_token);
  printer.finish();
  write_outputs(doc, out, config.plot);
  std::cout << format_table(doc) << "results: " << out << "\n";
  if (!config.plot.empty()) std::cout << "plot: " << config.plot << "\n";
  const auto failed = failed_runs(doc);
  if (!failed.empty()) {
    std::cerr << "error: " << failed.size() << " run(s) failed and are recorded as such in " << out
              << ": " << join(failed, "; ") << "\n";
    return 3;
  }
  return 0;
}

// Builds the experiment YAML for `gengraph generate` so it goes through the same validation. Flag
// values are checked here and written as quoted YAML scalars, so no value can change the YAML's
// structure.
std::string generate_yaml(const Args& a) {
  if (a.model.empty()) throw UsageError("generate: --model PRESET|FOLDER is required");
  if (a.prompts.empty() == a.texts.empty()) {
    throw UsageError(
        "generate: give --prompt IDS or --text TEXT (one or more of either, not both)");
  }
  const bool is_folder = std::filesystem::exists(a.model);
  if (!is_folder && (a.model.find('/') != std::string::npos || a.model.rfind('.', 0) == 0)) {
    throw Error("generate: --model '" + a.model +
                "': no such model folder (and not a preset name; see gengraph presets)");
  }
  if (a.max_new && (a.max_new->empty() || a.max_new->size() > 9 ||
                    a.max_new->find_first_not_of("0123456789") != std::string::npos ||
                    std::stoll(*a.max_new) < 1)) {
    throw UsageError("--max-new-tokens: expected an integer >= 1, found '" + *a.max_new + "'");
  }
  if (a.dtype != "float32" && a.dtype != "bfloat16" && a.dtype != "float16") {
    throw UsageError("--dtype: expected float32, bfloat16 or float16, found '" + a.dtype + "'");
  }
  if (a.device != "cpu" && a.device.rfind("cuda", 0) != 0) {
    throw UsageError("--device: expected cpu, cuda or cuda:N, found '" + a.device + "'");
  }
  // JSON strings are YAML double-quoted scalars: any path or text survives the round trip.
  auto q = [](const std::string& v) { return nlohmann::json(v).dump(); };
  std::ostringstream y;
  y << "name: generate\nmodel:\n  " << (is_folder ? "path" : "preset") << ": " << q(a.model)
    << "\n  device: " << q(a.device) << "\n  dtype: " << q(a.dtype) << "\n";
  y << "backend: " << q(a.backend) << "\ninputs:\n  " << (a.texts.empty() ? "prompts" : "texts")
    << ":\n";
  for (const auto& p : a.prompts) y << "    - " << nlohmann::json(parse_ids(p)).dump() << "\n";
  for (const auto& t : a.texts) {
    if (t.empty()) throw UsageError("--text: expected a non-empty text");
    try {
      y << "    - " << q(t) << "\n";
    } catch (const nlohmann::json::exception&) {
      throw UsageError("--text: expected UTF-8 text, found bytes that are not valid UTF-8");
    }
  }
  if (a.max_new) y << "generation:\n  max_new_tokens: " << *a.max_new << "\n";
  y << "run:\n  warmup: 0\n  repeats: 1\n";
  return y.str();
}

// The table of a results file; errors name the file and what is missing.
std::string show_results(const std::string& path) {
  const nlohmann::json doc = read_results(path);
  return with_results_errors("'" + path + "' is not a gengraph results file",
                             [&] { return format_table(doc); });
}

int list_backends() {
  register_builtin_backends();
  for (const auto& name : BackendRegistry::instance().names()) {
    const auto& info = BackendRegistry::instance().get(name);
    const std::string why =
        info.unavailable_reason ? info.unavailable_reason(BackendOptions(name, {})) : "";
    std::cout << name << "\t" << (why.empty() ? "available" : "unavailable: " + why) << "\n    "
              << info.description << "\n";
  }
  return 0;
}

}  // namespace

int cli_main(int argc, char** argv) {
  try {
    if (argc < 2) {
      std::cerr << kUsage;
      return 2;
    }
    const std::string cmd = argv[1];
    if (cmd == "-h" || cmd == "--help" || cmd == "help") {
      std::cout << kUsage;
      return 0;
    }
    const std::vector<std::string> commands = {"run",     "generate", "validate", "show",
                                               "compare", "backends", "presets",  "submit",
                                               "collect", "task"};
    if (std::find(commands.begin(), commands.end(), cmd) == commands.end()) {
      throw UsageError("unknown command '" + cmd + "'");
    }
    const Args a = parse_args(argc, argv, 2);
    if (cmd == "run") {
      check_usage(cmd, a, {"--set", "--output", "--quiet"}, 1);
      return run_and_report(load_experiment(a.positional[0], a.sets), a.output, a.quiet);
    }
    if (cmd == "generate") {
      check_usage(cmd, a,
                  {"--set", "--output", "--quiet", "--prompt", "--text", "--model", "--backend",
                   "--device", "--dtype", "--max-new-tokens", "--stream"},
                  0);
      return run_and_report(
          parse_experiment(generate_yaml(a), "gengraph generate (flags as YAML)", a.sets),
          a.output.empty() ? "results/generate.json" : a.output, a.quiet, a.stream);
    }
    if (cmd == "validate") {
      check_usage(cmd, a, {"--set"}, 1);
      const ExperimentConfig c = load_experiment(a.positional[0], a.sets);
      const auto points = check_experiment(c);
      std::cout << a.positional[0] << ": valid, " << points.size() << " point(s), "
                << c.backends.size() << " backend(s), " << c.peers.size() << " peer(s)\n";
      return 0;
    }
    if (cmd == "submit") {
      if (!a.rerun.empty()) {
        check_usage(cmd, a, {"--rerun", "--slurm-option"}, 0);
        resubmit_missing(a.rerun, a.slurm_options, std::cout);
        return 0;
      }
      check_usage(cmd, a, {"--set", "--slurm-option", "--job-dir"}, 1);
      submit_experiment(a.positional[0], a.sets, a.slurm_options, a.job_dir, std::cout);
      return 0;
    }
    if (cmd == "collect") {
      check_usage(cmd, a, {"--output"}, 1);
      return collect_job(a.positional[0], a.output, std::cout, std::cerr);
    }
    if (cmd == "task") {
      if (a.positional.size() == 2) {
        const std::string& i = a.positional[1];
        if (i.empty() || i.size() > 9 || i.find_first_not_of("0123456789") != std::string::npos)
          throw UsageError("task: INDEX: expected a point number, found '" + i + "'");
        check_usage(cmd, a, {"--quiet"}, 2);
        return run_task(a.positional[0], std::stoll(i), std::cerr);
      }
      check_usage(cmd, a, {"--quiet"}, 1);
      return run_task(a.positional[0], std::nullopt, std::cerr);
    }
    if (cmd == "show") {
      check_usage(cmd, a, {}, 1);
      std::cout << show_results(a.positional[0]);
      return 0;
    }
    if (cmd == "compare") {
      check_usage(cmd, a, {"--metric", "--output"}, 2);
      if (std::find(kCompareMetrics.begin(), kCompareMetrics.end(), a.metric) ==
          kCompareMetrics.end()) {
        throw UsageError("--metric: expected one of " + join(kCompareMetrics, ", ") + ", found '" +
                         a.metric + "'");
      }
      if (!a.output.empty()) check_output_path(a.output, "comparison");
      const nlohmann::json before = read_results(a.positional[0]),
                           after = read_results(a.positional[1]);
      nlohmann::json comparison;
      const std::string table =
          with_results_errors("'" + a.positional[0] + "' or '" + a.positional[1] + "'", [&] {
            comparison =
                compare_documents(before, a.positional[0], after, a.positional[1], a.metric);
            return format_comparison(comparison);
          });
      if (!a.output.empty()) write_outputs(comparison, a.output, "");
      std::cout << table;
      if (!a.output.empty()) std::cout << "comparison: " << a.output << "\n";
      return 0;
    }
    check_usage(cmd, a, {}, 0);
    if (cmd == "backends") return list_backends();
    for (const auto& p : preset_names()) std::cout << p << "\t" << preset_config(p).dump() << "\n";
    return 0;
  } catch (const UsageError& e) {
    std::cerr << "error: " << e.what() << "\n" << kUsage;
    return 2;
  } catch (const Interrupted& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 128 + e.signal;
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  } catch (const c10::Error& e) {  // LibTorch's message, without its C++ stack
    std::cerr << "error: " << e.what_without_backtrace() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace gengraph

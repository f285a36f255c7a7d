#include <c10/util/Exception.h>
#include <fcntl.h>
#include <gengraph/cli.h>
#include <gengraph/plugin.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "backends/register_builtin.h"
#include "experiments/cli/arguments.h"
#include "experiments/cli/generate.h"
#include "experiments/cli/output.h"
#include "experiments/cli/plugin_check.h"
#include "experiments/cli/serve.h"
#include "experiments/cli/usage.h"
#include "experiments/cluster/slurm.h"
#include "experiments/experiment/experiment_config.h"
#include "experiments/experiment/runner.h"
#include "experiments/results/compare.h"
#include "experiments/results/quality.h"
#include "experiments/results/results.h"
#include "experiments/results/table.h"
#include "experiments/tools/process.h"
#include "framework/backend/backend_registry.h"
#include "framework/backend/model_step.h"
#include "framework/model/known_models.h"
#include "framework/model/loader.h"
#include "framework/model/model_config.h"
#include "framework/model/model_names.h"
#include "framework/model/model_registry.h"
#include "framework/text/tokenizer.h"
#include "framework/util/error.h"
#include "framework/util/path_errors.h"
#include "framework/util/progress.h"
#include "framework/util/strings.h"

namespace gengraph {
namespace {

using namespace cli;  // NOLINT: the command line's own parts (arguments.h, output.h)

// `results_by_default`: without --output (or the experiment's own `output` or `plot`), write the
// results to results/<name>.json (run) or nowhere (generate, which prints its table and tokens).
int run_and_report(const ExperimentConfig& config, const std::string& output_flag, bool quiet,
                   bool stream = false, bool results_by_default = true) {
  std::ostringstream sink;
  const bool write =
      results_by_default || !output_flag.empty() || !config.output.empty() || !config.plot.empty();
  const std::string out = !output_flag.empty()     ? output_flag
                          : !config.output.empty() ? config.output
                          : write                  ? "results/" + config.name + ".json"
                                                   : "";
  // Paths that can never be written fail before the run, not after it.
  if (write) {
    check_output_path(out, "results");
    check_not_an_input("results", out, config);
  }
  if (!config.plot.empty()) {
    check_output_path(config.plot, "plot");
    check_not_an_input("plot", config.plot, config);
    if (same_file(config.plot, out)) {
      throw UsageError("the plot '" + config.plot + "' and the results '" + out +
                       "' are the same file");
    }
  }
  StreamPrinter printer;
  std::unique_ptr<TextStreamPrinter> text_printer;
  TokenStream on_token;
  if (stream && !config.inputs.texts.empty() && config.inputs.tokenizer != "python") {
    // Text as it comes, through the native tokenizer; a tokenizer it does not read streams ids
    // (the runner says why it falls back).
    try {
      text_printer = std::make_unique<TextStreamPrinter>(load_tokenizer(config.model.path),
                                                         config.inputs.texts.size() == 1,
                                                         config.inputs.skip_special());
    } catch (const Error& e) {
      if (std::string(e.what()).rfind(std::string(kUnsupportedTokenizer), 0) != 0) throw;
    }
  }
  if (text_printer) {
    on_token = [&](const StreamedToken& t) {
      (*text_printer)(t);
      return true;
    };
  } else if (stream) {
    on_token = [&printer](const StreamedToken& t) {
      printer(t);
      return true;
    };
  }
  const nlohmann::json doc =
      run_experiment(config, quiet ? static_cast<std::ostream&>(sink) : std::cerr, on_token);
  printer.finish();
  if (text_printer) text_printer->finish();
  if (write) write_outputs(doc, out, config.plot);
  print(format_table(doc) +
            (write ? "results: " + out + "\n"
                   : "results: not written (--output FILE writes them)\n") +
            (config.plot.empty() ? "" : "plot: " + config.plot + "\n"),
        write ? "; the results were written to '" + out + "'" : "");
  const auto failed = failed_runs(doc);
  if (!failed.empty()) {
    std::cerr << "error: " << failed.size() << " run(s) failed and are recorded as such in "
              << (write ? out : "the table above") << ": " << join(failed, "; ") << "\n";
    return 3;
  }
  return 0;
}

// A positive integer flag of gengraph quality, or its default.
int64_t count_flag(const Args& a, const std::string& flag, int64_t fallback, int64_t most) {
  const auto it = a.quality.find(flag);
  if (it == a.quality.end()) return fallback;
  const std::string& v = it->second;
  if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos ||
      std::stoll(v) < 1 || std::stoll(v) > most) {
    throw UsageError(flag + ": expected an integer from 1 to " + std::to_string(most) +
                     ", found '" + v + "'");
  }
  return std::stoll(v);
}

int run_quality(const Args& a) {
  if (a.model.empty()) throw UsageError("quality: --model FOLDER|NAME is required");
  QualityOptions o;
  o.model = a.model;
  if (const auto g = a.quality.find("--group-size"); g != a.quality.end()) {
    const std::string& v = g->second;  // a number's spelling here; its value is the parser's
    // (0, which model.group_size reads as not given, is no group size to ask for).
    if (v.empty() || v.size() > 3 || v.find_first_not_of("0123456789") != std::string::npos ||
        std::stoll(v) == 0) {
      throw UsageError("--group-size: expected " + std::string(kGroupSizes) + ", found '" + v +
                       "'");
    }
    o.group_size = std::stoll(v);
  }
  const auto w = a.quality.find("--weights");
  std::stringstream formats(w == a.quality.end() ? "int8,int4,bfloat16" : w->second);
  for (std::string f; std::getline(formats, f, ',');) {
    // Each format through the one weight-format parser, before any model loads.
    bool quantized = false;
    try {
      quantized = quality_weight_format(f, o.group_size, o.quantize_head).quantized();
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
    if (!quantized)
      throw UsageError("--weights: float is the reference; list int8, int4 or bfloat16");
    o.formats.push_back(f);
  }
  if (o.formats.empty()) throw UsageError("--weights: expected a list such as int8,int4");
  if (a.quality.count("--text-file")) o.text_file = a.quality.at("--text-file");
  o.windows = count_flag(a, "--windows", 8, 256);
  o.window = count_flag(a, "--window", 256, 8192);
  o.new_tokens = count_flag(a, "--new-tokens", 32, 4096);
  o.prompts = a.texts.empty()
                  ? std::vector<std::string>{"The capital of France is", "My favourite book is",
                                             "To make a cup of tea, first",
                                             "The theory of relativity says that",
                                             "Once upon a time, in a small village,"}
                  : a.texts;
  const std::string out = a.output.empty() ? "results/quality.json" : a.output;
  check_output_path(out, "results");
  // Outputs never replace inputs: the text, or a file of a model folder given by its path.
  if (same_file(out, o.text_file) ||
      (std::filesystem::is_directory(o.model) && inside_folder(out, o.model))) {
    throw UsageError("quality: the output '" + out + "' is " +
                     (same_file(out, o.text_file) ? "the text file" : "inside the model folder") +
                     "; outputs never replace inputs: choose another --output");
  }
  std::ostringstream sink;
  const nlohmann::json doc =
      measure_quality(o, a.quiet ? static_cast<std::ostream&>(sink) : std::cerr);
  write_outputs(doc, out, "");  // as run writes its results: missing folders made
  print(format_quality(doc) + "results: " + out + "\n",
        "; the results were written to '" + out + "'");
  return 0;
}

// The table of a results file; errors name the file, the key path, what was expected and what
// was found (every field is read through JsonAt; the wrapper is a last resort).
std::string show_results(const std::string& path) {
  const nlohmann::json doc = read_results(path);
  return with_results_errors(results_source(path), [&] { return format_table(doc, path); });
}

// Presets (random weights of a published shape) and known real models (trained weights the set-up
// fetches), with whether each real one is set up here and where.
int list_models() {
  std::string out =
      "presets (random weights from a seed, no files; gengraph presets prints their "
      "config.json):\n";
  for (const auto& p : preset_names()) {
    const nlohmann::json c = preset_config(p);
    // The shape in the config's own words (GPT-2's n_layer/n_embd or the LLaMA family's).
    const auto number = [&](const char* a, const char* b) {
      const nlohmann::json& v = c.contains(a) ? c[a] : c.contains(b) ? c[b] : nlohmann::json();
      return v.is_number_integer() ? std::to_string(v.get<int64_t>()) : std::string("?");
    };
    out += "  " + p + "\t" + c.value("model_type", std::string("?")) + ", " +
           number("n_layer", "num_hidden_layers") + " layers, width " +
           number("n_embd", "hidden_size") + ", vocabulary " + number("vocab_size", "vocab_size") +
           "\n";
  }
  out +=
      "known real models (trained weights; scripts/setup.sh fetches and converts them, an opt-in "
      "one only when asked):\n";
  for (const auto& m : known_models()) {
    out += "  " + m.name + "\t" + m.description + "\n    license " + m.license + "; from " +
           m.origin + "\n";
    std::string where;
    try {
      const KnownModelStatus s = known_model_status(m.name);
      if (s.ready) {
        where = "set up here: " + s.folder.string();
      } else if (!s.refused.empty()) {  // there, but not what the set-up's conversion wrote
        where = "not usable here: '" + s.folder.string() + "': " + s.refused + "; run " +
                (m.fetch.empty() ? "tools/fetch_real_model.py (or scripts/setup.sh)" : m.fetch) +
                (m.file.empty() ? " to convert it again" : " to fetch it again");
      } else {
        where = std::string(m.fetch.empty() ? "not set up" : "not fetched") + " here (" +
                s.folder.string() + " is missing" +
                (s.unavailable_reason.empty() ? "" : "; the set-up said: " + s.unavailable_reason) +
                "); run " + (m.fetch.empty() ? "scripts/setup.sh" : m.fetch);
      }
    } catch (const Error& e) {
      where = std::string("not set up here: ") + e.what();
    }
    out += "    " + terminal_text(where, false) + "\n";
  }
  print(out);
  return 0;
}

int list_backends() {
  register_builtin_backends();
  std::string list;
  for (const auto& name : BackendRegistry::instance().names()) {
    const auto& info = BackendRegistry::instance().get(name);
    const std::string why =
        info.unavailable_reason ? info.unavailable_reason(BackendOptions(name, {})) : "";
    list += name + "\t" + (why.empty() ? "available" : "unavailable: " + why) + "\n    " +
            info.description + "\n";
  }
  // The model steps a backend that wraps one (cuda_graph's option `step`) can run.
  list += "model steps (cuda_graph's option step):\n";
  for (const auto& name : ModelStepRegistry::instance().names()) {
    list += "  " + name + "\t" +
            ModelStepRegistry::instance().get(name, "model steps").description + "\n";
  }
  print(list);
  return 0;
}

// Error messages may quote text from files and the command line: made safe for the terminal,
// line breaks kept.
std::string shown(const std::string& message) { return terminal_text(message, true); }

// Every `--plugin LIB` and `--plugin=LIB` on the line, taken out of `args`: the plug-ins to load
// before the command runs.
std::vector<std::string> take_plugins(std::vector<char*>& args) {
  std::vector<std::string> plugins;
  std::vector<char*> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string arg = args[i];
    if (i > 0 && arg == "--plugin") {
      if (i + 1 >= args.size())
        throw UsageError("--plugin: expected the path of a plug-in library");
      plugins.emplace_back(args[++i]);
    } else if (i > 0 && arg.rfind("--plugin=", 0) == 0) {
      plugins.push_back(arg.substr(9));
    } else {
      rest.push_back(args[i]);
    }
  }
  args = rest;
  return plugins;
}

// `gengraph CMD --help` or `-h` anywhere among plugin's or serve's own arguments.
bool asks_help(char** first, char** last) {
  return std::any_of(first, last, [](const char* s) {
    return std::string(s) == "--help" || std::string(s) == "-h";
  });
}

int run_cli(int argc_in, char** argv_in) {
  std::string cmd;  // the command, once known: a usage error points at its --help
  try {
    std::vector<char*> args(argv_in, argv_in + argc_in);
    const std::vector<std::string> plugins = take_plugins(args);
    const int argc = static_cast<int>(args.size());
    char** argv = args.data();
    // The built-ins first, so that a plug-in that reuses one of their names is refused naming it.
    register_builtin_backends();
    load_plugins_from_environment();
    for (const std::string& p : plugins) load_plugin(p);
    if (argc < 2) {  // no command: the overview, as the usage error it is
      std::cerr << overview();
      return 2;
    }
    const std::string word = argv[1];
    if (word == "-h" || word == "--help" || word == "help") {
      // gengraph help: the overview; gengraph help CMD: CMD's usage.
      if (word != "help" || argc == 2) {
        print(overview());
        return 0;
      }
      if (argc > 3) {
        throw UsageError("help: expected one command, found " + std::to_string(argc - 2) +
                         " arguments");
      }
      if (command_help(argv[2]).empty())
        throw UsageError("help: unknown command '" + std::string(argv[2]) + "'");
      print(command_help(argv[2]));
      return 0;
    }
    if (command_help(word).empty()) throw UsageError("unknown command '" + word + "'");
    cmd = word;
    if ((cmd == "plugin" || cmd == "serve") && asks_help(argv + 2, argv + argc)) {
      print(command_help(cmd));
      return 0;
    }
    if (cmd == "plugin") return plugin_command({argv + 2, argv + argc}, std::cout, std::cerr);
    if (cmd == "serve") return serve_command({argv + 2, argv + argc}, std::cout, std::cerr);
    const Args a = parse_args(argc, argv, 2);
    if (a.help) {
      print(command_help(cmd));
      return 0;
    }
    // --quiet: no progress display either (an aoti build's, ...); a Slurm task's goes to its log.
    if (a.quiet && cmd != "task") set_progress_quiet(true);
    if (cmd == "run") {
      check_usage(cmd, a, {"--set", "--output", "--quiet"}, 1);
      return run_and_report(load_experiment(a.positional[0], a.sets), a.output, a.quiet);
    }
    if (cmd == "generate") {
      check_usage(cmd, a,
                  {"--set", "--output", "--quiet", "--prompt", "--text", "--model", "--backend",
                   "--device", "--dtype", "--max-new-tokens", "--stream", "--chat", "--tokenizer",
                   "--prompts", "--resume", "--skip-special-tokens"},
                  0);
      if (!a.prompt_file.empty()) return run_prompts(a);
      return run_and_report(
          parse_experiment(generate_yaml(a), "gengraph generate (flags as YAML)", a.sets), a.output,
          a.quiet, a.stream, /*results_by_default=*/false);
    }
    if (cmd == "quality") {
      check_usage(cmd, a,
                  {"--model", "--weights", "--group-size", "--text-file", "--windows", "--window",
                   "--text", "--new-tokens", "--output", "--quiet"},
                  0);
      return run_quality(a);
    }
    if (cmd == "validate") {
      check_usage(cmd, a, {"--set"}, 1);
      const ExperimentConfig c = load_experiment(a.positional[0], a.sets);
      const auto points = check_experiment(c);
      print(a.positional[0] + ": valid, " + std::to_string(points.size()) + " point(s), " +
            std::to_string(c.backends.size()) + " backend(s), " + std::to_string(c.peers.size()) +
            " peer(s)\n");
      return 0;
    }
    if (cmd == "submit") {
      if (!a.rerun.empty()) {
        check_usage(cmd, a, {"--rerun", "--slurm-option", "--gengraph"}, 0);
        resubmit_missing(a.rerun, a.slurm_options, std::cout, a.gengraph);
        return 0;
      }
      check_usage(cmd, a, {"--set", "--slurm-option", "--job-dir", "--gengraph"}, 1);
      submit_experiment(a.positional[0], a.sets, a.slurm_options, a.job_dir, std::cout, a.gengraph);
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
      print(show_results(a.positional[0]));
      return 0;
    }
    if (cmd == "compare") {
      check_usage(cmd, a, {"--metric", "--output"}, 2);
      if (std::find(kCompareMetrics.begin(), kCompareMetrics.end(), a.metric) ==
          kCompareMetrics.end()) {
        throw UsageError("--metric: expected one of " + join(kCompareMetrics, ", ") + ", found '" +
                         a.metric + "'");
      }
      if (!a.output.empty()) {
        check_output_path(a.output, "comparison");
        for (const auto& input : a.positional) {
          if (same_file(a.output, input)) {
            throw UsageError("compare: the output '" + a.output + "' is the input '" + input +
                             "'; outputs never replace inputs: choose another --output");
          }
        }
      }
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
      print(table + (a.output.empty() ? "" : "comparison: " + a.output + "\n"));
      return 0;
    }
    check_usage(cmd, a, {}, 0);
    if (cmd == "backends") return list_backends();
    if (cmd == "models") return list_models();
    if (cmd == "paths") {
      const FoundPath home = tools_home(), python = tools_python();
      std::error_code ec;
      const auto missing = [&](const std::filesystem::path& p) {
        return std::filesystem::exists(p, ec) ? std::string() : std::string(", missing");
      };
      print("tools: " + (home.path / "tools").string() + " (" + home.origin +
            missing(home.path / "tools") + ")\npython: " + python.path.string() + " (" +
            python.origin + missing(python.path) + ")\n");
      return 0;
    }
    std::string presets;
    for (const auto& p : preset_names()) presets += p + "\t" + preset_config(p).dump() + "\n";
    print(presets);
    return 0;
  } catch (const UsageError& e) {
    std::cerr << "error: " << shown(e.what()) << "\n" << usage_hint(cmd);
    return 2;
  } catch (const Interrupted& e) {
    std::cerr << "error: " << shown(e.what()) << "\n";
    return 128 + e.signal;
  } catch (const Error& e) {
    std::cerr << "error: " << shown(e.what()) << "\n";
    return 1;
  } catch (const c10::Error& e) {  // LibTorch's message, without its C++ stack
    std::cerr << "error: " << shown(e.what_without_backtrace()) << "\n";
    return 1;
  } catch (const std::filesystem::filesystem_error& e) {  // one no reader put in our words
    std::cerr << "error: " << shown(describe_filesystem_error(e)) << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << shown(e.what()) << "\n";
    return 1;
  }
}

}  // namespace

int cli_main(int argc, char** argv) {
  // A closed stdout: a file opened later would take its descriptor and receive the output.
  // /dev/null opened read-only holds it instead, so that writes fail (EBADF) and are reported.
  if (::fcntl(STDOUT_FILENO, F_GETFD) == -1 && errno == EBADF) {
    const int fd = ::open("/dev/null", O_RDONLY);
    if (fd > STDOUT_FILENO) {
      ::dup2(fd, STDOUT_FILENO);
      ::close(fd);
    }
  }
  // This command's output is judged alone (an embedding program may call it more than once).
  std::cout.clear();
  std::clearerr(stdout);
  register_builtin_backends();  // beside any the calling program registered first
  const int rc = run_cli(argc, argv);
  // Whatever is still buffered: a command whose output did not arrive has not done its work. A
  // command that failed already said why.
  if (rc == 0 || rc == 3) {
    try {
      check_stdout();
    } catch (const Error& e) {
      std::cerr << "error: " << e.what() << "\n";
      return 1;
    }
  }
  return rc;
}

}  // namespace gengraph

#include "experiments/cli.h"

#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "experiments/runner.h"
#include "framework/backend/backend_registry.h"
#include "framework/config/experiment_config.h"
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
                    [--set KEY=VALUE]... [--output FILE]
      One-off generation; IDS are comma-separated token ids, e.g. --prompt 1,2,3. --text needs a
      model FOLDER with a Hugging Face tokenizer; the output is then decoded to text too.
  gengraph validate CONFIG.yaml [--set KEY=VALUE]...
      Parse and check an experiment (every sweep point, backend names and options) without running it.
  gengraph show RESULTS.json
      Print the table of a results file (for example one written on another machine).
  gengraph backends      List the registered backends and whether each is usable here.
  gengraph presets       List the built-in model presets.
Exit status: 0 done; 1 an error (nothing written); 2 a usage error; 3 results written, but some
runs (peers) failed: the results and the table say which and why.
)";

struct Args {
  std::vector<std::string> positional;
  std::vector<std::string> sets;
  std::vector<std::string> prompts, texts;
  std::string output, model, backend = "eager", device = "cpu", dtype = "float32", max_new;
  bool quiet = false;
};

Args parse_args(int argc, char** argv, int first) {
  Args a;
  for (int i = first; i < argc; ++i) {
    const std::string s = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw Error("option " + s + " needs a value");
      return argv[++i];
    };
    if (s == "--set") a.sets.push_back(value());
    else if (s == "--output") a.output = value();
    else if (s == "--prompt") a.prompts.push_back(value());
    else if (s == "--text") a.texts.push_back(value());
    else if (s == "--model") a.model = value();
    else if (s == "--backend") a.backend = value();
    else if (s == "--device") a.device = value();
    else if (s == "--dtype") a.dtype = value();
    else if (s == "--max-new-tokens") a.max_new = value();
    else if (s == "--quiet") a.quiet = true;
    else if (s.rfind("--", 0) == 0) throw Error("unknown option '" + s + "'\n" + kUsage);
    else a.positional.push_back(s);
  }
  return a;
}

int run_and_report(const ExperimentConfig& config, const std::string& output_flag, bool quiet) {
  std::ostringstream sink;
  const nlohmann::json doc = run_experiment(config, quiet ? static_cast<std::ostream&>(sink) : std::cerr);
  const std::string out = !output_flag.empty() ? output_flag
                          : !config.output.empty() ? config.output
                                                   : "results/" + config.name + ".json";
  write_results(doc, out);
  std::cout << format_table(doc) << "results: " << out << "\n";
  if (!config.plot.empty()) write_plot(out, config.plot);
  const auto failed = failed_runs(doc);
  if (!failed.empty()) {
    std::cerr << "error: " << failed.size() << " run(s) failed and are recorded as such in " << out << ": "
              << join(failed, "; ") << "\n";
    return 3;
  }
  return 0;
}

// Builds the experiment YAML for `gengraph generate` so it goes through the same validation.
std::string generate_yaml(const Args& a) {
  if (a.model.empty()) throw Error("generate: --model PRESET|FOLDER is required");
  if (a.prompts.empty() == a.texts.empty()) {
    throw Error("generate: give --prompt IDS or --text TEXT (one or more of either, not both)");
  }
  // JSON strings are YAML double-quoted scalars: any path or text survives the round trip.
  auto q = [](const std::string& v) { return nlohmann::json(v).dump(); };
  std::ostringstream y;
  const bool is_preset = !std::filesystem::exists(a.model);
  y << "name: generate\nmodel:\n  " << (is_preset ? "preset" : "path") << ": " << q(a.model)
    << "\n  device: " << q(a.device) << "\n  dtype: " << q(a.dtype) << "\n";
  y << "backend: " << q(a.backend) << "\ninputs:\n  " << (a.texts.empty() ? "prompts" : "texts") << ":\n";
  for (const auto& p : a.prompts) y << "    - [" << p << "]\n";
  for (const auto& t : a.texts) y << "    - " << q(t) << "\n";
  if (!a.max_new.empty()) y << "generation:\n  max_new_tokens: " << a.max_new << "\n";
  y << "run:\n  warmup: 0\n  repeats: 1\n";
  return y.str();
}

// The table of a results file; errors name the file and what is missing.
std::string show_results(const std::string& path) {
  const nlohmann::json doc = read_json_file(path);
  const std::string what = "'" + path + "' is not a gengraph results file: ";
  if (!doc.is_object()) throw Error(what + "expected a JSON object");
  if (doc.value("schema_version", 0) != 1) {
    throw Error(what + "expected schema_version 1, found " +
                (doc.contains("schema_version") ? doc["schema_version"].dump() : std::string("none")));
  }
  const bool sweep = doc.contains("points");
  if (!(sweep ? doc["points"].is_array() : doc.contains("runs") && doc["runs"].is_array())) {
    throw Error(what + "expected a 'runs' list (or 'points', each with 'runs')");
  }
  try {
    return format_table(doc);
  } catch (const nlohmann::json::exception& e) {
    throw Error(what + "a field is missing or of the wrong type (" + e.what() + "); see docs/results-schema.md");
  }
}

int list_backends() {
  register_builtin_backends();
  for (const auto& name : BackendRegistry::instance().names()) {
    const auto& info = BackendRegistry::instance().get(name);
    const std::string why = info.unavailable_reason ? info.unavailable_reason(BackendOptions(name, {})) : "";
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
    const Args a = parse_args(argc, argv, 2);
    if (cmd == "run") {
      if (a.positional.size() != 1) throw Error("run: expected one CONFIG.yaml\n" + std::string(kUsage));
      return run_and_report(load_experiment(a.positional[0], a.sets), a.output, a.quiet);
    }
    if (cmd == "generate") {
      return run_and_report(parse_experiment(generate_yaml(a), "<command line>", a.sets),
                            a.output.empty() ? "results/generate.json" : a.output, a.quiet);
    }
    if (cmd == "validate") {
      if (a.positional.size() != 1) throw Error("validate: expected one CONFIG.yaml");
      register_builtin_backends();
      const ExperimentConfig c = load_experiment(a.positional[0], a.sets);
      const auto points = expand_sweep(c);
      for (const auto& [overrides, pc] : points) {
        for (const auto& b : pc.backends) BackendRegistry::instance().get(b.name);
      }
      std::cout << a.positional[0] << ": valid, " << points.size() << " point(s), "
                << c.backends.size() << " backend(s), " << c.peers.size() << " peer(s)\n";
      return 0;
    }
    if (cmd == "show") {
      if (a.positional.size() != 1) throw Error("show: expected one RESULTS.json");
      std::cout << show_results(a.positional[0]);
      return 0;
    }
    if (cmd == "backends") return list_backends();
    if (cmd == "presets") {
      for (const auto& p : preset_names()) std::cout << p << "\t" << preset_config(p).dump() << "\n";
      return 0;
    }
    std::cerr << "unknown command '" << cmd << "'\n" << kUsage;
    return 2;
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace gengraph

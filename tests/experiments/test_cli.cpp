// The CLI: commands, usage errors, validation before any load, bad input naming the file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "framework/decoding/resolved_settings.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using namespace testing::cli_names;  // NOLINT(build/namespaces)

// `gengraph paths`: where the Python tools and their Python come from, and why. In the build tree,
// the source tree; GENGRAPH_ROOT and GENGRAPH_PYTHON win when set, and a missing one is said.
TEST(Cli, PathsSaysWhereTheToolsAndTheirPythonAre) {
  const auto paths = [] {
    ::testing::internal::CaptureStdout();
    EXPECT_EQ(cli({"paths"}), 0);
    return ::testing::internal::GetCapturedStdout();
  };
  {
    testing::ScopedEnv root("GENGRAPH_ROOT", ""), python("GENGRAPH_PYTHON", "");
    const std::string src = GENGRAPH_SOURCE_DIR;
    EXPECT_EQ(paths(), "tools: " + src + "/tools (the source tree this gengraph was built from)\n" +
                           "python: " + src +
                           "/.venv/bin/python (the .venv of the source tree this gengraph was "
                           "built from)\n");
  }
  TempDir dir;
  testing::ScopedEnv root("GENGRAPH_ROOT", dir.path().string());
  testing::ScopedEnv python("GENGRAPH_PYTHON", "/usr/bin/python3");
  EXPECT_EQ(paths(), "tools: " + (dir / "tools").string() + " (GENGRAPH_ROOT, missing)\n" +
                         "python: /usr/bin/python3 (GENGRAPH_PYTHON)\n");
}

// A command line that does not fit the usage exits 2 and says what is wrong; flag values never
// reach the YAML unchecked (a newline in a value cannot add keys).
TEST(Cli, UsageErrorsExitTwoAndNameTheFlag) {
  TempDir dir;
  write_file(dir / "e.yaml", "model: {preset: gpt2-tiny}\ninputs: {prompts: [[1]]}\n");
  const std::string e = (dir / "e.yaml").string();
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"run"}, "run: expected 1 argument(s), found 0"},
      {{"run", e, "--bogus"}, "unknown option '--bogus'"},
      {{"run", e, "--set"}, "option --set needs a value"},
      {{"run", e, "--prompt", "1"}, "run: option --prompt does not apply to this command"},
      {{"validate", e, "--output", "x.json"}, "validate: option --output does not apply"},
      {{"show"}, "show: expected 1 argument(s), found 0"},
      {{"frobnicate"}, "unknown command 'frobnicate'"},
      {{"generate", "--prompt", "1"}, "generate: --model PRESET|FOLDER|NAME is required"},
      {{"generate", "--model", "gpt2-tiny", "--prompt", "-1,2"},
       "--prompt '-1,2': item 0: expected a non-negative integer token id, found '-1'"},
      {{"generate", "--model", "gpt2-tiny", "--prompt", "1], [2"}, "--prompt '1], [2': item 0"},
      {{"generate", "--model", "gpt2-tiny", "--prompt", "1,2,"},
       "expected comma-separated token ids"},
      {{"generate", "--model", "gpt2-tiny", "--prompt", "1", "--max-new-tokens",
        "2\n  num_beams: 3"},
       "--max-new-tokens: expected an integer >= 1"},
      {{"generate", "--model", "gpt2-tiny", "--prompt", "1", "--max-new-tokens", ""},
       "--max-new-tokens: expected an integer >= 1, found ''"},
      {{"generate", "--model", "gpt2-tiny", "--prompt", "1", "--dtype", "float64"},
       "--dtype: expected float32, bfloat16 or float16, found 'float64'"},
      {{"generate", "--model", "gpt2-tiny", "--prompt", "1", "--device", "tpu"},
       "--device: expected cpu, cuda or cuda:N"},
      {{"generate", "--model", "gpt2-tiny", "--text", ""}, "--text: expected a non-empty text"},
      {{"generate", "--model", "gpt2-tiny", "--text", "caf\xe9"}, "--text: expected UTF-8 text"},
      {{"run", e, "--output", "same.png", "--set", "plot=same.png"},
       "the plot 'same.png' and the results 'same.png' are the same file"},
      {{"run", e, "--output", "a.json", "--output", "b.json"}, "option --output given twice"},
      {{"validate", e, "--set", "foo"}, "--set 'foo': expected KEY=VALUE"},
      {{"generate", "--model", "gpt2-tiny", "--bogus", "--help"}, "unknown option '--bogus'"},
      {{"serve", "--bogus"}, "serve: unknown option '--bogus'"},
      {{"plugin"}, "plugin: expected 'check LIB.so [--timeout SECONDS]', found nothing"},
      {{"help", "frobnicate"}, "help: unknown command 'frobnicate'"},
  };
  for (const auto& [args, expected] : cases) {
    // At most 3 lines (testing::cli_stderr checks it): the error and where the usage is.
    const auto [rc, err] = testing::cli_stderr(args);
    EXPECT_EQ(rc, 2) << args[0] << " " << expected;
    EXPECT_THAT(err, HasSubstr(expected));
    const bool known = args[0] != "frobnicate" && args[0] != "help";
    EXPECT_THAT(err,
                ::testing::EndsWith(known ? "\ngengraph " + args[0] + " --help shows its usage\n"
                                          : "\ngengraph --help lists the commands\n"));
  }
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli({"generate", "--model", (dir / "no" / "model").string(), "--prompt", "1"}), 1);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("/no/model': no such model folder"));
}

// `gengraph CMD --help` and `-h` (anywhere among its arguments but as a value) print CMD's usage
// on stdout, naming each option the command takes, and exit 0; `gengraph --help` the overview,
// naming every command.
TEST(Cli, EveryCommandHasItsHelp) {
  const std::map<std::string, std::vector<std::string>> options = {
      {"run", {"--set", "--output", "--quiet"}},
      {"generate",
       {"--set", "--output", "--quiet", "--prompt", "--text", "--model", "--backend", "--device",
        "--dtype", "--max-new-tokens", "--stream", "--chat", "--tokenizer", "--prompts", "--resume",
        "--skip-special-tokens"}},
      {"quality",
       {"--model", "--weights", "--group-size", "--text-file", "--windows", "--window", "--text",
        "--new-tokens", "--output", "--quiet"}},
      {"serve",
       {"--model", "--backend", "--weights", "--dtype", "--device", "--host", "--port", "--api-key",
        "--max-queue", "--threads", "--model-id", "--log-prompts", "--set"}},
      {"validate", {"--set"}},
      {"show", {}},
      {"compare", {"--metric", "--output"}},
      {"submit", {"--set", "--slurm-option", "--job-dir", "--gengraph", "--rerun"}},
      {"collect", {"--output"}},
      {"task", {"--quiet"}},
      {"backends", {}},
      {"models", {}},
      {"presets", {}},
      {"plugin", {"check", "--timeout"}},
      {"paths", {}},
  };
  const auto printed = [](const std::vector<std::string>& args) {
    ::testing::internal::CaptureStdout();
    ::testing::internal::CaptureStderr();
    const int rc = cli(args);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(rc, 0) << args[0] << ": " << err;
    EXPECT_EQ(err, "") << args[0];
    return ::testing::internal::GetCapturedStdout();
  };
  const std::string overview = printed({"--help"});
  // The overview's list of commands: these, one line each.
  const auto list = overview.substr(overview.find("\ncommands:\n"));
  EXPECT_EQ(std::count(list.begin(), list.end(), '\n'), options.size() + 5) << list;
  EXPECT_EQ(printed({"-h"}), overview);
  EXPECT_EQ(printed({"help"}), overview);
  for (const auto& [name, flags] : options) {
    const std::string help = printed({name, "--help"});
    EXPECT_TRUE(help.rfind("usage: gengraph " + name + " ", 0) == 0 ||
                help.rfind("usage: gengraph " + name + "\n", 0) == 0)
        << help;
    for (const auto& flag : flags) EXPECT_THAT(help, HasSubstr(flag)) << name;
    EXPECT_THAT(overview, HasSubstr("\n  " + name + " ")) << name;
    EXPECT_EQ(printed({name, "-h"}), help);
    EXPECT_EQ(printed({"help", name}), help);
  }
  // After other arguments too, and never run: the model is not looked for.
  EXPECT_EQ(printed({"generate", "--model", "/no/such/model", "--prompt", "1", "-h"}),
            printed({"generate", "--help"}));
  EXPECT_EQ(printed({"serve", "--model", "/no/such/model", "--help"}), printed({"serve", "-h"}));
  EXPECT_EQ(printed({"plugin", "check", "/no/such.so", "--help"}), printed({"plugin", "-h"}));
  // As a value, -h is the value: a text to generate from.
  const auto [rc, err] = testing::cli_stderr({"generate", "--text", "-h"});
  EXPECT_EQ(rc, 2);
  EXPECT_THAT(err, HasSubstr("generate: --model PRESET|FOLDER|NAME is required"));
}

// validate checks what run would refuse later: backend options (without loading a model) and each
// sweep point's model; run refuses them before measuring anything.
TEST(Cli, ValidateChecksBackendOptionsAndEverySweepPointsModel) {
  TempDir dir;
  const std::string rest =
      "inputs: {prompts: [[1, 2]]}\ngeneration: {max_new_tokens: 2}\nrun: {warmup: 0, repeats: "
      "1}\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"model: {preset: gpt2-tiny}\nbackends: [{name: eager, options: {cahce: static}}]\n",
       "backends: 'eager': backend 'eager': unknown option 'cahce' (did you mean 'cache'?)"},
      {"model: {preset: gpt2-tiny}\nbackends: [{name: trace, label: t, options: {freeze: "
       "maybe}}]\n",
       "backends: 't': backend 'trace' option 'freeze': expected true or false, found 'maybe'"},
      {"model: {preset: gpt2-tiny}\nbackends: [{name: trace, options: {file: " +
           (dir / "none.pt").string() + "}}]\n",
       "none.pt' does not exist"},
      {"model: {preset: gpt2-tiny}\nbackends: [{name: cuda_graph, options: {buckets: '1,x', "
       "capture: false}}]\n",
       "option 'buckets': expected comma-separated positive row counts, found '1,x'"},
      {"model: {preset: gpt2-tiny}\nbackends: [cuda_graph]\n",
       "backend 'cuda_graph' needs the model on a CUDA device; set model.device: cuda (found cpu)"},
      {"model: {preset: gpt2-tiny}\nsweep: {model.preset: [gpt2-tiny, gpt2-nope]}\n",
       "sweep point [model.preset=gpt2-nope]: unknown model preset 'gpt2-nope'"},
      {"model: {path: " + dir.path().string() + "}\n",
       "model.path: model folder '" + dir.path().string() + "' has no config.json"},
      // What the model's configuration alone settles, without loading weights.
      {"model: {preset: gpt2-tiny}\nsweep: {generation.max_new_tokens: [2, 300]}\n",
       "sweep point [generation.max_new_tokens=300]: " + (dir / "c7.yaml").string() +
           ": the longest prompt (2 tokens) plus 300 new tokens exceeds the model's context of 256 "
           "positions"},
      {"model: {preset: gpt2-tiny, config: {n_head: 3}}\n",
       "n_embd 64 is not divisible by n_head 3"},
      {"model: {preset: gpt2-tiny, config: {n_layr: 3}}\n", "model.config: 'n_layr' is not a key"},
      {"model: {preset: gpt2-tiny, config: {vocab_size: 2}}\n",
       "id 2 is outside the vocabulary [0, 2)"},
      {"model: {preset: gpt2-tiny}\nbackends: [{name: trace, options: {cache_dir: " +
           (dir / "c0.yaml").string() + "}}]\n",
       "option 'cache_dir': '" + (dir / "c0.yaml").string() + "' is not a folder"},
      {"model: {preset: gpt2-tiny}\nbackends: [{name: cuda_graph, label: w, options: {capture: "
       "false}, loop: {whole_step: on}}]\n",
       "backends: 'w': loop.whole_step: on with capture: true needs model.device: cuda (found "
       "cpu)"},
  };
  int i = 0;
  for (const auto& [head, expected] : cases) {
    const auto file = dir / ("c" + std::to_string(i++) + ".yaml");
    write_file(file, head + rest);
    for (const std::string cmd : {"validate", "run"}) {
      ::testing::internal::CaptureStderr();
      EXPECT_EQ(cli({cmd, file.string()}), 1) << cmd << " " << expected;
      const std::string err = ::testing::internal::GetCapturedStderr();
      EXPECT_THAT(err, HasSubstr(expected)) << cmd;
      EXPECT_THAT(err, ::testing::Not(HasSubstr("preparing and warming up")))
          << cmd;  // refused before any run
    }
  }
}

// A token id outside the vocabulary names where it came from: the model folder's
// generation_config.json, or the experiment when the experiment set it.
TEST(Cli, ABadTokenIdNamesTheFileItCameFrom) {
  TempDir dir;
  const auto folder = dir / "model";
  std::filesystem::copy(std::filesystem::path(testing::fixtures_dir()) / "models" / "gpt2-a",
                        folder);
  write_file(folder / "generation_config.json", R"({"eos_token_id": 9999})");
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli({"generate", "--model", folder.string(), "--prompt", "1", "--quiet"}), 1);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr(folder.string() +
                        "/generation_config.json: 'eos_token_id': token id 9999 is outside"));
  write_file(folder / "generation_config.json", R"({"eos_token_id": 1})");
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli({"generate", "--model", folder.string(), "--prompt", "1", "--set",
                 "generation.pad_token_id=5000", "--quiet"}),
            1);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("gengraph generate (flags as YAML): generation: 'pad_token_id': token id "
                        "5000 is outside"));
  EXPECT_THAT(
      testing::error_of([&] {
        ResolvedSettings g;
        g.eos_token_id = {7};
        g.validate_for_vocab(5);
      }),
      HasSubstr("generation: 'eos_token_id': token id 7 is outside the model's vocabulary [0, 5)"));
}

// A trace cache_dir of "~/..." is the home folder's, as in a shell (YAML does not expand it).
TEST(Cli, TraceCacheDirExpandsTheHomeFolder) {
  TempDir dir;
  std::optional<testing::ScopedEnv> home;
  home.emplace("HOME", dir.path().string());
  write_file(
      dir / "e.yaml",
      "model: {preset: gpt2-tiny}\nbackends: [{name: trace, options: {cache_dir: ~/traces}}]\n"
      "inputs: {prompts: [[1, 2]]}\ngeneration: {max_new_tokens: 2}\nrun: {warmup: 0, repeats: "
      "1}\n");
  ::testing::internal::CaptureStdout();
  const int rc =
      cli({"run", (dir / "e.yaml").string(), "--output", (dir / "r.json").string(), "--quiet"});
  ::testing::internal::GetCapturedStdout();
  home.reset();
  ASSERT_EQ(rc, 0);
  int traces = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir / "traces"))
    traces += f.path().extension() == ".pt";
  EXPECT_EQ(traces, 1);
  EXPECT_FALSE(std::filesystem::exists("~"));
}

TEST(Cli, BadInputExitsNonZeroAndWritesNothing) {
  TempDir dir;
  write_file(dir / "e.yaml", "model: {preset: gpt2-tiny}\ninputs: {prompts: [[1, 99999]]}\n");
  const auto out = dir / "e.json";
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli({"run", (dir / "e.yaml").string(), "--output", out.string(), "--quiet"}), 1);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("id 99999 is outside the vocabulary"));
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_FALSE(std::filesystem::exists(out.string() + ".tmp"));
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli({"run", (dir / "e.yaml").string(), "--set", "backend=eagr", "--quiet"}), 1);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("unknown backend 'eagr'"));
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli({"frobnicate"}), 2);
  ::testing::internal::GetCapturedStderr();
}

TEST(Cli, GenerateAndListings) {
  TempDir dir;
  const auto out = dir / "g.json";
  ASSERT_EQ(cli({"generate", "--model", "gpt2-tiny", "--prompt", "1,2,3", "--max-new-tokens", "3",
                 "--output", out.string(), "--quiet"}),
            0);
  const auto doc = nlohmann::json::parse(testing::read_file(out));
  EXPECT_EQ(doc["runs"][0]["outputs"][0]["sequences"][0]["tokens"].size(), 3u);
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(cli({"backends"}), 0);
  const std::string listing = ::testing::internal::GetCapturedStdout();
  EXPECT_THAT(listing, HasSubstr("eager\tavailable"));
  EXPECT_THAT(listing, HasSubstr("model steps (cuda_graph's option step):\n  aoti\t"));
  EXPECT_THAT(listing, HasSubstr("\n  trace\ta TorchScript trace"));
}

TEST(Cli, ShippedConfigsAreValid) {
  int n = 0;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(GENGRAPH_SOURCE_DIR) + "/configs")) {
    if (e.path().extension() != ".yaml") continue;
    ::testing::internal::CaptureStdout();
    EXPECT_EQ(cli({"validate", e.path().string()}), 0) << e.path();
    EXPECT_THAT(::testing::internal::GetCapturedStdout(), ::testing::HasSubstr("valid"));
    ++n;
  }
  EXPECT_GE(n, 5);
}

TEST(Cli, GenerateStreamPrintsEachTokenAsChosenThenTheTable) {
  TempDir dir;
  const auto out = dir / "s.json";
  ::testing::internal::CaptureStdout();
  ASSERT_EQ(cli({"generate", "--model", "gpt2-tiny", "--prompt", "1,2,3", "--prompt", "4",
                 "--max-new-tokens", "5", "--stream", "--quiet", "--output", out.string()}),
            0);
  const std::string printed = ::testing::internal::GetCapturedStdout();
  const auto doc = nlohmann::json::parse(testing::read_file(out));
  // The streamed lines, rebuilt per input, are the tokens the results file holds.
  std::vector<std::vector<int64_t>> streamed(2);
  std::istringstream lines(printed);
  int64_t steps = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("step ", 0) != 0) continue;
    EXPECT_EQ(line.rfind("step " + std::to_string(steps++) + ":", 0), 0u) << line;
    std::istringstream items(line.substr(line.find(':') + 1));
    for (std::string input, token; items >> input >> token;)
      streamed.at(std::stoul(input.substr(1))).push_back(std::stoll(token));
  }
  EXPECT_EQ(steps, 5);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(streamed[i],
              doc["runs"][0]["outputs"][i]["sequences"][0]["tokens"].get<std::vector<int64_t>>());
  }
  EXPECT_THAT(printed, HasSubstr("generated tokens (eager)"));  // the table follows
  // Beam search cannot stream: an error naming the strategy, nothing written.
  const auto beams = dir / "b.json";
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli({"generate", "--model", "gpt2-tiny", "--prompt", "1,2", "--stream", "--set",
                 "generation.num_beams=2", "--quiet", "--output", beams.string()}),
            1);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("'beam_search' strategy chooses its sequences only when it finishes"));
  EXPECT_FALSE(std::filesystem::exists(beams));
  // --stream belongs to generate.
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli({"validate", "configs/quickstart.yaml", "--stream"}), 2);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("option --stream does not apply to this command"));
}

}  // namespace
}  // namespace gengraph

// Plug-ins (<gengraph/plugin.h>): the stock CLI runs the extension example's YAML with the example
// built as a plug-in, from --plugin or GENGRAPH_PLUGINS, passes it on to Slurm tasks, and refuses
// every unusable library naming the file and the reason.
#include <gengraph/plugin.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;
using testing::TempDir;

std::string plugin(const std::string& name) {
  return (fs::path(GENGRAPH_PLUGIN_DIR) / ("lib" + name + ".so")).string();
}

const std::string kExampleYaml = GENGRAPH_SOURCE_DIR "/tests/extension_example/example.yaml";

// The built CLI in a process of its own (a loaded plug-in stays loaded in this one): its exit
// status and its stderr. `env` goes before the command ("NAME=value ").
std::pair<int, std::string> stock_cli(const TempDir& dir, const std::string& args,
                                      const std::string& env = "") {
  const fs::path bin = testing::cli_binary();
  const std::string cmd = env + "'" + bin.string() + "' " + args + " > '" +
                          (dir / "stdout").string() + "' 2> '" + (dir / "stderr").string() + "'";
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, testing::read_file(dir / "stderr")};
}

// The example's two rows ran, the plug-in's backend with its decoding parts, and agree.
void expect_example_ran(const fs::path& results) {
  const auto doc = nlohmann::json::parse(testing::read_file(results));
  ASSERT_EQ(doc["runs"].size(), 2u);
  EXPECT_EQ(doc["runs"][1]["backend"], "recompute");
  EXPECT_EQ(doc["runs"][1]["tokens_match_first_row"], true);
  EXPECT_EQ(doc["generation"]["strategy"]["name"], "epsilon_greedy");
}

TEST(Plugins, TheStockCliRunsTheExampleWithItsPartsFromAPlugin) {
  if (testing::cli_binary().empty()) GTEST_SKIP() << "the gengraph binary is not built here";
  TempDir dir;
  const std::string out = (dir / "r.json").string();
  // Without the plug-in its names are unknown, and the error says how plug-ins are loaded.
  const auto [rc, err] =
      stock_cli(dir, "run '" + kExampleYaml + "' --quiet --output '" + out + "'");
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("unknown backend 'recompute'"));
  EXPECT_THAT(err, HasSubstr("gengraph --plugin LIB.so, GENGRAPH_PLUGINS"));
  EXPECT_FALSE(fs::exists(out));
  // --plugin anywhere on the line (twice: loaded once), and GENGRAPH_PLUGINS.
  const std::string lib = plugin("gengraph_example_plugin");
  for (const auto& [args, env] : std::vector<std::pair<std::string, std::string>>{
           {"--plugin '" + lib + "' run '" + kExampleYaml + "' --quiet --output '" + out + "'", ""},
           {"run '" + kExampleYaml + "' --plugin='" + lib + "' --quiet --output '" + out +
                "' --plugin '" + lib + "'",
            ""},
           {"run '" + kExampleYaml + "' --quiet --output '" + out + "'",
            "GENGRAPH_PLUGINS=':" + lib + "' "}}) {
    fs::remove(out);
    const auto [ok, why] = stock_cli(dir, args, env);
    ASSERT_EQ(ok, 0) << args << "\n" << why;
    expect_example_ran(out);
  }
}

TEST(Plugins, SlurmTasksLoadThePluginsTheSubmissionLoaded) {
  if (testing::cli_binary().empty()) GTEST_SKIP() << "the gengraph binary is not built here";
  TempDir dir;
  const fs::path bin = dir / "bin";
  fs::create_directories(bin);
  testing::write_file(bin / "sbatch", "#!/bin/sh\necho 11\n");
  fs::permissions(bin / "sbatch", fs::perms::owner_all);
  const std::string lib = plugin("gengraph_example_plugin");
  const auto job = dir / "job";
  const auto [rc, err] = stock_cli(
      dir, "--plugin '" + lib + "' submit '" + kExampleYaml + "' --job-dir '" + job.string() + "'",
      "PATH='" + bin.string() + ":/usr/bin:/bin' ");
  ASSERT_EQ(rc, 0) << err;
  EXPECT_THAT(testing::read_file(job / "job.sbatch"),
              HasSubstr("\" --plugin \"" + fs::canonical(lib).string() + "\" task \""));
}

TEST(Plugins, AnUnusableLibraryIsRefusedNamingItAndWhy) {
  TempDir dir;
  testing::write_file(dir / "notes.so", "not a library\n");
  const std::string missing = (dir / "missing.so").string(), text = (dir / "notes.so").string();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {missing, "plug-in '" + missing + "': no such file"},
      {dir.path().string(), "plug-in '" + dir.path().string() + "': not a file"},
      {text, "plug-in '" + text + "': cannot be loaded as a shared library: "},
      {plugin("gengraph_test_plugin_no_entry"),
       "': not a gengraph plug-in: it defines no gengraph_plugin_abi and gengraph_plugin_register"},
      {plugin("gengraph_test_plugin_old_abi"),
       "': built for gengraph plug-in ABI 0, but this gengraph has ABI " +
           std::to_string(GENGRAPH_PLUGIN_ABI) + ": rebuild it against this gengraph"},
      {plugin("gengraph_test_plugin_clash"),
       "': its registration failed: backend 'eager' is already registered"},
  };
  for (const auto& [path, expected] : cases) {
    const auto [rc, err] = testing::cli_stderr({"--plugin", path, "presets"});
    EXPECT_EQ(rc, 1) << path;
    EXPECT_THAT(err, HasSubstr(expected)) << path;
  }
  // The variable's entries are named as its own.
  {
    testing::ScopedEnv env("GENGRAPH_PLUGINS", missing);
    const auto [rc, err] = testing::cli_stderr({"presets"});
    EXPECT_EQ(rc, 1);
    EXPECT_THAT(err, HasSubstr("GENGRAPH_PLUGINS: plug-in '" + missing + "': no such file"));
  }
  // A --plugin without its path is a usage error.
  const auto [rc, err] = testing::cli_stderr({"presets", "--plugin"});
  EXPECT_EQ(rc, 2);
  EXPECT_THAT(err, HasSubstr("--plugin: expected the path of a plug-in library"));
  EXPECT_THAT(err, Not(HasSubstr("unknown option")));
}

}  // namespace
}  // namespace gengraph

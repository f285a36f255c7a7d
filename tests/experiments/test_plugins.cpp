// Plug-ins (<gengraph/plugin.h>): the stock CLI runs the extension example's YAML with the example
// built as a plug-in, from --plugin or GENGRAPH_PLUGINS, passes it on to Slurm tasks, and refuses
// every unusable library naming the file and the reason.
#include <gengraph/plugin.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
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
      {text, "plug-in '" + text +
                 "': not a shared library: expected an ELF file (one that begins with \\x7fELF), "
                 "found other bytes"},
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

// A copy of a built plug-in, changed by `edit`, in `dir`.
fs::path damaged_copy(const TempDir& dir, const std::string& name,
                      const std::function<void(std::string&)>& edit) {
  std::string bytes = testing::read_file(plugin("gengraph_test_plugin_no_entry"));
  edit(bytes);
  const fs::path out = dir / (name + ".so");
  testing::write_file(out, bytes);
  return out;
}

// Each of these crashed the process inside dlopen or at the first call (SIGBUS, SIGSEGV) or
// ended it through std::terminate (SIGABRT); now each is refused, exit 1, naming the file and why.
TEST(Plugins, DamagedForeignOrMisdeclaredLibrariesAreRefusedNotCrashedOn) {
  if (testing::cli_binary().empty()) GTEST_SKIP() << "the gengraph binary is not built here";
  TempDir dir;
  const auto set_u16 = [](std::string& b, size_t at, uint16_t v) {
    b[at] = static_cast<char>(v & 0xff);
    b[at + 1] = static_cast<char>(v >> 8);
  };
  const std::vector<std::pair<fs::path, std::string>> cases = {
      {damaged_copy(dir, "cut_1000", [](std::string& b) { b.resize(1000); }),
       "': the file is cut short or damaged: "},
      {damaged_copy(dir, "cut_half", [](std::string& b) { b.resize(b.size() / 2); }),
       "': the file is cut short or damaged: "},
      {damaged_copy(dir, "cut_header", [](std::string& b) { b.resize(40); }),
       "': the file is cut short: 40 bytes, fewer than an ELF header's 64"},
      {damaged_copy(dir, "arm", [&](std::string& b) { set_u16(b, 18, 183); }),
       "': built for AArch64, but this gengraph runs on x86-64"},
      {damaged_copy(dir, "elf32", [](std::string& b) { b[4] = 1; }),
       "': a 32-bit ELF file; this gengraph loads 64-bit x86-64 libraries"},
      {damaged_copy(dir, "object", [&](std::string& b) { set_u16(b, 16, 1); }),
       "': not a shared library: an ELF object file (.o); build it as a MODULE or SHARED library"},
      {damaged_copy(dir, "empty", [](std::string& b) { b.clear(); }),
       "': not a shared library: expected an ELF file (one that begins with \\x7fELF), found an "
       "empty file"},
      {plugin("gengraph_test_plugin_abi_variable"),
       "': gengraph_plugin_abi is a variable, expected the function GENGRAPH_PLUGIN defines"},
      {plugin("gengraph_test_plugin_throws_int"),
       "': its registration failed: it threw something that is not a std::exception"},
  };
  for (const auto& [path, expected] : cases) {
    const auto [rc, err] = stock_cli(dir, "--plugin '" + path.string() + "' presets");
    EXPECT_EQ(rc, 1) << path << "\n" << err;
    EXPECT_THAT(err, HasSubstr("plug-in '" + path.string() + expected)) << path;
    EXPECT_THAT(err, Not(HasSubstr("terminate called"))) << path;
  }
}

// `gengraph plugin check LIB.so` loads the library in a child gengraph: what a plug-in's own
// abort(), exit() or endless registration would do to a run, it does to the child, and the
// check says which.
TEST(Plugins, CheckTriesAPluginInAChildProcessAndSaysHowItEnded) {
  if (testing::cli_binary().empty()) GTEST_SKIP() << "the gengraph binary is not built here";
  TempDir dir;
  {
    const auto [rc, err] =
        stock_cli(dir, "plugin check '" + plugin("gengraph_example_plugin") + "'");
    ASSERT_EQ(rc, 0) << err;
    const std::string out = testing::read_file(dir / "stdout");
    EXPECT_THAT(out, HasSubstr("': loads in a child process; it registers"));
    EXPECT_THAT(out, HasSubstr("backends: recompute"));
    EXPECT_THAT(out, HasSubstr("search strategies: epsilon_greedy"));
  }
  const fs::path cut = damaged_copy(dir, "cut", [](std::string& b) { b.resize(b.size() / 2); });
  const std::vector<std::pair<std::string, std::string>> cases = {
      {plugin("gengraph_test_plugin_aborts"),
       "': crashed the process loading it: signal 6 (Aborted), from abort()"},
      {plugin("gengraph_test_plugin_exits"),
       "': ended the process loading it with exit status 0 (exit() in its own code)"},
      {plugin("gengraph_test_plugin_clash"),
       "': its registration failed: backend 'eager' is already registered"},
      {cut.string(), "': the file is cut short or damaged: "},
  };
  for (const auto& [path, expected] : cases) {
    const auto [rc, err] = stock_cli(dir, "plugin check '" + path + "'");
    EXPECT_EQ(rc, 1) << path << "\n" << err;
    EXPECT_THAT(err, HasSubstr("error: plug-in '" + path + expected)) << path;
  }
  // A registration that never returns: stopped at the limit (a bound, not a timing claim).
  const auto start = std::chrono::steady_clock::now();
  const auto [rc, err] =
      stock_cli(dir, "plugin check '" + plugin("gengraph_test_plugin_hangs") + "' --timeout 1");
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("': still loading after 1 s (its registration does not return)"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
  // Usage errors.
  for (const std::string& args :
       {std::string("plugin"), std::string("plugin run x.so"), std::string("plugin check"),
        std::string("plugin check x.so --timeout 0")}) {
    const auto [urc, uerr] = stock_cli(dir, args);
    EXPECT_EQ(urc, 2) << args << "\n" << uerr;
    EXPECT_THAT(uerr, HasSubstr("error: ")) << args;
  }
}

}  // namespace
}  // namespace gengraph

// Hostile and careless input, second pass (issue 25): one test per defect class
// (docs/reliability.md). Here: the Slurm job script. Values that reach job.sbatch (the
// experiment's name, cluster values and --slurm-option values, the job folder, the working folder)
// never add a line or a command to it. Job folders, reruns and tasks:
// test_hostile_slurm_jobs.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>

#include "experiments/cluster/slurm_job.h"
#include "tests/experiments/hostile_slurm_support.h"

namespace gengraph {
namespace {

using namespace hostile_slurm;  // NOLINT: this file's helpers

// Values a careless or hostile user could give, none with a control character.
const std::vector<std::string> kPrintableHostile = {
    "two words", "$(touch pwned)",     "`touch pwned`", "a\"b",
    "it's",      "back\\slash",        "#hash",         "x;touch pwned",
    "50%",       "--x=y 'q' \"r\" #s", "ünïcödé ✓",     "$HOME",
    "a\\\"b",    "'$(touch pwned)'"};

// Values that carry a control character: each must be refused.
const std::vector<std::string> kControl = {"a\nb",
                                           "a\rb",
                                           "a\tb",
                                           "a\x7f"
                                           "b",
                                           "a\xc2\x85"
                                           "b",
                                           "\n#SBATCH --wrap=touch pwned",
                                           std::string("a\0b", 3)};

TEST(HostileSlurm, TheBatchScriptWriterQuotesEveryValueAndRefusesControlCharacters) {
  TempDir dir;
  for (const auto& v : kPrintableHostile) {
    BatchScript s;
    s.comment("about " + v, "the experiment's name");
    s.option("job-name", "gengraph-" + v, "the experiment's name");
    s.option("comment", v, "--slurm-option comment");
    s.option("exclusive", "", "--slurm-option exclusive");
    s.exec({{"/opt/gen graph/" + v, "gengraph's path"}, {"task", ""}, {v, "the job folder"}});
    const std::string script = s.text();
    const std::string exec = checked_exec_line(script);
    const auto options = sbatch_reads(script);
    EXPECT_EQ(options.at("job-name"), "gengraph-" + v) << script;
    EXPECT_EQ(options.at("comment"), v) << script;
    EXPECT_EQ(options.at("exclusive"), "");
    EXPECT_EQ(bash_reads(exec, dir.path()),
              (std::vector<std::string>{"/opt/gen graph/" + v, "task", v}))
        << script;
    EXPECT_FALSE(fs::exists(dir / "pwned")) << script;
  }
  for (const auto& v : kControl) {
    BatchScript s;
    EXPECT_THAT(
        testing::error_of([&] { s.option("job-name", v, "the experiment's name"); }),
        AllOf(HasSubstr("the experiment's name: expected text without control "
                        "characters"),
              HasSubstr("#SBATCH --job-name line"), HasSubstr("(a control character at byte")))
        << v;
    EXPECT_THAT(testing::error_of([&] { s.comment(v, "name"); }), HasSubstr("name: expected"));
    EXPECT_THAT(testing::error_of([&] {
                  s.exec({{v, "job.json key 'cwd'"}});
                }),
                HasSubstr("job.json key 'cwd': expected text without control characters"));
  }
  BatchScript s;
  EXPECT_THAT(testing::error_of([&] { s.option("array\n#", "1", "--slurm-option"); }),
              HasSubstr("expected an sbatch long option's name"));
  EXPECT_THAT(testing::error_of([&] { s.text(); }), HasSubstr("without its command"));
}

// The same script as the real sbatch (Slurm's client; no controller needed) reads it: its
// verbose listing of the options it took from the script.
TEST(HostileSlurm, TheRealSbatchReadsBackEveryValue) {
  if (std::system("command -v sbatch > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "no sbatch on PATH (Debian: slurm-client): the stand-in model of its "
                    "parsing still runs in TheBatchScriptWriterQuotes...";
  TempDir dir;
  // A cluster that does not exist: sbatch lists the options it read, then fails to connect.
  write_file(dir / "slurm.conf",
             "ClusterName=h\nSlurmctldHost=localhost\nSlurmctldPort=1\nMessageTimeout=1\n"
             "TCPTimeout=1\nNodeName=localhost CPUs=1\nPartitionName=p Nodes=localhost\n");
  testing::ScopedEnv conf("SLURM_CONF", (dir / "slurm.conf").string());
  for (const auto& v : kPrintableHostile) {
    BatchScript s;
    s.option("job-name", "gengraph-" + v, "name");
    s.option("chdir", "/tmp/" + v, "cwd");
    s.option("comment", v, "comment");
    s.exec({{"/bin/true", "gengraph"}});
    write_file(dir / "job.sbatch", s.text());
    const std::string cmd = "cd '" + dir.path().string() +
                            "' && timeout 30 sbatch -vv --test-only job.sbatch > out.txt 2>&1";
    (void)std::system(cmd.c_str());  // fails: no controller
    const std::string out = testing::read_file(dir / "out.txt");
    std::map<std::string, std::string> listed;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) {
      const auto colon = line.find(" : ");
      if (line.rfind("sbatch: ", 0) != 0 || colon == std::string::npos) continue;
      std::string key = line.substr(8, colon - 8);
      while (!key.empty() && key.back() == ' ') key.pop_back();
      listed[key] = line.substr(colon + 3);
    }
    ASSERT_TRUE(listed.count("job-name")) << out;
    EXPECT_EQ(listed["job-name"], "gengraph-" + v) << out;
    EXPECT_EQ(listed["chdir"], "/tmp/" + v) << out;
    EXPECT_EQ(listed["comment"], v) << out;
  }
}

// submit: names, cluster values, --slurm-option values, job and working folders.
TEST(HostileSlurm, SubmittedValuesNeverAddALineToTheJobScript) {
  TempDir dir;
  StandInSbatch sbatch;
  int n = 0;
  // Names with control characters are refused naming the name; nothing is made or submitted.
  for (const std::string yaml_name : {"\"x\\n#SBATCH --wrap=touch pwned\\ntouch pwned\"",
                                      "\"x\\ry\"", "\"x\\ty\"", "\"x\\u007fy\"", "\"x\\u0085y\""}) {
    write_file(dir / "n.yaml", sweep_text() + "name: " + yaml_name + "\n");
    const auto job = dir / ("refused" + std::to_string(n++));
    auto [rc, err] =
        testing::cli_stderr({"submit", (dir / "n.yaml").string(), "--job-dir", job.string()});
    EXPECT_EQ(rc, 1) << yaml_name;
    EXPECT_THAT(err, HasSubstr("the experiment's name: expected text without control characters"))
        << err;
    EXPECT_FALSE(fs::exists(job));
  }
  // A control character in a cluster value or a --slurm-option value.
  write_file(dir / "s.yaml", sweep_text());
  auto [rc, err] = testing::cli_stderr({"submit", (dir / "s.yaml").string(), "--set",
                                        "cluster.partition=\"gpu\\n#SBATCH --wrap=x\"", "--job-dir",
                                        (dir / "c1").string()});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("cluster.partition"));
  std::tie(rc, err) = testing::cli_stderr({"submit", (dir / "s.yaml").string(), "--slurm-option",
                                           "comment=a\n#SBATCH --wrap=touch pwned", "--job-dir",
                                           (dir / "c2").string()});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("--slurm-option comment: expected text without control characters "
                             "for its #SBATCH --comment line"));
  EXPECT_THAT(err, HasSubstr("found \"a\\n#SBATCH --wrap=touch pwned\""));
  EXPECT_FALSE(fs::exists(dir / "c2"));
  EXPECT_FALSE(sbatch.called());

  // Printable hostile values are written so that sbatch and bash read them back unchanged.
  const auto cwd = fs::current_path();
  for (const auto& v : kPrintableHostile) {
    if (v.find('/') != std::string::npos) continue;  // one folder name
    SCOPED_TRACE(v);
    const fs::path work = dir / ("w " + v);  // the working folder: job.json's cwd
    fs::create_directories(work);
    Json name = v;
    write_file(work / "s.yaml", sweep_text() + "name: " + name.dump() + "\n");
    // (a backslash in the job folder is refused: below)
    const fs::path job = v.find('\\') == std::string::npos ? work / ("job " + v)
                                                           : dir / ("job" + std::to_string(n++));
    fs::current_path(work);
    const std::string physical_cwd = fs::current_path().string();
    std::tie(rc, err) = testing::cli_stderr(
        {"submit", "s.yaml", "--slurm-option", "comment=" + v, "--job-dir", job.string()});
    fs::current_path(cwd);
    ASSERT_EQ(rc, 0) << err;
    const std::string script = testing::read_file(job / "job.sbatch");
    const auto options = sbatch_reads(script);
    EXPECT_EQ(options.at("job-name"), "gengraph-" + v);
    EXPECT_EQ(options.at("comment"), v);
    EXPECT_EQ(options.at("chdir"), physical_cwd);
    EXPECT_EQ(options.at("partition"), "debug");
    std::string logs;  // Slurm's file name pattern: '%' doubled
    for (const char ch : (job / "logs").string()) logs += ch == '%' ? "%%" : std::string(1, ch);
    EXPECT_EQ(options.at("output"), logs + "/%a.out");
    const auto words = bash_reads(checked_exec_line(script), dir.path());
    ASSERT_EQ(words.size(), 3u);
    EXPECT_EQ(words[1], "task");
    EXPECT_EQ(words[2], job.string());
    EXPECT_FALSE(fs::exists(dir / "pwned"));
    EXPECT_FALSE(fs::exists(work / "pwned"));
    // The folder is one a task can run: its manifest passes the check.
    EXPECT_NO_THROW(check_job_manifest(Json::parse(testing::read_file(job / "job.json")),
                                       (job / "job.json").string()));
  }
  // A backslash in the job folder would turn off %a in the log names: refused, naming it.
  std::tie(rc, err) = testing::cli_stderr(
      {"submit", (dir / "s.yaml").string(), "--job-dir", (dir / "back\\slash").string()});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("the job folder (--job-dir, else results/NAME.slurm): expected a "
                             "folder without a backslash"));
  EXPECT_FALSE(fs::exists(dir / "back\\slash"));
  // A working folder whose name is not UTF-8 (Latin-1): JSON cannot record it; named.
  const fs::path latin1 = dir / "caf\xe9";
  fs::create_directories(latin1);
  fs::current_path(latin1);
  std::tie(rc, err) = testing::cli_stderr(
      {"submit", (dir / "s.yaml").string(), "--job-dir", (dir / "latin1").string()});
  fs::current_path(cwd);
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("its key 'cwd' holds text that is not UTF-8")) << err;
  EXPECT_FALSE(fs::exists(dir / "latin1"));
}

}  // namespace
}  // namespace gengraph

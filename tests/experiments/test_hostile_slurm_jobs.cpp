// Hostile and careless input, second pass (issue 25): one test per defect class
// (docs/reliability.md). Here: Slurm job folders. On a rerun, job.json's cwd, experiment and
// gengraph never add a line or a command to job.sbatch; an edited job.json or part file is
// refused naming the file and the key; out-of-range task numbers are named. The job script
// itself: test_hostile_slurm.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>

#include "experiments/cluster/slurm_job.h"
#include "experiments/experiment/experiment_config.h"
#include "tests/experiments/hostile_slurm_support.h"

namespace gengraph {
namespace {

using namespace hostile_slurm;  // NOLINT: this file's helpers

// A job folder submitted with the stand-in sbatch, for editing its job.json.
struct SubmittedJob {
  TempDir dir;
  StandInSbatch sbatch;
  fs::path job;
  Json manifest;
  SubmittedJob() : job(dir / "job") {
    write_file(dir / "s.yaml", sweep_text());
    EXPECT_EQ(
        testing::cli_stderr({"submit", (dir / "s.yaml").string(), "--job-dir", job.string()}).first,
        0);
    manifest = Json::parse(testing::read_file(job / "job.json"));
  }
  void write_manifest(const Json& m) { write_file(job / "job.json", m.dump(1)); }
};

TEST(HostileSlurm, AnEditedJobJsonIsRefusedNamingTheKey) {
  SubmittedJob s;
  const Json good = s.manifest;
  ASSERT_EQ(good["points"].size(), 4u);
  struct Edit {
    std::string key;  // what the message must name
    std::function<void(Json&)> apply;
  };
  Json million = Json::array();
  for (int i = 0; i < 1000000; ++i) million.push_back(Json::array());
  const std::vector<Edit> edits = {
      {"key 'cwd'", [](Json& m) { m["cwd"] = "/tmp\n#SBATCH --wrap=touch pwned"; }},
      {"key 'cwd'", [](Json& m) { m["cwd"] = "relative/folder"; }},
      {"key 'cwd'", [](Json& m) { m["cwd"] = 7; }},
      {"key 'gengraph'", [](Json& m) { m["gengraph"] = "/bin/gg\"; touch pwned; \"\r"; }},
      {"key 'gengraph'", [](Json& m) { m["gengraph"] = Json::array({"/bin/sh"}); }},
      {"key 'experiment'", [](Json& m) { m["experiment"] = "other\n#SBATCH --wrap=x"; }},
      {"key 'experiment'", [](Json& m) { m.erase("experiment"); }},
      {"key 'points[0]'", [](Json& m) { std::swap(m["points"][0], m["points"][1]); }},
      {"key 'points[2]'",
       [](Json& m) { m["points"][2][0] = "generation.num_beams=8"; }},  // a point it lacks
      {"key 'points'", [](Json& m) { m["points"].push_back(m["points"][0]); }},
      {"key 'points'", [&](Json& m) { m["points"] = million; }},
      {"key 'points[1][0]'", [](Json& m) { m["points"][1][0] = 5; }},
      {"key 'points[3]'", [](Json& m) { m["points"][3] = "generation.num_beams=1"; }},
      {"key 'overrides'", [](Json& m) { m["overrides"] = "generation.num_beams=1"; }},
      {"key 'overrides[0]'", [](Json& m) { m["overrides"] = Json::array({1}); }},
      {"key 'config_text'", [](Json& m) { m["config_text"] = 7; }},
      {"key 'config_text'", [](Json& m) { m["config_text"] = "model: [unclosed"; }},
      {"key 'id'", [](Json& m) { m.erase("id"); }},
      {"key 'id'", [](Json& m) { m["id"] = "../../x"; }},
      {"key 'schema'", [](Json& m) { m["schema"] = "gengraph-slurm-job-9"; }},
      {"key 'created'", [](Json& m) { m["created"] = nullptr; }},
      {"key 'jobs[0].job_id'", [](Json& m) { m["jobs"][0]["job_id"] = 4242; }},
      {"key 'jobs[0].job_id'", [](Json& m) { m["jobs"][0]["job_id"] = "42; touch pwned"; }},
      {"key 'jobs[0].tasks[1]'",
       [](Json& m) {
         m["jobs"][0]["tasks"] = {0, 99};
       }},
      {"key 'jobs[0].tasks[1]'",
       [](Json& m) {
         m["jobs"][0]["tasks"] = {2, 1};
       }},
      {"key 'jobs[0].tasks[0]'",
       [](Json& m) { m["jobs"][0]["tasks"] = Json::parse("[99999999999999999999]"); }},
      {"key 'jobs[0].tasks'", [](Json& m) { m["jobs"][0]["tasks"] = Json::object(); }},
      {"key 'jobs[0]'", [](Json& m) { m["jobs"][0] = "4242"; }},
      {"unknown key 'jobs[0].script'", [](Json& m) { m["jobs"][0]["script"] = "x"; }},
      {"unknown key 'evil'", [](Json& m) { m["evil"] = true; }},
      {"expected a gengraph job manifest", [](Json& m) { m = Json::array({m}); }},
  };
  for (const auto& e : edits) {
    Json m = good;
    e.apply(m);
    s.write_manifest(m);
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"submit", "--rerun", s.job.string()},
          std::vector<std::string>{"task", s.job.string(), "0"},
          std::vector<std::string>{"collect", s.job.string()}}) {
      auto [rc, err] = testing::cli_stderr(args);
      EXPECT_EQ(rc, 1) << args[0] << " " << e.key;
      // "'<file>': key '<path>': expected <what>, found <what is there>" (or "unknown key").
      EXPECT_THAT(err, HasSubstr("'" + (s.job / "job.json").string() + "': " + e.key))
          << args[0] << ": " << err;
      if (e.key.rfind("key '", 0) == 0) {
        EXPECT_THAT(err, AllOf(HasSubstr(e.key + ": expected "), HasSubstr(", found ")))
            << args[0] << ": " << err;
      }
      EXPECT_THAT(err, Not(HasSubstr("json.exception"))) << err;
    }
    EXPECT_FALSE(fs::exists(s.job / "parts" / "0.json")) << e.key;
    EXPECT_FALSE(fs::exists(s.job / "parts" / "0.error.json")) << e.key;
  }
  EXPECT_FALSE(fs::exists(s.dir / "pwned"));
  EXPECT_EQ(testing::read_file(s.sbatch.bin / "calls"),
            (s.job / "job.sbatch").string() + "\n");  // the first submission only
  // The same checks without the CLI, as a fuzz target calls them: no side effects.
  EXPECT_NO_THROW(check_job_manifest(good, "job.json"));
  Json swapped = good;
  std::swap(swapped["points"][1], swapped["points"][3]);
  EXPECT_THAT(testing::error_of([&] { check_job_manifest(swapped, "job.json"); }),
              HasSubstr("'job.json': key 'points[1]': expected [generation.num_beams=1, "
                        "generation.max_new_tokens=5] (point 1 of the sweep of config_text), "
                        "found [generation.num_beams=2, generation.max_new_tokens=5]"));
  for (const Json& odd : {Json(), Json(7), Json("x"), Json::object(), Json::array()})
    EXPECT_THAT(testing::error_of([&] { check_job_manifest(odd, "j.json"); }), HasSubstr("j.json"));
}

// A rerun writes job.json's own cwd, experiment and gengraph through the writer too: a gengraph
// path with quotes and '$(...)' is one word; one that is not an executable file is refused.
TEST(HostileSlurm, ARerunQuotesJobJsonPaths) {
  SubmittedJob s;
  Json m = s.manifest;
  const fs::path odd = s.dir / "gen \"graph\" $(touch pwned) 'x'";
  write_file(odd, "#!/bin/sh\n");
  fs::permissions(odd, fs::perms::owner_all);
  m["gengraph"] = odd.string();
  m["cwd"] = (s.dir / "it's a \"folder\"").string();
  fs::create_directories(m["cwd"].get<std::string>());
  s.write_manifest(m);
  // Another binary than this one runs only when named on the command line (below, the rerun of
  // an edited job.json alone).
  auto [rc, err] =
      testing::cli_stderr({"submit", "--rerun", s.job.string(), "--gengraph", odd.string()});
  ASSERT_EQ(rc, 0) << err;
  const std::string script = testing::read_file(s.job / "job.sbatch");
  EXPECT_EQ(sbatch_reads(script).at("chdir"), m["cwd"].get<std::string>());
  EXPECT_EQ(sbatch_reads(script).at("array"), "0,1,2,3");
  EXPECT_EQ(bash_reads(checked_exec_line(script), s.dir.path()),
            (std::vector<std::string>{odd.string(), "task", s.job.string()}));
  EXPECT_FALSE(fs::exists(s.dir / "pwned"));
  m = Json::parse(testing::read_file(s.job / "job.json"));
  EXPECT_EQ(m["jobs"].size(), 2u);
  EXPECT_EQ(m["gengraph"], odd.string());  // what the tasks now run
  m["gengraph"] = (s.dir / "nothing here").string();
  s.write_manifest(m);
  std::tie(rc, err) = testing::cli_stderr({"submit", "--rerun", s.job.string()});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err,
              HasSubstr("job.json': key 'gengraph': expected the path of the gengraph binary"));
}

// Third pass (issue 49): a rerun took job.json's `gengraph` as it was (`/bin/echo` was submitted
// as what every task runs) and a `cwd` that does not exist. The tasks run job.json's gengraph only
// when it is this very binary (the same file: a link to it counts), another only when named with
// --gengraph; the cwd must be an existing folder. Errors name job.json, the key, what was
// expected and what was found; nothing is submitted.
TEST(HostileSlurm, ARerunRunsThisGengraphOrOneNamedInAFolderThatExists) {
  SubmittedJob s;
  const Json good = s.manifest;
  std::string self = fs::read_symlink("/proc/self/exe").string();
  if (self.size() > 10 && self.substr(self.size() - 10) == " (deleted)")  // rebuilt meanwhile
    self.resize(self.size() - 10);
  ASSERT_EQ(good["gengraph"], self);
  const std::string file = "'" + (s.job / "job.json").string() + "': ";
  write_file(s.dir / "a file", "x");
  write_file(s.dir / "not executable", "#!/bin/sh\n");
  fs::create_directories(s.dir / "a folder");
  struct Edit {
    std::string key;
    Json value;
    std::string found;  // the end of the message
  };
  const std::vector<Edit> edits = {
      {"gengraph", "/bin/echo", "found \"/bin/echo\", another file"},
      {"gengraph", "/bin/sh", "found \"/bin/sh\", another file"},
      {"gengraph", (s.dir / "gone").string(), "\", which does not exist here"},
      {"gengraph", (s.dir / "a folder").string(), "\", which is not a file"},
      {"gengraph", (s.dir / "not executable").string(), "\", which is not executable here"},
      {"cwd", (s.dir / "gone").string(), "\", which does not exist here"},
      {"cwd", (s.dir / "a file").string(), "\", which is not a folder"},
  };
  for (const auto& e : edits) {
    Json m = good;
    m[e.key] = e.value;
    s.write_manifest(m);
    auto [rc, err] = testing::cli_stderr({"submit", "--rerun", s.job.string()});
    EXPECT_EQ(rc, 1) << e.value;
    EXPECT_THAT(err, HasSubstr(file + "key '" + e.key + "': expected ")) << err;
    EXPECT_THAT(err, HasSubstr(e.found)) << err;
    if (e.key == "gengraph") {
      EXPECT_THAT(err, HasSubstr("this one (\"" + self + "\")")) << err;
      EXPECT_THAT(err, HasSubstr("gengraph submit --rerun DIR --gengraph PATH")) << err;
    } else {
      EXPECT_THAT(err, HasSubstr("expected the folder the tasks run in (an existing folder)"));
    }
    // The job folder is as it was: nothing submitted, job.json not rewritten.
    EXPECT_EQ(Json::parse(testing::read_file(s.job / "job.json")), m);
  }
  EXPECT_EQ(testing::read_file(s.sbatch.bin / "calls"), (s.job / "job.sbatch").string() + "\n");

  // --gengraph names the binary: it must be an executable file, named by the option.
  for (const auto& bad : {s.dir / "gone", s.dir / "a folder", s.dir / "not executable"}) {
    s.write_manifest(good);
    auto [rc, err] =
        testing::cli_stderr({"submit", "--rerun", s.job.string(), "--gengraph", bad.string()});
    EXPECT_EQ(rc, 1);
    EXPECT_THAT(err, HasSubstr("--gengraph \"" + bad.string() +
                               "\": expected the path of the gengraph binary the tasks run"))
        << err;
  }
  EXPECT_EQ(testing::read_file(s.sbatch.bin / "calls"), (s.job / "job.sbatch").string() + "\n");

  // This binary through a link: the same file, accepted, and the link is what job.json keeps.
  fs::create_symlink(self, s.dir / "gengraph-link");
  Json m = good;
  m["gengraph"] = (s.dir / "gengraph-link").string();
  s.write_manifest(m);
  auto [rc, err] = testing::cli_stderr({"submit", "--rerun", s.job.string()});
  ASSERT_EQ(rc, 0) << err;
  EXPECT_EQ(
      bash_reads(checked_exec_line(testing::read_file(s.job / "job.sbatch")), s.dir.path()).front(),
      (s.dir / "gengraph-link").string());
  // Another binary named on the command line (a relative path, made absolute) runs, and job.json
  // records it.
  const fs::path cwd = fs::current_path();
  fs::current_path(s.dir.path());
  std::tie(rc, err) =
      testing::cli_stderr({"submit", "--rerun", s.job.string(), "--gengraph", "./gengraph-link"});
  fs::current_path(cwd);
  ASSERT_EQ(rc, 0) << err;
  m = Json::parse(testing::read_file(s.job / "job.json"));
  EXPECT_EQ(m["gengraph"], (s.dir / "gengraph-link").string());
  EXPECT_EQ(m["jobs"].size(), 3u);
  // The first submission may name its binary too; --gengraph is refused where it does not apply.
  std::tie(rc, err) = testing::cli_stderr({"submit", (s.dir / "s.yaml").string(), "--job-dir",
                                           (s.dir / "job2").string(), "--gengraph", "/bin/sh"});
  ASSERT_EQ(rc, 0) << err;
  EXPECT_EQ(Json::parse(testing::read_file(s.dir / "job2" / "job.json"))["gengraph"], "/bin/sh");
  EXPECT_EQ(
      bash_reads(checked_exec_line(testing::read_file(s.dir / "job2" / "job.sbatch")), s.dir.path())
          .front(),
      "/bin/sh");
  std::tie(rc, err) = testing::cli_stderr({"collect", s.job.string(), "--gengraph", "/bin/sh"});
  EXPECT_EQ(rc, 2);
  EXPECT_THAT(err, HasSubstr("option --gengraph does not apply to this command"));
}

// Third pass (issue 49): a task whose part could never be written ran its whole point first. Its
// part's folder is checked before the point runs. (The folder refuses writes as a read-only tmpfs
// under root, without write permission otherwise.)
TEST(HostileSlurm, ATaskWhosePartCannotBeWrittenFailsBeforeItsPoint) {
  SubmittedJob s;
  const fs::path parts = s.job / "parts";
  if (::geteuid() == 0) {
    if (::mount("tmpfs", parts.c_str(), "tmpfs", MS_RDONLY, "size=64k") != 0)
      GTEST_SKIP() << "cannot mount a read-only tmpfs here: " << std::strerror(errno);
  } else {
    fs::permissions(parts, fs::perms::owner_read | fs::perms::owner_exec);
  }
  struct Restore {
    fs::path p;
    ~Restore() {
      if (::geteuid() == 0) ::umount(p.c_str());
      std::error_code ignored;
      fs::permissions(p, fs::perms::owner_all, ignored);
    }
  } restore{parts};
  auto [rc, err] = testing::cli_stderr({"task", s.job.string(), "0"});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(
      err, HasSubstr("the result part '" + (parts / "0.json").string() +
                     "' cannot be written: the folder '" + parts.string() + "' refuses writes ("))
      << err;
  EXPECT_THAT(err, Not(HasSubstr("gengraph task: point 0")));  // the point never ran
}

TEST(HostileSlurm, OutOfRangeTaskNumbersAndForeignPartsAreNamed) {
  SubmittedJob s;
  for (const std::string id : {"99999999999999999999", "-1", "1e3", "0x1", " 1", "007"}) {
    testing::ScopedEnv task_id("SLURM_ARRAY_TASK_ID", id);
    auto [rc, err] = testing::cli_stderr({"task", s.job.string()});
    EXPECT_EQ(rc, 1) << id;
    EXPECT_THAT(err, HasSubstr("SLURM_ARRAY_TASK_ID: expected a point number of " + s.job.string() +
                               " (0 to 3), found \"" + id + "\""))
        << err;
    EXPECT_THAT(err, Not(HasSubstr("stoll")));
  }
  {
    testing::ScopedEnv task_id("SLURM_ARRAY_TASK_ID", "4");
    auto [rc, err] = testing::cli_stderr({"task", s.job.string()});
    EXPECT_EQ(rc, 1);
    EXPECT_THAT(err, HasSubstr("point 4 is not in"));
  }
  const Json header = {{"schema", "gengraph-slurm-part-1"}, {"job", s.manifest["id"]}};
  struct Part {
    std::string name;
    Json doc;
    std::string message;
  };
  const std::vector<Part> parts = {
      {"99999999999999999999.json", header,
       "expected INDEX.json or INDEX.error.json with INDEX a "
       "point number (0 to 3), found "
       "\"99999999999999999999.json\""},
      {"007.json", header, "found \"007.json\""},
      {"4.json", header, "found \"4.json\""},
      {"1.json.bak", header, "found \"1.json.bak\""},
      {"1.json", Json::array(),
       "1.json': expected a JSON object (a part of gengraph task), found an array of 0 entries"},
      {"1.json",
       {{"schema", "gengraph-slurm-part-1"}, {"job", s.manifest["id"]}, {"index", "1"}},
       "1.json': key 'index': expected an integer from 0 to 100000, found the string \"1\""},
      {"1.json",
       {{"schema", "gengraph-slurm-part-1"}, {"job", s.manifest["id"]}, {"index", 1}},
       "1.json': key 'result': expected the point's results (an object), found nothing (the key "
       "is missing)"},
      {"1.json",
       {{"schema", "gengraph-slurm-part-1"},
        {"job", s.manifest["id"]},
        {"index", 1},
        {"result", Json::array()}},
       "1.json': key 'result': expected the point's results (an object), found an array of 0 "
       "entries"},
      // A result that is not one point's results document: read whole before anything is merged.
      {"1.json",
       {{"schema", "gengraph-slurm-part-1"},
        {"job", s.manifest["id"]},
        {"index", 1},
        {"result", Json::object()}},
       "1.json': key 'result.experiment': expected a string, found nothing (the key is missing)"},
      {"1.json",
       {{"schema", "gengraph-slurm-part-1"},
        {"job", s.manifest["id"]},
        {"index", 1},
        {"result", {{"experiment", "e"}, {"points", Json::array()}}}},
       "1.json': key 'result.points': expected no 'points' (a part holds one point), found an "
       "array of 0 entries"},
      {"1.error.json",
       {{"schema", "gengraph-slurm-part-1"}, {"job", s.manifest["id"]}, {"index", 1}, {"error", 5}},
       "1.error.json': key 'error': expected the point's error message, found 5"},
      {"1.json",
       {{"schema", 1}},
       "1.json': key 'schema': expected \"gengraph-slurm-part-1\", found 1"},
  };
  for (const auto& p : parts) {
    write_file(s.job / "parts" / p.name, p.doc.dump());
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"collect", s.job.string()},
          std::vector<std::string>{"submit", "--rerun", s.job.string()}}) {
      auto [rc, err] = testing::cli_stderr(args);
      EXPECT_EQ(rc, 1) << p.name;
      EXPECT_THAT(err, HasSubstr(p.message)) << err;
      EXPECT_THAT(err, Not(HasSubstr("json.exception")));
      EXPECT_THAT(err, Not(HasSubstr("stoll")));
    }
    fs::remove(s.job / "parts" / p.name);
  }
}

// Sweeps larger than one job holds are refused before each point is parsed; the points a
// manifest must list are the ones expand_sweep gives, in its order.
TEST(HostileSlurm, SweepsBeyondAJobAreRefusedAndPointsFollowExpandSweep) {
  TempDir dir;
  StandInSbatch sbatch;
  std::string values;
  for (int i = 1; i <= 100; ++i) values += (i > 1 ? ", " : "") + std::to_string(i);
  write_file(dir / "big.yaml", sweep_text() + "name: big\n");
  auto [rc, err] = testing::cli_stderr({"submit", (dir / "big.yaml").string(), "--set",
                                        "sweep={generation.max_new_tokens: [" + values +
                                            "], generation.top_k: [" + values +
                                            "], generation.num_beams: [" + values + "]}",
                                        "--job-dir", (dir / "big").string()});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("sweep: expands to more than 100000 points"));
  EXPECT_FALSE(sbatch.called());

  const ExperimentConfig c = parse_experiment(
      sweep_text() + "name: order\n", "order.yaml",
      {"sweep={generation.num_beams: [1, 2, 3], generation.max_new_tokens: [2, 5], "
       "generation.do_sample: [false]}"});
  const auto expanded = expand_sweep(c);
  ASSERT_EQ(expanded.size(), 6u);
  Json m = {{"schema", "gengraph-slurm-job-1"},
            {"id", "abc123"},
            {"experiment", "order"},
            {"config_file", "order.yaml"},
            {"config_text", c.source_text},
            {"overrides", c.overrides},
            {"cwd", "/tmp"},
            {"gengraph", "/usr/bin/gengraph"},
            {"created", "now"},
            {"points", Json::array()},
            {"jobs", Json::array()}};
  for (const auto& [point, pc] : expanded) m["points"].push_back(point);
  EXPECT_NO_THROW(check_job_manifest(m, "order.json"));
  std::swap(m["points"][4], m["points"][5]);
  EXPECT_THAT(testing::error_of([&] { check_job_manifest(m, "order.json"); }),
              HasSubstr("'order.json': key 'points[4]': expected ["));
}

}  // namespace
}  // namespace gengraph

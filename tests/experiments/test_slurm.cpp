// gengraph submit / task / collect against stand-in sbatch programs: the job folder, the script,
// the merge (equal to a local run of the same file) and every bad case. The real one-node cluster
// runs the same flow in the CTest slurm_sweep (scripts/check_slurm.sh).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using namespace testing::cli_names;  // NOLINT(build/namespaces)
namespace fs = std::filesystem;

// The sweep the real-cluster check submits too: 4 points, 2 rows each.
std::string sweep_text() {
  return testing::read_file(std::string(GENGRAPH_SOURCE_DIR) + "/configs/slurm_sweep_tiny.yaml");
}

// A folder on PATH with an `sbatch` that prints `out` and exits `rc` (and records its argument).
struct FakeSbatch {
  TempDir bin;
  testing::ScopedEnv path;
  FakeSbatch(const std::string& body) : path("PATH", (bin.path()).string() + ":/usr/bin:/bin") {
    write_file(bin / "sbatch", "#!/bin/sh\necho \"$2\" >> \"$(dirname \"$0\")/calls\"\n" + body);
    fs::permissions(bin / "sbatch", fs::perms::owner_all);
  }
};

std::vector<std::vector<int64_t>> tokens_of(const nlohmann::json& point) {
  std::vector<std::vector<int64_t>> t;
  for (const auto& in : point["runs"][0]["outputs"])
    t.push_back(in["sequences"][0]["tokens"].get<std::vector<int64_t>>());
  return t;
}

TEST(Slurm, SubmitWritesTheJobAndCollectMergesAsALocalRunWould) {
  TempDir dir;
  write_file(dir / "s.yaml", sweep_text());
  FakeSbatch sbatch("echo 4242\n");
  const auto job = dir / "job";
  ASSERT_EQ(testing::cli_stderr({"submit", (dir / "s.yaml").string(), "--job-dir", job.string(),
                                 "--set", "cluster.options={qos: normal}", "--slurm-option",
                                 "partition=gpu", "--slurm-option", "exclusive"})
                .first,
            0);
  const auto script = testing::read_file(job / "job.sbatch");
  EXPECT_THAT(script, HasSubstr("#SBATCH --array=0,1,2,3\n"));
  EXPECT_THAT(script, HasSubstr("#SBATCH --partition=gpu\n"));  // the command line wins
  EXPECT_THAT(script, HasSubstr("#SBATCH --time=00:10:00\n"));
  EXPECT_THAT(script, HasSubstr("#SBATCH --cpus-per-task=1\n"));
  EXPECT_THAT(script, HasSubstr("#SBATCH --qos=normal\n"));
  EXPECT_THAT(script, HasSubstr("#SBATCH --exclusive\n"));
  EXPECT_THAT(script, HasSubstr("\" task \"" + job.string() + "\""));
  const auto manifest = nlohmann::json::parse(testing::read_file(job / "job.json"));
  EXPECT_EQ(manifest["jobs"][0]["job_id"], "4242");
  ASSERT_EQ(manifest["points"].size(), 4u);
  // The array's work, done here: each task runs its point.
  for (int i = 0; i < 4; ++i)
    ASSERT_EQ(testing::cli_stderr({"task", job.string(), std::to_string(i)}).first, 0);
  ASSERT_EQ(
      testing::cli_stderr({"collect", job.string(), "--output", (dir / "merged.json").string()})
          .first,
      0);
  // The same file and overrides, run here.
  ASSERT_EQ(testing::cli_stderr({"run", (dir / "s.yaml").string(), "--set",
                                 "cluster.options={qos: normal}", "--output",
                                 (dir / "local.json").string(), "--quiet"})
                .first,
            0);
  const auto merged = nlohmann::json::parse(testing::read_file(dir / "merged.json"));
  const auto local = nlohmann::json::parse(testing::read_file(dir / "local.json"));
  for (const auto& [key, value] : local.items()) {
    EXPECT_TRUE(merged.contains(key)) << key;
    if (key != "created" && key != "points") {
      EXPECT_EQ(merged[key], value) << key;
    }
  }
  EXPECT_EQ(merged.size(), local.size());
  ASSERT_EQ(merged["points"].size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(merged["points"][i]["point"], local["points"][i]["point"]);
    EXPECT_EQ(tokens_of(merged["points"][i]), tokens_of(local["points"][i])) << i;
    EXPECT_EQ(merged["points"][i]["generation"], local["points"][i]["generation"]);
  }
  // Collect by job id, from the folder that holds the job folders.
  const auto cwd = fs::current_path();
  fs::create_directories(dir / "results");
  fs::rename(job, dir / "results" / "job");
  fs::current_path(dir.path());
  const auto by_id =
      testing::cli_stderr({"collect", "4242", "--output", (dir / "again.json").string()});
  fs::current_path(cwd);
  EXPECT_EQ(by_id.first, 0) << by_id.second;
}

TEST(Slurm, PartialArraysExitThreeNamingThePointsAndRerunSubmitsOnlyThose) {
  TempDir dir;
  write_file(dir / "s.yaml", sweep_text());
  FakeSbatch sbatch("echo 77\n");
  const auto job = dir / "job";
  ASSERT_EQ(
      testing::cli_stderr({"submit", (dir / "s.yaml").string(), "--job-dir", job.string()}).first,
      0);
  ASSERT_EQ(testing::cli_stderr({"task", job.string(), "0"}).first, 0);
  ASSERT_EQ(testing::cli_stderr({"task", job.string(), "3"}).first, 0);
  auto [rc, err] =
      testing::cli_stderr({"collect", job.string(), "--output", (dir / "m.json").string()});
  EXPECT_EQ(rc, 3);
  EXPECT_THAT(err, HasSubstr("point 1 [generation.num_beams=1, generation.max_new_tokens=5]: no "
                             "result (still queued or running, or it never ran"));
  EXPECT_THAT(err, HasSubstr("2 of 4 point(s) have no result; rerun them with: gengraph submit "
                             "--rerun"));
  const auto merged = nlohmann::json::parse(testing::read_file(dir / "m.json"));
  EXPECT_EQ(merged["points"].size(), 2u);
  EXPECT_EQ(merged["missing_points"].size(), 2u);
  ASSERT_EQ(testing::cli_stderr({"submit", "--rerun", job.string()}).first, 0);
  EXPECT_THAT(testing::read_file(job / "job.sbatch"), HasSubstr("#SBATCH --array=1,2\n"));
  ASSERT_EQ(testing::cli_stderr({"task", job.string(), "1"}).first, 0);
  ASSERT_EQ(testing::cli_stderr({"task", job.string(), "2"}).first, 0);
  EXPECT_EQ(
      testing::cli_stderr({"collect", job.string(), "--output", (dir / "m.json").string()}).first,
      0);
  EXPECT_EQ(testing::cli_stderr({"submit", "--rerun", job.string()}).first,
            0);  // nothing left: no submission
  EXPECT_EQ(nlohmann::json::parse(testing::read_file(job / "job.json"))["jobs"].size(), 2u);
}

TEST(Slurm, APointThatFailsAtRunTimeIsNamedWithItsError) {
  TempDir dir;
  fs::copy(testing::fixtures_dir() + "/models/gpt2-a", dir / "model");
  write_file(dir / "f.yaml", "model: {path: '" + (dir / "model").string() +
                                 "'}\nbackends: [eager]\ninputs: {prompts: [[1, 2]]}\n"
                                 "generation: {max_new_tokens: 2}\nrun: {warmup: 0, repeats: 1}\n");
  FakeSbatch sbatch("echo 5\n");
  const auto job = dir / "job";
  ASSERT_EQ(
      testing::cli_stderr({"submit", (dir / "f.yaml").string(), "--job-dir", job.string()}).first,
      0);
  fs::remove(dir / "model" / "model.safetensors");  // the shared folder changed after submission
  EXPECT_EQ(testing::cli_stderr({"task", job.string(), "0"}).first, 1);
  EXPECT_TRUE(fs::exists(job / "parts" / "0.error.json"));
  auto [rc, err] = testing::cli_stderr({"collect", job.string()});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("point 0: failed: "));
  EXPECT_THAT(err, HasSubstr("no point of"));
}

TEST(Slurm, BadSubmissionsAreRefusedAndLeaveNothing) {
  TempDir dir;
  write_file(dir / "s.yaml", sweep_text());
  {
    FakeSbatch sbatch("echo 'sbatch: error: invalid partition specified: nope' >&2\nexit 1\n");
    auto [rc, err] = testing::cli_stderr(
        {"submit", (dir / "s.yaml").string(), "--job-dir", (dir / "j1").string()});
    EXPECT_EQ(rc, 1);
    EXPECT_THAT(err, HasSubstr("sbatch refused the job (exit 1): sbatch: error: invalid "
                               "partition specified: nope"));
    EXPECT_FALSE(fs::exists(dir / "j1"));
  }
  {
    TempDir empty;
    testing::ScopedEnv path("PATH", empty.path().string());
    auto [rc, err] = testing::cli_stderr(
        {"submit", (dir / "s.yaml").string(), "--job-dir", (dir / "j2").string()});
    EXPECT_EQ(rc, 1);
    EXPECT_THAT(err, HasSubstr("sbatch is not on PATH"));
    EXPECT_FALSE(fs::exists(dir / "j2"));
  }
  FakeSbatch sbatch("echo 9\n");
  // A bad point is refused before anything is submitted.
  auto [rc, err] = testing::cli_stderr({"submit", (dir / "s.yaml").string(), "--set",
                                        "sweep={generation.num_beams: [1, 0]}", "--job-dir",
                                        (dir / "j3").string()});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("sweep point"));
  EXPECT_FALSE(fs::exists(dir / "j3"));
  EXPECT_FALSE(fs::exists(sbatch.bin / "calls"));
  std::tie(rc, err) = testing::cli_stderr({"submit", (dir / "s.yaml").string(), "--slurm-option",
                                           "array=0-9", "--job-dir", (dir / "j4").string()});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("gengraph sets --array"));
  std::tie(rc, err) =
      testing::cli_stderr({"submit", (dir / "s.yaml").string(), "--set", "cluster.time='1 day'",
                           "--job-dir", (dir / "j5").string()});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("cluster.time: expected a time limit as Slurm writes it"));
}

TEST(Slurm, PartsFromAnotherExperimentAreRefused) {
  TempDir dir;
  write_file(dir / "s.yaml", sweep_text());
  FakeSbatch sbatch("echo 11\n");
  ASSERT_EQ(
      testing::cli_stderr({"submit", (dir / "s.yaml").string(), "--job-dir", (dir / "a").string()})
          .first,
      0);
  ASSERT_EQ(
      testing::cli_stderr({"submit", (dir / "s.yaml").string(), "--job-dir", (dir / "b").string()})
          .first,
      0);
  ASSERT_EQ(testing::cli_stderr({"task", (dir / "b").string(), "0"}).first, 0);
  fs::copy_file(dir / "b" / "parts" / "0.json", dir / "a" / "parts" / "0.json");
  auto [rc, err] = testing::cli_stderr({"collect", (dir / "a").string()});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("0.json' is not a part of this job (made for another experiment or "
                             "submission"));
  std::tie(rc, err) = testing::cli_stderr({"collect", (dir / "nowhere").string()});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("is not a job folder"));
  std::tie(rc, err) = testing::cli_stderr({"task", (dir / "a").string(), "9"});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("point 9 is not in"));
}

}  // namespace
}  // namespace gengraph

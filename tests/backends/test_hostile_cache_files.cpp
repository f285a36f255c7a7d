// Hostile and careless input, second pass (issue 25), continued from test_hostile_caches.cpp: the
// package cache's files (held locks, FIFOs, killed writers' temporaries, a full disk).
#include "framework/util/files.h"
#include "framework/util/locks.h"
#include "framework/util/process_checks.h"
#include "tests/backends/hostile_caches_support.h"

namespace gengraph {
namespace {

using namespace hostile_caches;  // NOLINT: this file's helpers

// A held package lock waited with no message and no limit: now the waiter names the holder, and
// after GENGRAPH_LOCK_TIMEOUT_S an error names the lock file, the holder and what to do. A lock
// whose recorded holder (on this host) is no longer running is taken over.
TEST(HostileCaches, AHeldPackageLockTimesOutNamingItsHolder) {
  TempDir dir;
  CopyingBuilder builder;
  const auto m = tiny();
  const std::map<std::string, std::string> opts = {{"cache_dir", dir.path().string()}};
  make("aoti", m, opts);
  const fs::path lock = only_file_with_extension(dir.path(), ".pt2").string() + ".lock";
  ASSERT_TRUE(fs::exists(lock));
  {
    ScopedEnv timeout("GENGRAPH_LOCK_TIMEOUT_S", "1");
    FileLock held(lock, "a test's hold");
    EXPECT_THAT(FileLock::holder_of(lock), HasSubstr("pid " + std::to_string(::getpid())));
    CaptureCerr cerr;
    const auto t0 = std::chrono::steady_clock::now();
    const std::string err = error_of([&] { make("aoti", m, opts); });
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30);
    EXPECT_THAT(err, HasSubstr("timed out after 1 s waiting for the lock on building the package"));
    EXPECT_THAT(err, HasSubstr("'" + lock.string() + "'"));
    EXPECT_THAT(err,
                HasSubstr("held by pid " + std::to_string(::getpid()) + " on host " + host_name()));
    EXPECT_THAT(err, HasSubstr("still running"));
    EXPECT_THAT(err, HasSubstr("GENGRAPH_LOCK_TIMEOUT_S"));
    EXPECT_THAT(cerr.text(), HasSubstr("waiting for the lock on building the package"));
    EXPECT_THAT(cerr.text(), HasSubstr("held by pid " + std::to_string(::getpid())));
  }
  EXPECT_EQ(FileLock::holder_of(lock), "");  // released, and the record with it

  // Held through a descriptor that outlived its process (the record names a dead pid here).
  const pid_t dead = dead_pid();
  const int fd = ::open(lock.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  const std::string record = nlohmann::json{
      {"pid", dead},
      {"host", host_name()},
      {"command", "gengraph run gone.yaml"},
      {"since",
       "2026-01-01 00:00:00"}}.dump();
  ASSERT_EQ(::pwrite(fd, record.data(), record.size(), 0), static_cast<ssize_t>(record.size()));
  {
    ScopedEnv timeout("GENGRAPH_LOCK_TIMEOUT_S", "20");
    CaptureCerr cerr;
    auto b = make("aoti", m, opts);
    EXPECT_EQ(first_tokens(*b).size(), 4u);
    EXPECT_THAT(cerr.text(), HasSubstr("was held by pid " + std::to_string(dead)));
    EXPECT_THAT(cerr.text(), HasSubstr("no longer running: taking it over"));
  }
  ::close(fd);
  EXPECT_EQ(builder.builds, 1);  // the package was there: the lock taken over, nothing rebuilt

  // The setting itself is checked.
  ScopedEnv bad("GENGRAPH_LOCK_TIMEOUT_S", "soon");
  EXPECT_THAT(
      error_of([&] { make("aoti", m, opts); }),
      HasSubstr("GENGRAPH_LOCK_TIMEOUT_S: expected a number of seconds >= 0, found 'soon'"));
}

// Traces `m` into the cache `trace` names, then removes the cache file and returns its path, for
// a test to put something else in its place ("" when no trace file was written).
fs::path removed_trace_cache_file(const std::shared_ptr<const CausalLM>& m,
                                  const std::map<std::string, std::string>& trace) {
  first_tokens(*make("trace", m, trace));
  const fs::path file = only_file_with_extension(trace.at("cache_dir"), ".pt");
  if (!file.empty()) fs::remove(file);
  return file;
}

// A FIFO in place of a cache file blocked the reader forever: every cache read checks first. If a
// read blocks anyway, the test opens the FIFO's other end so that it ends, and fails.
TEST(HostileCaches, AFifoInPlaceOfACacheFileIsRefusedNotOpened) {
  TempDir dir;
  const auto m = tiny();
  const std::map<std::string, std::string> trace = {{"cache_dir", dir.path().string()}};
  const fs::path file = removed_trace_cache_file(m, trace);
  ASSERT_FALSE(file.empty());
  ASSERT_EQ(::mkfifo(file.c_str(), 0644), 0);
  auto within_30s = [&](const fs::path& fifo, auto&& f) {
    auto result = std::async(std::launch::async, [&] { return error_of(f); });
    if (result.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
      ADD_FAILURE() << "blocked on " << fifo;
      const int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (w >= 0) ::close(w);
    }
    return result.get();
  };
  EXPECT_THAT(within_30s(file, [&] { first_tokens(*make("trace", m, trace)); }),
              HasSubstr("trace cache file '" + file.string() +
                        "' is not a regular file (a FIFO, device or socket)"));
  EXPECT_THAT(within_30s(file, [&] { TracedStep::load(file, at::kCPU, TraceMeta{}); }),
              HasSubstr("is not a regular file (a FIFO, device or socket)"));

  // The aoti cache: a FIFO as the package, as its lock; as its build record it only loses the
  // recorded figures (the package's manifest is checked instead).
  CopyingBuilder builder;
  const TempDir adir;
  const std::map<std::string, std::string> aoti = {{"cache_dir", adir.path().string()}};
  make("aoti", m, aoti);
  const fs::path package = only_file_with_extension(adir.path(), ".pt2");
  for (const std::string& suffix : {std::string(".build.json"), std::string(".lock")}) {
    const fs::path special = package.string() + suffix;
    fs::remove(special);
    ASSERT_EQ(::mkfifo(special.c_str(), 0644), 0);
    const std::string err = within_30s(special, [&] { first_tokens(*make("aoti", m, aoti)); });
    if (suffix == ".lock") {
      EXPECT_THAT(err, HasSubstr("'" + special.string() + "' is not a regular file"));
    } else {
      EXPECT_EQ(err, "<no error>");
    }
    fs::remove(special);
  }
  fs::remove(package);
  ASSERT_EQ(::mkfifo(package.c_str(), 0644), 0);
  EXPECT_THAT(within_30s(package, [&] { make("aoti", m, aoti); }),
              HasSubstr("the package cache entry '" + package.string() +
                        "' is not a regular file (a FIFO"));
  EXPECT_THAT(within_30s(package, [&] { check_aoti_package(package); }),
              HasSubstr("is not a regular file"));
  EXPECT_EQ(builder.builds, 1);
}

// A writer killed by SIGKILL left its temporary (as big as the trace) that no later run removed:
// the next writer of that target removes those of writers that are gone, on this host, and keeps
// those of running writers and of other hosts.
TEST(HostileCaches, AKilledWritersTemporaryIsRemovedByTheNextWriter) {
  TempDir dir;
  const auto m = tiny();
  const std::map<std::string, std::string> trace = {{"cache_dir", dir.path().string()}};
  const fs::path file = removed_trace_cache_file(m, trace);
  ASSERT_FALSE(file.empty());
  // A writer killed mid-write.
  const pid_t child = ::fork();
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  const std::string host = host_name();
  const fs::path killed = file.string() + ".tmp" + std::to_string(child) + "-" + host;
  const fs::path older = file.string() + ".tmp" + std::to_string(child);  // before hosts in names
  const fs::path running = file.string() + ".tmp" + std::to_string(::getppid()) + "-" + host;
  const fs::path elsewhere = file.string() + ".tmp" + std::to_string(child) + "-another-host";
  for (const auto& p : {killed, older, running, elsewhere}) write_file(p, std::string(4096, 'x'));
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);

  first_tokens(*make("trace", m, trace));
  EXPECT_TRUE(fs::is_regular_file(file));
  EXPECT_FALSE(fs::exists(killed));
  EXPECT_FALSE(fs::exists(older));
  EXPECT_TRUE(fs::exists(running));
  EXPECT_TRUE(fs::exists(elsewhere));

  // The writer every atomic write goes through, directly.
  const auto target = dir / "r.json";
  const fs::path stale = target.string() + ".tmp" + std::to_string(dead_pid()) + "-" + host;
  write_file(stale, "{");
  write_file_atomically(target, "{}", "results");
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_EQ(testing::read_file(target), "{}");
  for (const auto& e : fs::directory_iterator(dir.path())) {
    EXPECT_EQ(e.path().string().find(target.string() + ".tmp"), std::string::npos) << e.path();
  }
}

// A full disk under the package cache was reported as Inductor's stack trace: now as
// "building the aoti package in DIR failed: No space left on device" with the one line that
// matters; any other failure of the tool keeps its last meaningful line, not the traceback. (A
// stand-in for the tools' Python prints what a full disk makes the real exporter print.) The model
// copies of exports killed before they could remove them go at the next export.
TEST(HostileCaches, AFullDiskUnderThePackageCacheIsReportedAsSuch) {
  TempDir dir;
  const auto fake = [&](const std::string& name, const std::string& last_line, int rc) {
    const auto path = dir / name;
    write_file(path,
               "#!/bin/sh\ncat >&2 <<'EOF'\n"
               "W1202 09:46:04.797000 8995 torch/utils/cpp_extension.py:140] No CUDA runtime\n"
               "Traceback (most recent call last):\n"
               "  File \"tools/export_aoti.py\", line 260, in main\n"
               "    torch._inductor.aoti_compile_and_package(program, package_path=tmp)\n"
               "  File \"torch/_inductor/package/package.py\", line 90, in package_aoti\n"
               "    archive_writer.write_file(path, file)\n" +
                   last_line + "\nEOF\nexit " + std::to_string(rc) + "\n");
    fs::permissions(path, fs::perms::owner_all);
    return path;
  };
  const auto cache = dir / "cache";
  const std::map<std::string, std::string> opts = {{"cache_dir", cache.string()}};
  const fs::path stale =
      fs::temp_directory_path() / ("gengraph-aoti-export-" + std::to_string(dead_pid()) + "-1");
  fs::create_directories(stale / "model");
  write_file(stale / "model" / "model.safetensors", std::string(1024, 'w'));
  install_aoti_export_tool();
  {
    ScopedEnv python(
        "GENGRAPH_PYTHON",
        fake("full.sh",
             "OSError: [Errno 28] No space left on device: '" + cache.string() + "/p.pt2'", 1)
            .string());
    const std::string err = error_of([&] { make("aoti", tiny(), opts); });
    EXPECT_THAT(err, HasSubstr("building the aoti package in '" + cache.string() +
                               "' failed: No space left on device"));
    EXPECT_THAT(err, HasSubstr("OSError: [Errno 28] No space left on device: '"));
    EXPECT_THAT(err, Not(HasSubstr("Traceback")));
    EXPECT_THAT(err, Not(HasSubstr("package.py")));
  }
  EXPECT_FALSE(fs::exists(stale));
  {
    ScopedEnv python("GENGRAPH_PYTHON", fake("odd.sh", "RuntimeError: an odd failure", 1).string());
    const std::string err = error_of([&] { make("aoti", tiny(), opts); });
    EXPECT_THAT(err,
                HasSubstr("tools/export_aoti.py exited with 1\n  RuntimeError: an odd failure"));
    EXPECT_THAT(err, Not(HasSubstr("Traceback")));
    EXPECT_THAT(err, Not(HasSubstr("No CUDA runtime")));
  }
  for (const auto& e : fs::directory_iterator(cache)) {
    EXPECT_NE(e.path().extension(), ".pt2") << "a failed export left " << e.path();
  }
}

// The lock helper itself: a FIFO in its place is refused; a timeout of 0 fails at once when held.
TEST(HostileCaches, FileLockRefusesSpecialFilesAndHonoursItsTimeout) {
  TempDir dir;
  const auto fifo = dir / "f.lock";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  EXPECT_THAT(error_of([&] { FileLock l(fifo, "the test lock"); }),
              HasSubstr("the test lock '" + fifo.string() + "' is not a regular file"));
  const auto path = dir / "a.lock";
  FileLock held(path, "the test lock");
  EXPECT_THAT(error_of([&] { FileLock second(path, "the test lock", 0); }),
              HasSubstr("timed out after 0 s waiting for the test lock"));
}

}  // namespace
}  // namespace gengraph

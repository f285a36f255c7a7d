// Hostile and careless input, second pass (issue 25): one test per defect class
// (docs/reliability.md). Here: damaged AOTInductor packages (given and cached), what their loading
// leaves in /tmp, held locks, FIFOs in place of cache files, killed writers' temporaries and a full
// disk under the package cache. One real package is used: the one the conformance tests build for
// the tiny model in the default cache (built here if missing); every damaged one is a copy.
#include <ATen/ATen.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <set>
#include <sstream>

#include "backends/aoti/aoti_step.h"
#include "backends/register_builtin.h"
#include "backends/trace/traced_step.h"
#include "experiments/cli.h"
#include "experiments/process.h"
#include "framework/backend/backend_registry.h"
#include "framework/decoding/generator.h"
#include "framework/util/error.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using namespace testing::cli_names;  // NOLINT(build/namespaces)
using testing::error_of;
using ::testing::Not;
using testing::ScopedEnv;

namespace fs = std::filesystem;

std::shared_ptr<const CausalLM> tiny() { return testing::test_model("tiny", 11); }

std::unique_ptr<ForwardBackend> make(const std::string& name, std::shared_ptr<const CausalLM> m,
                                     std::map<std::string, std::string> options = {}) {
  register_builtin_backends();
  return BackendRegistry::instance().create(name, std::move(m),
                                            BackendOptions(name, std::move(options)));
}

GenerationConfig greedy(int64_t n) {
  GenerationConfig g;
  g.max_new_tokens = n;
  return g;
}

std::vector<int64_t> first_tokens(ForwardBackend& b) {
  return Generator(greedy(4)).generate(b, {{1, 2, 3}}).outputs.at(0).at(0).tokens;
}

// The package of the tiny model (seed 11) with default options, from the default cache: the one
// Registry/BackendConformance.*/aoti_tiny uses, built by whichever test needs it first.
const fs::path& good_package() {
  static const fs::path path = [] {
    register_builtin_backends();
    install_aoti_export_tool();
    AotiStep step(*tiny(), AotiStepOptions{}, "aoti");
    return step.path();
  }();
  return path;
}

// Writes a copy of `source` at `out` through the tools' Python (zipfile), changed as `mode` says:
// "truncate" cuts the program (.so) to half, "zero" blanks it after its first 4 KB,
// "blank_middle" blanks 64 bytes in its middle, "bogus_device"
// names a device no runner serves in the loader's metadata, "deflate" compresses every file,
// "escape" adds a file named outside the package; "+nomanifest" leaves out the manifest. The zip
// itself stays valid (its checksums are those of the changed files).
void rewrite_package(const fs::path& source, const fs::path& out, const std::string& mode) {
  static const char* kScript = R"(
import sys, zipfile
src, out, mode = sys.argv[1:4]
zi = zipfile.ZipFile(src)
with zipfile.ZipFile(out, "w") as zo:
    for i in zi.infolist():
        d = zi.read(i.filename)
        if "nomanifest" in mode and i.filename.endswith("gengraph/manifest.json"):
            continue
        if i.filename.endswith(".so") and "truncate" in mode:
            d = d[: len(d) // 2]
        if i.filename.endswith(".so") and "zero" in mode:
            d = d[:4096] + bytes(len(d) - 4096)
        if i.filename.endswith(".so") and "blank_middle" in mode:
            d = d[: len(d) // 2] + bytes(64) + d[len(d) // 2 + 64 :]
        if i.filename.endswith("_metadata.json") and "bogus_device" in mode:
            d = d.replace(b'"AOTI_DEVICE_KEY": "cpu"', b'"AOTI_DEVICE_KEY": "bogus"')
        if "deflate" in mode:
            zo.writestr(i.filename, d, compress_type=zipfile.ZIP_DEFLATED)
        else:
            zo.writestr(i, d)
    if "escape" in mode:
        zo.writestr(zi.infolist()[0].filename.split("/")[0] + "/data/aotinductor/model/../../../x", b"x")
)";
  const auto r = run_captured(
      {python_for_tools().string(), "-c", kScript, source.string(), out.string(), mode});
  ASSERT_EQ(r.rc, 0) << r.err;
}

// Writes a copy of the package `source` at `out` with its entry `name` holding `bytes` instead (the
// zip stays valid; the manifest is left as it was).
void replace_entry(const fs::path& source, const fs::path& out, const std::string& name,
                   const std::string& bytes) {
  static const char* kScript = R"(
import sys, zipfile
src, out, name, data = sys.argv[1:5]
zi = zipfile.ZipFile(src)
with zipfile.ZipFile(out, "w") as zo:
    for i in zi.infolist():
        zo.writestr(i, bytes.fromhex(data) if i.filename == name else zi.read(i.filename))
)";
  static const char* kHex = "0123456789abcdef";
  std::string hex;
  for (const unsigned char b : bytes) {
    hex += kHex[b >> 4];
    hex += kHex[b & 15];
  }
  const auto r = run_captured(
      {python_for_tools().string(), "-c", kScript, source.string(), out.string(), name, hex});
  ASSERT_EQ(r.rc, 0) << r.err;
}

// This user's folders /tmp/XXXXXX holding an unpacked package (LibTorch's loader makes them).
std::set<fs::path> unpacked_copies() {
  std::set<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator it("/tmp", ec), end; !ec && it != end; it.increment(ec)) {
    struct stat st {};
    if (it->path().filename().string().size() != 6 || ::lstat(it->path().c_str(), &st) != 0 ||
        !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) {
      continue;
    }
    std::error_code e2;
    for (fs::recursive_directory_iterator r(it->path(), e2), rend; !e2 && r != rend;
         r.increment(e2)) {
      if (r->path().filename() == "aotinductor") {
        out.insert(it->path());
        break;
      }
    }
  }
  return out;
}

// std::cerr into a string for the object's lifetime.
class CaptureCerr {
 public:
  CaptureCerr() : old_(std::cerr.rdbuf(text_.rdbuf())) {}
  ~CaptureCerr() { std::cerr.rdbuf(old_); }
  std::string text() const { return text_.str(); }

 private:
  std::ostringstream text_;
  std::streambuf* old_;
};

// `text` without the lines that say a load waits for the per-user unpack lock: another test
// process (CTest runs two at a time) may hold it, which is no part of what a test checks.
std::string without_unpack_waits(const std::string& text) {
  std::istringstream lines(text);
  std::string out;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("gengraph: waiting for the lock on unpacking AOTInductor packages", 0) != 0)
      out += line + "\n";
  }
  return out;
}

// The builder the tests install (a copy of the good package, counted), and the CLI's put back.
class CopyingBuilder {
 public:
  CopyingBuilder() {
    // The good package first, with the real builder: a test run alone (ctest runs each in its own
    // process) would otherwise build it through this very builder, which copies it.
    good_package();
    set_aoti_package_builder(
        [this](const CausalLM&, const AotiExportRequest&, const fs::path& out) {
          ++builds;
          fs::copy_file(good_package(), out, fs::copy_options::overwrite_existing);
          return AotiBuildReport{1.0, 2.0};
        },
        "hostile-copy");
  }
  ~CopyingBuilder() { install_aoti_export_tool(); }
  int builds = 0;
};

// A pid that is certainly not running: a child that has exited and been reaped.
pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

fs::path only_file_with_extension(const fs::path& dir, const std::string& ext) {
  fs::path found;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ext) {
      EXPECT_TRUE(found.empty()) << "a second " << ext << ": " << e.path();
      found = e.path();
    }
  }
  return found;
}

// A package whose program is truncated or blanked inside a valid zip crashed the process that
// loaded it (SIGBUS, SIGSEGV): now each is refused before loading, naming the file and the fault,
// with its manifest (the SHA-256 of each file) or without (the program's ELF structure against its
// size). A zip that LibTorch's loader would unpack outside its folder, or a compressed one, is
// refused too; check_aoti_package says the same without a model.
TEST(HostileCaches, ADamagedPackageIsRefusedBeforeItIsLoaded) {
  TempDir dir;
  const auto m = tiny();
  const fs::path& good = good_package();
  EXPECT_NO_THROW(check_aoti_package(good));
  // The backend checks a given package's structure with its options, its checksums when it
  // loads it; check_aoti_package does both, checksums first.
  const std::string mismatch = "does not match the SHA-256 recorded when the package was made";
  struct Case {
    std::string mode, backend_says, check_says;
  };
  const std::vector<Case> cases = {
      {"truncate", "truncated", mismatch},
      {"zero", "is damaged: its dynamic section", mismatch},
      {"blank_middle", mismatch, mismatch},  // whole as an ELF file: only the checksum tells
      {"truncate+nomanifest", "truncated", "truncated"},
      {"zero+nomanifest", "is damaged: its dynamic section", "is damaged: its dynamic section"},
      {"deflate", "is compressed", "is compressed"},
      {"escape", "is not a relative path inside the package", "is not a relative path"},
  };
  for (const auto& c : cases) {
    const auto path = dir / (c.mode + ".pt2");
    rewrite_package(good, path, c.mode);
    const std::string err = error_of([&] { make("aoti", m, {{"package", path.string()}}); });
    EXPECT_THAT(
        err, HasSubstr("option 'package': AOTInductor package '" + path.string() + "' is damaged"))
        << c.mode;
    EXPECT_THAT(err, HasSubstr(c.backend_says)) << c.mode;
    EXPECT_THAT(error_of([&] { check_aoti_package(path); }), HasSubstr(c.check_says)) << c.mode;
  }
  // Cut short as a file, and zeroed in place (the zip's own checksums are then wrong).
  const auto cut = dir / "cut.pt2";
  fs::copy_file(good, cut);
  fs::resize_file(cut, fs::file_size(good) - 100);
  EXPECT_THAT(error_of([&] {
                make("aoti", m, {{"package", cut.string()}});
              }),
              HasSubstr("'" + cut.string() + "' is not a readable AOTInductor package"));
  // Through the CLI: exit 1 with the message, no signal.
  write_file(dir / "x.yaml",
             "model: {preset: gpt2-tiny, seed: 11}\nbackends: [{name: aoti, "
             "options: {package: '" +
                 (dir / "truncate.pt2").string() +
                 "'}}]\ninputs: {prompts: [[1, 2]]}\n"
                 "generation: {max_new_tokens: 2}\nrun: {warmup: 0, repeats: 1}\n");
  const auto [rc, err] = testing::cli_stderr(
      {"run", (dir / "x.yaml").string(), "--quiet", "--output", (dir / "o.json").string()});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(err, HasSubstr("truncate.pt2' is damaged"));
}

// A package LibTorch's loader unpacks and then fails on (here: a device no runner serves) left its
// unpacked copy in /tmp, every time: now it is removed, and the error names the package.
TEST(HostileCaches, APackageThatFailsToLoadLeavesNothingInTmp) {
  TempDir dir;
  const auto path = dir / "bogus.pt2";
  rewrite_package(good_package(), path, "bogus_device+nomanifest");
  EXPECT_NO_THROW(check_aoti_package(path));  // it passes the checks: the loader itself fails
  const auto before = unpacked_copies();
  for (int i = 0; i < 2; ++i) {
    EXPECT_THAT(error_of([&] {
                  make("aoti", tiny(), {{"package", path.string()}});
                }),
                HasSubstr("package '" + path.string() + "' could not be loaded"));
  }
  for (const auto& d : unpacked_copies()) {
    EXPECT_TRUE(before.count(d)) << "left behind: " << d;
  }
  // A good package still loads, and its copy goes when the backend does.
  {
    auto b = make("aoti", tiny(), {{"package", good_package().string()}});
    EXPECT_EQ(first_tokens(*b).size(), 4u);
  }
  for (const auto& d : unpacked_copies()) EXPECT_TRUE(before.count(d)) << "left behind: " << d;
}

// A cached package damaged after it was built (its checksum is recorded beside it) is rebuilt; with
// no builder, refused with what to do.
TEST(HostileCaches, ADamagedCachedPackageIsRebuilt) {
  TempDir dir;
  CopyingBuilder builder;
  const auto m = tiny();
  const std::map<std::string, std::string> opts = {{"cache_dir", dir.path().string()}};
  const auto want = first_tokens(*make("eager", m));
  EXPECT_EQ(first_tokens(*make("aoti", m, opts)), want);
  EXPECT_EQ(builder.builds, 1);
  const fs::path cached = only_file_with_extension(dir.path(), ".pt2");
  ASSERT_FALSE(cached.empty());
  EXPECT_THAT(testing::read_file(cached.string() + ".build.json"), HasSubstr("\"sha256\""));

  // The program truncated inside a valid zip, as a disk or a careless copy may leave it.
  rewrite_package(good_package(), cached, "truncate");
  {
    CaptureCerr cerr;
    EXPECT_EQ(first_tokens(*make("aoti", m, opts)), want);
    EXPECT_THAT(cerr.text(), HasSubstr("is damaged"));
    EXPECT_THAT(cerr.text(), HasSubstr("rebuilding the cached package"));
  }
  EXPECT_EQ(builder.builds, 2);
  // Bytes overwritten in place: the whole file's checksum differs from the recorded one.
  {
    std::fstream f(cached, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(cached) / 2));
    f << std::string(64, '\0');
  }
  set_aoti_package_builder(nullptr, "hostile-copy");
  const std::string err = error_of([&] { make("aoti", m, opts); });
  EXPECT_THAT(err, HasSubstr("AOTInductor package '" + cached.string() + "' is damaged"));
  EXPECT_THAT(err, HasSubstr("remove it to rebuild it"));
}

// The JSON inside a package (the loader's metadata, gengraph's manifest) goes through the one
// typed reader: a wrong type, a missing key or text that is not JSON is named with the entry, the
// key, what was expected and what was found. Before, the manifest's refusals carried nlohmann's
// "[json.exception.type_error.302] type must be string, but is number" and its parse errors'
// texts, naming no key.
TEST(HostileCaches, APackagesJsonEntriesAreReadThroughTheOneTypedReader) {
  const fs::path seeds =
      fs::path(GENGRAPH_SOURCE_DIR) / "tests" / "fuzz" / "corpus" / "aoti_package";
  const std::string meta_entry = "pkg/data/aotinductor/model/m.wrapper_metadata.json";
  const std::string so_entry = "pkg/data/aotinductor/model/m.wrapper.so";
  const std::string manifest_entry = "pkg/gengraph/manifest.json";
  // The committed seed with a number among the metadata's strings.
  const fs::path not_strings = seeds / "metadata_not_strings";
  EXPECT_EQ(error_of([&] { check_aoti_package(not_strings); }),
            "AOTInductor package '" + not_strings.string() + "' is damaged: '" + meta_entry +
                "': key 'gengraph.layers': expected a string, found 2");

  TempDir dir;
  const fs::path out = dir / "p.pt2";
  auto refusal = [&](const std::string& entry, const std::string& text) {
    replace_entry(seeds / "valid", out, entry, text);
    return error_of([&] { check_aoti_package(out); });
  };
  const std::string damaged = "AOTInductor package '" + out.string() + "' is damaged: ";
  EXPECT_EQ(refusal(meta_entry, R"(["cpu"])"),
            damaged + "'" + meta_entry + "': expected an object of strings, found an array of 1 " +
                "entry");
  const std::string not_json = refusal(meta_entry, R"({"AOTI_DEVICE_KEY": )");
  EXPECT_THAT(not_json,
              ::testing::StartsWith(damaged + "'" + meta_entry + "' is not valid JSON: "));
  EXPECT_THAT(not_json, ::testing::EndsWith("unexpected end of input; expected '[', '{', or a "
                                            "literal at line 1, column 21"));
  EXPECT_THAT(not_json, Not(HasSubstr("json.exception")));

  const std::string manifest = damaged + "its manifest '" + manifest_entry + "': ";
  const std::string digest = "expected a SHA-256 digest (64 lower-case hex digits), found ";
  EXPECT_EQ(refusal(manifest_entry, R"({"format": 1, "sha256": {")" + so_entry + R"(": 3}})"),
            manifest + "key 'sha256." + so_entry + "': " + digest + "3");
  EXPECT_EQ(refusal(manifest_entry, R"({"format": 1, "sha256": {")" + so_entry + R"(": "ABC"}})"),
            manifest + "key 'sha256." + so_entry + "': " + digest + "the string \"ABC\"");
  EXPECT_EQ(refusal(manifest_entry, R"({"format": 1})"),
            manifest +
                "key 'sha256': expected an object of SHA-256 digests by entry name, found nothing "
                "(the key is missing)");
  EXPECT_EQ(refusal(manifest_entry, "[]"),
            manifest + "expected a gengraph package manifest (an object), found an array of 0 " +
                "entries");
  const std::string manifest_not_json = refusal(manifest_entry, "{\"format\": 1,\n\"sha256\": {");
  EXPECT_THAT(manifest_not_json, ::testing::StartsWith(damaged + "its manifest '" + manifest_entry +
                                                       "' is not valid JSON: "));
  EXPECT_THAT(manifest_not_json, ::testing::EndsWith(" at line 2, column 12"));

  // gengraph's own metadata, integers written as strings: the one form as well.
  replace_entry(seeds / "valid", out, meta_entry,
                R"({"AOTI_DEVICE_KEY": "cpu", "gengraph.format": "two\u001b[0m"})");
  EXPECT_EQ(error_of([&] { AotiMeta::read(out); }),
            "AOTInductor package '" + out.string() +
                "': metadata key 'gengraph.format': expected an integer (written as a string), "
                "found the string \"two\\u001b[0m\"");
}

// The package cache's build record (PACKAGE.build.json) goes through the one typed reader too. A
// damaged one was dropped in silence (nlohmann's type_error swallowed); now a warning names the
// record, the key, what was expected and what was found, the package is checked against its
// manifest instead, and a damaged package is still refused (here: rebuilt).
TEST(HostileCaches, ADamagedBuildRecordIsNamedAndTheManifestChecksInstead) {
  TempDir dir;
  CopyingBuilder builder;
  const auto m = tiny();
  const std::map<std::string, std::string> opts = {{"cache_dir", dir.path().string()}};
  make("aoti", m, opts);
  const fs::path cached = only_file_with_extension(dir.path(), ".pt2");
  ASSERT_FALSE(cached.empty());
  const fs::path record = cached.string() + ".build.json";
  {
    CaptureCerr cerr;
    EXPECT_EQ(make("aoti", m, opts)->report().at("aoti_compile_seconds"), 2.0);  // recorded
    EXPECT_EQ(cerr.text(), "");
  }
  const std::string warning = "gengraph: the package's build record '" + record.string() + "'";
  const std::string instead = "; checking the package against its own manifest instead\n";
  struct Case {
    std::string text, says;
  };
  const std::vector<Case> cases = {
      {R"({"export_seconds": "slow", "compile_seconds": 2})",
       ": key 'export_seconds': expected a number of seconds >= 0, found the string \"slow\""},
      {R"({"export_seconds": 1, "compile_seconds": -2})",
       ": key 'compile_seconds': expected a number of seconds >= 0, found -2"},
      {R"({"export_seconds": 1, "compile_seconds": 2, "sha256": 5})",
       ": key 'sha256': expected a SHA-256 digest (64 lower-case hex digits), found 5"},
      {R"({"export_seconds": 1})",
       ": key 'compile_seconds': expected a number of seconds >= 0, found nothing (the key is "
       "missing)"},
      {"[1]",
       ": expected an object (written when the package was built), found an array of 1 "
       "entry"},
      {R"({"export_seconds": 1e999})",
       " is not valid JSON: number overflow parsing '1e999' at line 1, column 24"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    write_file(record, c.text);
    CaptureCerr cerr;
    auto b = make("aoti", m, opts);
    EXPECT_EQ(without_unpack_waits(cerr.text()), warning + c.says + instead);
    EXPECT_EQ(b->report().at("aoti_compile_seconds"), 0.0);  // the figures are lost
  }
  // With the record damaged, the manifest still finds a damaged package.
  write_file(record, "[]");
  rewrite_package(good_package(), cached, "truncate");
  {
    CaptureCerr cerr;
    EXPECT_EQ(first_tokens(*make("aoti", m, opts)), first_tokens(*make("eager", m)));
    EXPECT_THAT(cerr.text(), HasSubstr(warning + ": expected an object"));
    EXPECT_THAT(cerr.text(), HasSubstr("is damaged"));
    EXPECT_THAT(cerr.text(), HasSubstr("rebuilding the cached package"));
  }
  EXPECT_EQ(builder.builds, 2);
  EXPECT_THAT(testing::read_file(record), HasSubstr("\"sha256\""));  // written anew
}

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

// A writer killed by SIGKILL left its temporary (214 MB for a trace) that no later run removed:
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

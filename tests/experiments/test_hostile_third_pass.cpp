// Hostile and careless input, third pass (issue 49): an interrupt while a trace-cache file is
// written, outputs that can never be written found only after the work, and gengraph quality's
// --group-size against model.group_size. One test per class (docs/reliability.md).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "experiments/experiment/experiment_config.h"
#include "framework/util/process_checks.h"
#include "tests/support/test_util.h"

namespace gengraph {
namespace {

using namespace testing::cli_names;  // NOLINT(build/namespaces)
namespace fs = std::filesystem;

// Files under `dir` whose name holds ".tmp".
std::vector<std::string> temporaries_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.path().filename().string().find(".tmp") != std::string::npos)
      out.push_back(e.path().string());
  }
  return out;
}

// Runs the real gengraph binary with `args` (stdout to /dev/null, stderr to `err`), stopped
// before exec until go() is called, so that its pid is known first.
class HeldProcess {
 public:
  HeldProcess(const fs::path& binary, const std::vector<std::string>& args, const fs::path& err) {
    // Everything the child needs is made before the fork: it only calls async-signal-safe
    // functions (the test process has threads).
    std::vector<char*> argv{const_cast<char*>(binary.c_str())};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    int p[2];
    if (::pipe(p) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(p[1]);
      char c;
      if (::read(p[0], &c, 1) != 1) ::_exit(120);
      const int null = ::open("/dev/null", O_WRONLY);
      const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(null, STDOUT_FILENO);
      ::dup2(e, STDERR_FILENO);
      ::execv(binary.c_str(), argv.data());
      ::_exit(121);
    }
    ::close(p[0]);
    go_ = p[1];
  }
  ~HeldProcess() {
    if (go_ >= 0) ::close(go_);
    if (pid_ > 0 && !waited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  void go() {
    (void)!::write(go_, "g", 1);
    ::close(go_);
    go_ = -1;
  }
  // Its wait status, waiting at most `seconds` (then killed: a hang).
  int wait(int seconds) {
    int status = 0;
    for (int i = 0; i < seconds * 20; ++i) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        waited_ = true;
        return status;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << "gengraph did not end within " << seconds << " s";
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status, 0);
    waited_ = true;
    return status;
  }

 private:
  pid_t pid_ = -1;
  int go_ = -1;
  bool waited_ = false;
};

// SIGTERM (or SIGINT) while a trace-cache file was written left its temporary (the size of a
// trace) and the process ended without a word. Now the temporary is removed at once, the line every
// interrupted command prints is printed, and the exit status is 128 + the signal. The write is
// caught in the middle for certain: the temporary that the run will write (its name holds the
// writer's pid, known between fork and exec) is made a FIFO beforehand, whose reader here takes
// nothing, so that the writer blocks inside its write.
TEST(HostileCaches, AnInterruptWhileATraceCacheFileIsWrittenRemovesItAndSaysSo) {
  const fs::path gengraph = testing::cli_binary();
  if (gengraph.empty()) GTEST_SKIP() << "build/gengraph is not built beside the tests";
  TempDir dir;
  const fs::path cache = dir / "cache";
  write_file(dir / "e.yaml",
             "model: {preset: gpt2-tiny}\nbackends:\n  - {name: trace, options: "
             "{cache_dir: \"" +
                 cache.string() +
                 "\"}}\n"
                 "inputs: {prompts: [[1, 2, 3]]}\ngeneration: {max_new_tokens: 2}\n"
                 "run: {warmup: 0, repeats: 1}\n");
  // A first run writes the cache file: its name, then it is removed.
  ASSERT_EQ(testing::run_quietly(dir / "e.yaml", dir / "first.json"), 0);
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(cache))
    if (e.path().extension() == ".pt") files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  const fs::path file = files[0];
  const auto file_size = fs::file_size(file);
  fs::remove(file);

  for (const int sig : {SIGTERM, SIGINT}) {
    SCOPED_TRACE(sig);
    const fs::path err = dir / ("err" + std::to_string(sig) + ".txt");
    const fs::path out = dir / ("r" + std::to_string(sig) + ".json");
    HeldProcess p(gengraph, {"run", (dir / "e.yaml").string(), "--output", out.string(), "--quiet"},
                  err);
    ASSERT_GT(p.pid(), 0);
    const fs::path tmp = file.string() + ".tmp" + std::to_string(p.pid()) + "-" + host_name();
    ASSERT_EQ(::mkfifo(tmp.c_str(), 0644), 0) << std::strerror(errno);
    const int reader = ::open(tmp.c_str(), O_RDONLY | O_NONBLOCK);
    ASSERT_GE(reader, 0);
    ::fcntl(reader, F_SETPIPE_SZ, 4096);
    // More than the FIFO holds: the writer blocks inside its write.
    ASSERT_GT(file_size, static_cast<uintmax_t>(::fcntl(reader, F_GETPIPE_SZ)));
    p.go();
    // Data in the FIFO: the writer is inside its write (and blocked once the FIFO is full).
    pollfd pfd{reader, POLLIN, 0};
    ASSERT_EQ(::poll(&pfd, 1, 120000), 1)
        << "the run never wrote its trace cache file: " << testing::read_file(err);
    ::kill(p.pid(), sig);
    const int status = p.wait(60);
    ::close(reader);
    const std::string said = testing::read_file(err);
    ASSERT_TRUE(WIFEXITED(status)) << "ended by signal " << WTERMSIG(status) << "; " << said;
    EXPECT_EQ(WEXITSTATUS(status), 128 + sig) << said;
    EXPECT_THAT(said, HasSubstr("error: interrupted by signal " + std::to_string(sig) +
                                ": temporary files removed, no results written"));
    EXPECT_FALSE(fs::exists(fs::symlink_status(tmp))) << "left behind: " << tmp;
    EXPECT_EQ(temporaries_in(dir.path()), std::vector<std::string>{});
    EXPECT_FALSE(fs::exists(file));
    EXPECT_FALSE(fs::exists(out));
  }
}

// A folder that refuses writes, for outputs: a read-only tmpfs (root), or a folder without write
// permission (others); "" when neither can be made here.
std::string unwritable_folder(const fs::path& at) {
  fs::create_directories(at);
  if (::geteuid() != 0) {
    fs::permissions(at, fs::perms::owner_read | fs::perms::owner_exec);
    return ::access(at.c_str(), W_OK) != 0 ? "a folder without write permission" : "";
  }
  if (::mount("tmpfs", at.c_str(), "tmpfs", MS_RDONLY, "size=64k") == 0) return "a read-only tmpfs";
  return "";
}

// `gengraph quality` without --output and without a results/ folder failed only after all its
// work: "writing quality results 'results/quality.json.tmp…' failed: No such file or directory".
// It now makes the folder, as run does. And every command that writes after long work (run,
// generate, quality, compare, collect) refuses an output it can never write before the work:
// a parent that is a file, or a folder that refuses writes.
TEST(HostileOutputs, QualityMakesItsResultsFolderAndOutputsAreCheckedBeforeTheWork) {
  TempDir dir;
  // A fixture model with a minimal byte-level BPE tokenizer: "ab" is one token.
  const fs::path model = dir / "model";
  fs::copy(fs::path(testing::fixtures_dir()) / "models" / "gpt2-a", model);
  write_file(model / "tokenizer.json",
             R"({"version": "1.0", "added_tokens": [], "normalizer": null,
                 "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false,
                                   "use_regex": true},
                 "post_processor": null, "decoder": {"type": "ByteLevel"},
                 "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2},
                           "merges": ["a b"]}})");
  std::string text;
  for (int i = 0; i < 20; ++i) text += "ab";
  write_file(dir / "text.txt", text);
  const fs::path work = dir / "work";  // no results/ folder here
  fs::create_directories(work);
  const fs::path cwd = fs::current_path();
  fs::current_path(work);
  auto [rc, err] =
      testing::cli_stderr({"quality", "--model", model.string(), "--weights", "int8", "--text-file",
                           (dir / "text.txt").string(), "--windows", "1", "--window", "8", "--text",
                           "abab", "--new-tokens", "2", "--quiet"});
  fs::current_path(cwd);
  EXPECT_EQ(rc, 0) << err;
  EXPECT_TRUE(fs::is_regular_file(work / "results" / "quality.json")) << err;
  EXPECT_EQ(temporaries_in(work), std::vector<std::string>{});
  // Outputs never replace inputs: the text file, or a file in the model folder.
  for (const fs::path& input : {dir / "text.txt", model / "config.json", model / "new.json"}) {
    const std::string before = fs::exists(input) ? testing::read_file(input) : "";
    std::tie(rc, err) =
        testing::cli_stderr({"quality", "--model", model.string(), "--text-file",
                             (dir / "text.txt").string(), "--output", input.string()});
    EXPECT_EQ(rc, 2) << input;
    EXPECT_THAT(err, HasSubstr("outputs never replace inputs")) << err;
    EXPECT_EQ(fs::exists(input) ? testing::read_file(input) : "", before);
  }

  // Outputs that can never be written: the error names the output, before the work (quality's
  // model does not exist: had the work come first, its error would be the model's).
  write_file(dir / "a file", "x");
  write_file(dir / "e.yaml",
             "model: {preset: gpt2-tiny}\ninputs: {prompts: [[1]]}\ngeneration: "
             "{max_new_tokens: 1}\nrun: {warmup: 0, repeats: 1}\n");
  const std::string under_file = (dir / "a file" / "r.json").string();
  const std::string not_a_folder = "'" + (dir / "a file").string() + "' is not a folder";
  const std::vector<std::vector<std::string>> commands = {
      {"quality", "--model", (dir / "no model").string(), "--output"},
      {"run", (dir / "e.yaml").string(), "--output"},
      {"generate", "--model", "gpt2-tiny", "--prompt", "1", "--max-new-tokens", "1", "--output"},
  };
  for (auto args : commands) {
    args.push_back(under_file);
    std::tie(rc, err) = testing::cli_stderr(args);
    EXPECT_NE(rc, 0) << args[0];
    EXPECT_THAT(err, HasSubstr("results '" + under_file + "': " + not_a_folder)) << err;
  }
  const fs::path locked = dir / "locked";
  const std::string how = unwritable_folder(locked);
  if (how.empty()) {
    std::cerr << "note: no folder that refuses writes can be made here (a read-only mount "
                 "needs root); that part is not checked\n";
    return;
  }
  struct Unmount {
    fs::path p;
    ~Unmount() {
      if (::geteuid() == 0) ::umount(p.c_str());
      std::error_code ignored;
      fs::permissions(p, fs::perms::owner_all, ignored);
    }
  } unmount{locked};
  for (const std::string& out :
       {(locked / "q.json").string(), (locked / "new" / "folder" / "q.json").string()}) {
    for (auto args : commands) {
      args.push_back(out);
      std::tie(rc, err) = testing::cli_stderr(args);
      EXPECT_NE(rc, 0) << args[0] << " in " << how;
      EXPECT_THAT(err, HasSubstr("results '" + out + "' cannot be written: the folder '" +
                                 locked.string() + "' refuses writes ("))
          << err;
    }
  }
  write_file(dir / "r.json", "{}");
  std::tie(rc, err) =
      testing::cli_stderr({"compare", (dir / "r.json").string(), (dir / "r.json").string(),
                           "--output", (locked / "c.json").string()});
  EXPECT_THAT(
      err, HasSubstr("comparison '" + (locked / "c.json").string() +
                     "' cannot be written: the folder '" + locked.string() + "' refuses writes ("))
      << err;
}

// quality --group-size took 1 to 256 while model.group_size takes 32, 64, 128 or 256: one check
// (is_group_size) for both, with the same words.
TEST(Quality, GroupSizeIsCheckedAsModelGroupSizeIs) {
  for (const std::string v : {"1", "7", "31", "33", "100", "255", "512", "0", "-32", "32.0", "1e2",
                              "99999999999999999999"}) {
    auto [rc, err] = testing::cli_stderr({"quality", "--model", "x", "--group-size", v});
    EXPECT_EQ(rc, 2) << v;
    EXPECT_THAT(err, HasSubstr("--group-size: expected 32, 64, 128 or 256, found '" + v + "'"))
        << err;
    if (v == "0") continue;  // model.group_size 0 is not given: int4's groups of 32
    const std::string yaml = "model: {preset: gpt2-tiny, weights: int4, group_size: " + v +
                             "}\ninputs: {prompts: [[1]]}\n";
    EXPECT_THAT(testing::error_of([&] { parse_experiment(yaml, "g.yaml"); }),
                HasSubstr("model.group_size: expected 32, 64, 128 or 256, found '" + v + "'"))
        << v;
  }
  for (const int64_t n : {32, 64, 128, 256}) {
    EXPECT_TRUE(is_group_size(n));
    const std::string yaml =
        "model: {preset: gpt2-tiny, weights: int4, group_size: " + std::to_string(n) +
        "}\ninputs: {prompts: [[1]]}\n";
    EXPECT_EQ(parse_experiment(yaml, "g.yaml").model.group_size, n);
    // The flag passes its check: what fails next is the model, not the group size.
    auto [rc, err] = testing::cli_stderr(
        {"quality", "--model", "/no/such/model", "--group-size", std::to_string(n)});
    EXPECT_EQ(rc, 1) << err;
    EXPECT_THAT(err, ::testing::Not(HasSubstr("--group-size")));
  }
}

}  // namespace
}  // namespace gengraph

#include "experiments/tools/process.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "framework/model/model_config.h"
#include "framework/util/error.h"
#include "framework/util/files.h"

namespace gengraph {
namespace {

volatile sig_atomic_t g_child_pid = 0;
volatile sig_atomic_t g_signal = 0;
int g_guards = 0;

extern "C" void on_interrupt(int sig) {
  g_signal = sig;
  if (g_child_pid > 0) ::kill(static_cast<pid_t>(g_child_pid), sig);
}

}  // namespace

namespace {

// This library's folder (an install's lib/), from the address of one of its own functions.
std::filesystem::path own_folder() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&own_folder), &info) == 0 || info.dli_fname == nullptr) {
    return {};
  }
  std::error_code ec;
  const auto path = std::filesystem::canonical(info.dli_fname, ec);
  return ec ? std::filesystem::path() : path.parent_path();
}

// This install's share/gengraph, or "" when the library does not lie in an install with tools.
std::filesystem::path installed_home() {
  const auto lib = own_folder();
  if (lib.empty()) return {};
  const auto home = (lib / GENGRAPH_LIB_TO_SHARE).lexically_normal();
  std::error_code ec;
  return std::filesystem::is_directory(home / "tools", ec) ? home : std::filesystem::path();
}

}  // namespace

FoundPath tools_home() {
  if (const char* p = std::getenv("GENGRAPH_ROOT"); p != nullptr && *p != 0) {
    return {p, "GENGRAPH_ROOT"};
  }
  if (auto home = installed_home(); !home.empty()) return {home, "this install's own"};
  return {GENGRAPH_SOURCE_DIR, "the source tree this gengraph was built from"};
}

FoundPath tools_python() {
  if (const char* p = std::getenv("GENGRAPH_PYTHON"); p != nullptr && *p != 0) {
    return {p, "GENGRAPH_PYTHON"};
  }
  const FoundPath home = tools_home();
  if (home.origin == "this install's own") {
    const auto record = home.path / "python";
    std::ifstream in(record);
    std::string line;
    if (in && std::getline(in, line) && !line.empty()) {
      return {line, "this install's record, " + record.string()};
    }
    if (std::filesystem::exists(record)) {
      throw Error("'" + record.string() +
                  "': the install's record of the tools' Python is empty (cmake --install "
                  "writes it; GENGRAPH_PYTHON names one)");
    }
  }
  return {home.path / ".venv" / "bin" / "python", "the .venv of " + home.origin};
}

std::filesystem::path source_root() { return tools_home().path; }

std::filesystem::path python_for_tools() { return tools_python().path; }

InterruptGuard::InterruptGuard() {
  if (g_guards++ > 0) return;
  g_signal =
      0;  // a signal before this had its default action; one noted by an earlier guard is handled
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, &old_int_);
  ::sigaction(SIGTERM, &sa, &old_term_);
}
InterruptGuard::~InterruptGuard() {
  if (--g_guards > 0) return;
  ::sigaction(SIGINT, &old_int_, nullptr);
  ::sigaction(SIGTERM, &old_term_, nullptr);
}

void throw_if_interrupted() {
  if (g_signal != 0) throw Interrupted(static_cast<int>(g_signal));
}

namespace {

// Starts argv[0] (looked up in PATH, no shell) with `actions` (redirections; may be null), forwards
// interrupts to it, and waits: run_command and run_captured share this.
int spawn_and_wait(const std::vector<std::string>& argv,
                   const posix_spawn_file_actions_t* actions) {
  InterruptGuard guard;
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  if (const int err = posix_spawnp(&pid, args[0], actions, nullptr, args.data(), environ);
      err != 0) {
    throw Error(
        "cannot start '" + argv[0] + "': " + std::strerror(err) +
        (argv[0].find("python") != std::string::npos
             ? " (the tools' Python: GENGRAPH_PYTHON, or .venv/bin/python in the source tree)"
             : ""));
  }
  g_child_pid = pid;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      g_child_pid = 0;
      return -1;
    }
  }
  g_child_pid = 0;
  throw_if_interrupted();
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

int run_command(const std::vector<std::string>& argv) { return spawn_and_wait(argv, nullptr); }

CapturedCommand run_captured(const std::vector<std::string>& argv) {
  CapturedCommand r;
  // Looked up first, so that "not installed" is told apart from a program that failed.
  bool on_path = argv[0].find('/') != std::string::npos && ::access(argv[0].c_str(), X_OK) == 0;
  if (const char* path = std::getenv("PATH"); path && argv[0].find('/') == std::string::npos) {
    std::stringstream dirs(path);
    for (std::string d; std::getline(dirs, d, ':');) {
      if (!d.empty() && ::access((d + "/" + argv[0]).c_str(), X_OK) == 0) on_path = true;
    }
  }
  if (!on_path) {
    r.found = false;
    return r;
  }
  static int calls = 0;
  const auto stem = std::filesystem::temp_directory_path() /
                    ("gengraph-cmd-" + std::to_string(::getpid()) + "-" + std::to_string(++calls));
  const RemoveOnExit out_file{stem.string() + ".out"}, err_file{stem.string() + ".err"};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out_file.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  posix_spawn_file_actions_addopen(&actions, 2, err_file.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  struct Destroy {
    posix_spawn_file_actions_t* a;
    ~Destroy() { posix_spawn_file_actions_destroy(a); }
  } destroy{&actions};
  r.rc = spawn_and_wait(argv, &actions);
  auto slurp = [](const std::filesystem::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  r.out = slurp(out_file.path);
  r.err = slurp(err_file.path);
  return r;
}

RemoveOnExit::~RemoveOnExit() {
  std::error_code ignored;
  std::filesystem::remove(path, ignored);
}

ToolResult run_tool(const std::string& script, const nlohmann::json& request, int64_t timeout_s,
                    std::ostream& log) {
  static int calls = 0;
  const auto stem =
      std::filesystem::temp_directory_path() /
      ("gengraph-" + script + "-" + std::to_string(::getpid()) + "-" + std::to_string(++calls));
  const auto req_path = stem.string() + ".json", out_path = stem.string() + ".out.json";
  const RemoveOnExit remove_request{req_path}, remove_output{out_path};
  write_file_or_throw(req_path, request.dump(), "the request for tools/" + script);
  std::vector<std::string> argv;
  if (timeout_s > 0) argv = {"timeout", "-k", "10", std::to_string(timeout_s)};
  for (const std::string& a :
       {python_for_tools().string(), (source_root() / "tools" / script).string(),
        std::string("--request"), req_path, std::string("--out"), out_path}) {
    argv.push_back(a);
  }
  // What the user may need (which tool, which Python), not its temporary request and output
  // files or the time limit's wrapper.
  log << "running tools/" << script << " with " << python_for_tools().string() << "\n";
  ToolResult r;
  r.rc = run_command(argv);
  if (r.rc == 0 && std::filesystem::exists(out_path)) r.out = read_json_file(out_path);
  return r;
}

}  // namespace gengraph

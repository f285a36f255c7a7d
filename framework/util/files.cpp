#include "framework/util/files.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

#include "framework/util/error.h"
#include "framework/util/path_errors.h"
#include "framework/util/process_checks.h"

namespace gengraph {

void check_regular_file(const std::filesystem::path& path, const std::string& what,
                        const std::string& expected) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec == std::errc::too_many_symbolic_link_levels) throw Error(what + ": " + path_problem(ec));
  if (!std::filesystem::exists(st)) {
    throw Error("cannot read " + what + ": file missing or unreadable (" +
                (ec ? ec.message() : std::string("no such file")) + ")");
  }
  if (std::filesystem::is_directory(st)) throw Error(what + " is a folder, expected " + expected);
  if (!std::filesystem::is_regular_file(st)) {
    throw Error(what + " is not a regular file (a FIFO, device or socket), expected " + expected);
  }
}

std::string read_regular_file(const std::filesystem::path& path, const std::string& what,
                              const std::string& expected, std::uintmax_t max_bytes) {
  check_regular_file(path, what, expected);
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (!ec && size > max_bytes) {
    throw Error(what + " is " + std::to_string(size) + " bytes, more than the " +
                std::to_string(max_bytes) + " accepted for " + expected);
  }
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error("cannot read " + what + ": file missing or unreadable (" +
                std::string(errno ? std::strerror(errno) : "open failed") + ")");
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error("reading " + what + " failed");
  std::string text = ss.str();
  if (text.size() > max_bytes) {  // grew while read
    throw Error(what + " is larger than the " + std::to_string(max_bytes) + " bytes accepted for " +
                expected);
  }
  return text;
}

void write_file_or_throw(const std::filesystem::path& path, const std::string& bytes,
                         const std::string& what) {
  auto fail = [&](int err) {
    throw Error("writing " + what + " '" + path.string() + "' failed: " + std::strerror(err));
  };
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) fail(errno);
  const size_t n = std::fwrite(bytes.data(), 1, bytes.size(), f);
  const int write_err = n == bytes.size() ? 0 : errno;
  const int flush_err = std::fflush(f) == 0 ? 0 : errno;
  const int close_err = std::fclose(f) == 0 ? 0 : errno;
  if (write_err || flush_err || close_err)
    fail(write_err ? write_err : (flush_err ? flush_err : close_err));
}

namespace {

// Temporary files removed when SIGINT or SIGTERM ends the process while they exist. While one is
// registered, each of the two signals whose action is the default (ending the process silently)
// gets a handler that removes every registered file, prints the line an interrupted gengraph
// command prints, and exits with 128 + the signal, as the CLI does. A signal that has a handler
// already (the CLI's InterruptGuard, which notes it and removes its files on the way out; an
// embedding program's own) is left alone. A writer killed by SIGKILL leaves its file to the next
// writer (remove_stale_temporaries).
constexpr int kMaxTemporaries = 64;  // files being written at once; more are not registered
std::atomic<const char*> g_temporaries[kMaxTemporaries];
std::atomic<bool> g_removing{false};
std::mutex g_temporaries_mutex;  // registration (never taken by the handler)
int g_registered = 0;
bool g_handles[2] = {false, false};  // SIGINT, SIGTERM: the handler was installed by us
constexpr int kSignals[2] = {SIGINT, SIGTERM};

extern "C" void remove_temporaries_and_exit(int sig) {
  g_removing = true;
  for (auto& slot : g_temporaries) {
    if (const char* p = slot.load()) ::unlink(p);
  }
  // Only async-signal-safe calls: the digits by hand, one write(2).
  char line[128];
  size_t n = 0;
  for (const char* c = "error: interrupted by signal "; *c;) line[n++] = *c++;
  char digits[8];
  int d = 0;
  for (int v = sig; v > 0 && d < 7; v /= 10) digits[d++] = static_cast<char>('0' + v % 10);
  while (d > 0) line[n++] = digits[--d];
  for (const char* c = ": temporary files removed, no results written\n"; *c;) line[n++] = *c++;
  (void)!::write(STDERR_FILENO, line, n);
  ::_exit(128 + sig);
}

// Registers `path` (not yet created, or being written) for removal on SIGINT or SIGTERM.
class RemovedOnInterrupt {
 public:
  explicit RemovedOnInterrupt(const std::filesystem::path& path) : path_(path.string()) {
    const std::lock_guard<std::mutex> lock(g_temporaries_mutex);
    for (int i = 0; i < kMaxTemporaries; ++i) {
      const char* expected = nullptr;
      if (g_temporaries[i].compare_exchange_strong(expected, path_.c_str())) {
        slot_ = i;
        break;
      }
    }
    if (g_registered++ > 0) return;
    for (int i = 0; i < 2; ++i) {
      struct sigaction current {};
      if (::sigaction(kSignals[i], nullptr, &current) != 0 || current.sa_handler != SIG_DFL ||
          (current.sa_flags & SA_SIGINFO) != 0)
        continue;
      struct sigaction sa {};
      sa.sa_handler = remove_temporaries_and_exit;
      sigfillset(&sa.sa_mask);  // one signal at a time
      g_handles[i] = ::sigaction(kSignals[i], &sa, nullptr) == 0;
    }
  }
  ~RemovedOnInterrupt() {
    const std::lock_guard<std::mutex> lock(g_temporaries_mutex);
    if (slot_ >= 0) g_temporaries[slot_] = nullptr;
    // The handler runs in another thread and may hold this path: the process is ending.
    while (g_removing) ::pause();
    if (--g_registered > 0) return;
    for (int i = 0; i < 2; ++i) {
      if (!g_handles[i]) continue;
      g_handles[i] = false;
      struct sigaction current {};
      // Restored only while it is still ours (another handler set meanwhile is kept).
      if (::sigaction(kSignals[i], nullptr, &current) == 0 &&
          current.sa_handler == remove_temporaries_and_exit) {
        struct sigaction dfl {};
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        ::sigaction(kSignals[i], &dfl, nullptr);
      }
    }
  }
  RemovedOnInterrupt(const RemovedOnInterrupt&) = delete;
  RemovedOnInterrupt& operator=(const RemovedOnInterrupt&) = delete;

 private:
  std::string path_;
  int slot_ = -1;
};

}  // namespace

void write_file_atomically(const std::filesystem::path& path, const std::string& bytes,
                           const std::string& what) {
  remove_stale_temporaries(path);
  const std::filesystem::path tmp = temporary_path_for(path);
  const RemovedOnInterrupt removed_on_interrupt(tmp);  // from before it exists to the rename
  try {
    write_file_or_throw(tmp, bytes, what);
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw Error("writing " + what + " '" + path.string() + "' failed: renaming '" + tmp.string() +
                "' into place: " + std::strerror(err));
  }
}

std::filesystem::path temporary_path_for(const std::filesystem::path& target) {
  const std::string host = host_name();
  return target.string() + ".tmp" + std::to_string(::getpid()) + (host.empty() ? "" : "-" + host);
}

int remove_stale_temporaries(const std::filesystem::path& target) {
  namespace fs = std::filesystem;
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string prefix = target.filename().string() + ".tmp";
  const std::string host = host_name();
  int removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string rest = name.substr(prefix.size());
    size_t digits = 0;
    while (digits < rest.size() && std::isdigit(static_cast<unsigned char>(rest[digits]))) ++digits;
    if (digits == 0 || digits > 9) continue;
    const std::string tail = rest.substr(digits);
    if (!tail.empty() && (host.empty() || tail != "-" + host)) continue;  // another host's
    const long pid = std::stol(rest.substr(0, digits));
    if (pid == ::getpid() || process_is_running(pid)) continue;
    std::error_code ignored;
    if (!fs::is_regular_file(fs::symlink_status(it->path(), ignored))) continue;
    if (fs::remove(it->path(), ignored)) ++removed;
  }
  return removed;
}

}  // namespace gengraph

#include "framework/util/error.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iterator>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>
#include <thread>

#include "framework/util/path_errors.h"

namespace gengraph {
namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const bool same = std::tolower(a[i - 1]) == std::tolower(b[j - 1]);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (same ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::max<size_t>(3, word.size() / 3) + 1;
  for (const auto& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  const std::string best = closest_match(word, candidates);
  return best.empty() ? std::string() : " (did you mean '" + best + "'?)";
}

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

std::string path_problem(const std::error_code& ec) {
  if (ec == std::errc::too_many_symbolic_link_levels) {
    return "a symbolic link loop (too many levels of symbolic links)";
  }
  if (ec == std::errc::permission_denied || ec == std::errc::operation_not_permitted) {
    return "permission denied";
  }
  if (ec == std::errc::filename_too_long) return "the path is too long";
  if (ec == std::errc::no_such_file_or_directory) return "no such file or folder";
  if (ec == std::errc::not_a_directory) return "a part of the path is not a folder";
  if (ec == std::errc::is_a_directory) return "is a folder";
  if (ec == std::errc::no_space_on_device) return "no space left on the device";
  if (ec == std::errc::read_only_file_system) return "the file system is read-only";
  std::string m = ec.message();
  if (!m.empty()) m[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(m[0])));
  return m;
}

std::filesystem::file_status checked_status(const std::filesystem::path& path,
                                            const std::string& what) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory) {
    throw Error(what + " '" + path.string() + "': " + path_problem(ec));
  }
  return st;
}

bool checked_exists(const std::filesystem::path& path, const std::string& what) {
  return std::filesystem::exists(checked_status(path, what));
}

bool checked_is_directory(const std::filesystem::path& path, const std::string& what) {
  return std::filesystem::is_directory(checked_status(path, what));
}

std::string describe_filesystem_error(const std::filesystem::filesystem_error& e) {
  std::string paths;
  if (!e.path1().empty()) paths = "'" + e.path1().string() + "'";
  if (!e.path2().empty()) paths += (paths.empty() ? "'" : " and '") + e.path2().string() + "'";
  return (paths.empty() ? std::string("a file-system call") : paths) + ": " +
         path_problem(e.code());
}

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

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "";
  std::string h(buf);
  for (char& c : h) {
    if (c == '/' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '_';
  }
  return h;
}

bool process_is_running(long pid) {
  if (pid <= 0 || pid > std::numeric_limits<pid_t>::max()) return false;
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
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

double lock_timeout_seconds() {
  const char* v = std::getenv("GENGRAPH_LOCK_TIMEOUT_S");
  if (!v || !*v) return kDefaultLockTimeoutSeconds;
  char* end = nullptr;
  errno = 0;
  const double s = std::strtod(v, &end);
  if (errno != 0 || end == v || *end != '\0' || !std::isfinite(s) || s < 0) {
    throw Error(std::string("GENGRAPH_LOCK_TIMEOUT_S: expected a number of seconds >= 0, found '") +
                v + "'");
  }
  return s;
}

namespace {

// What a lock file records about its holder.
struct LockHolder {
  long pid = 0;
  std::string host, command, since;

  std::string describe() const {
    if (pid <= 0) return "";
    std::string d = "pid " + std::to_string(pid) + (host.empty() ? "" : " on host " + host);
    if (!command.empty()) d += " (" + command + ")";
    if (!since.empty()) d += " since " + since;
    return d;
  }
};

std::string printable(std::string s, size_t max) {
  for (char& c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  while (!s.empty() && s.back() == ' ') s.pop_back();
  if (s.size() > max) s = s.substr(0, max) + "...";
  return s;
}

std::string this_command() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return printable(s, 200);  // its NUL separators become spaces
}

std::string local_time_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

// The holder as the open lock file `fd` records it (the first 4 KB; anything unreadable: none).
LockHolder read_holder(int fd) {
  char buf[4096];
  const ssize_t n = ::pread(fd, buf, sizeof buf, 0);
  LockHolder h;
  if (n <= 0) return h;
  try {
    const auto j = nlohmann::json::parse(std::string(buf, static_cast<size_t>(n)));
    if (!j.is_object()) return h;
    if (j.contains("pid") && j["pid"].is_number_integer()) h.pid = j["pid"].get<long>();
    auto text = [&](const char* key) {
      return j.contains(key) && j[key].is_string() ? printable(j[key].get<std::string>(), 200)
                                                   : std::string();
    };
    h.host = text("host");
    h.command = text("command");
    h.since = text("since");
  } catch (const std::exception&) {
    return {};
  }
  return h;
}

bool same_file(const struct stat& a, const std::filesystem::path& path) {
  struct stat b {};
  return ::stat(path.c_str(), &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

std::string seconds_text(double s) {
  std::ostringstream o;
  o << s;
  return o.str();
}

}  // namespace

FileLock::FileLock(const std::filesystem::path& path, const std::string& what, double timeout_s,
                   std::ostream* log) {
  const auto start = std::chrono::steady_clock::now();
  const std::string file = "'" + path.string() + "'";
  bool said = false, takeover_failed = false;
  for (;;) {
    const int fd = ::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC | O_NONBLOCK, 0644);
    if (fd < 0) {
      throw Error("cannot open " + what + " " + file + ": " + std::strerror(errno));
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      throw Error(what + " " + file +
                  " is not a regular file (a FIFO, device or socket): remove it, it is remade");
    }
    bool reopen = false;
    while (!reopen) {
      if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
        if (!same_file(st, path)) {  // taken over (removed) since opened: lock the new file
          ::close(fd);
          reopen = true;
          continue;
        }
        const nlohmann::json record = {{"pid", static_cast<long>(::getpid())},
                                       {"host", host_name()},
                                       {"command", this_command()},
                                       {"since", local_time_now()}};
        const std::string text = record.dump() + "\n";
        if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, text.data(), text.size(), 0) < 0) {
          // The record only informs waiters; the lock itself is held.
        }
        fd_ = fd;
        return;
      }
      if (errno == EINTR) continue;
      if (errno != EWOULDBLOCK) {
        const int err = errno;
        ::close(fd);
        throw Error("cannot lock " + what + " " + file + ": " + std::strerror(err));
      }
      const LockHolder holder = read_holder(fd);
      const std::string who = holder.describe().empty() ? "another process" : holder.describe();
      if (!takeover_failed && holder.pid > 0 && !holder.host.empty() &&
          holder.host == host_name() && !process_is_running(holder.pid)) {
        // The recorded holder is gone; a process it started holds the lock on. Remove the file
        // (others waiting on it notice and reopen), then lock a fresh one.
        if (same_file(st, path) && ::unlink(path.c_str()) != 0) {
          takeover_failed = true;
        } else {
          if (log) {
            *log << "gengraph: " << what << " " << file << " was held by " << who
                 << ", which is no longer running: taking it over\n";
          }
          ::close(fd);
          reopen = true;
          continue;
        }
      }
      if (!same_file(st, path)) {  // removed or replaced by a process that took it over
        ::close(fd);
        reopen = true;
        continue;
      }
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (waited >= timeout_s) {
        ::close(fd);
        const bool here = !holder.host.empty() && holder.host == host_name();
        throw Error("timed out after " + seconds_text(timeout_s) + " s waiting for " + what + " " +
                    file + ", held by " + who + ". " +
                    (here && process_is_running(holder.pid)
                         ? "That process is still running: wait for it to finish or stop it"
                         : "If that process is gone, remove " + file) +
                    "; GENGRAPH_LOCK_TIMEOUT_S sets how long to wait (now " +
                    seconds_text(timeout_s) + " s)");
      }
      if (!said && log) {
        // How long first: the path and the holder's command can fill a terminal line.
        *log << "gengraph: waiting for " << what << " for up to " << seconds_text(timeout_s)
             << " s (GENGRAPH_LOCK_TIMEOUT_S sets it): " << file << " is held by " << who << "\n";
        log->flush();
        said = true;
      }
      const double left = timeout_s - waited;
      std::this_thread::sleep_for(std::chrono::duration<double>(std::min(0.1, left)));
    }
  }
}

FileLock::~FileLock() {
  if (fd_ < 0) return;
  if (::ftruncate(fd_, 0) != 0) {
    // The record of a released lock only misleads a reader until the next holder rewrites it.
  }
  ::close(fd_);  // releases the lock
}

std::string FileLock::holder_of(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return "";
  struct stat st {};
  std::string who;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) who = read_holder(fd).describe();
  ::close(fd);
  return who;
}

}  // namespace gengraph

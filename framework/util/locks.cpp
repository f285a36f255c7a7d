#include "framework/util/locks.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>
#include <thread>

#include "framework/util/error.h"
#include "framework/util/files.h"
#include "framework/util/process_checks.h"

namespace gengraph {

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

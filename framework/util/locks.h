// FileLock: an exclusive lock on a file between processes, with its holder recorded, waited for
// with a timeout, and taken over from a holder that is gone.
#pragma once

#include <filesystem>
#include <iosfwd>
#include <string>

namespace gengraph {

// How long a FileLock waits for its holder: $GENGRAPH_LOCK_TIMEOUT_S seconds (a number >= 0), by
// default kDefaultLockTimeoutSeconds. An Error names the variable when its value is not a number.
constexpr double kDefaultLockTimeoutSeconds = 600;
double lock_timeout_seconds();

// An exclusive advisory lock (flock) on the file `path`, created if missing and released on
// destruction, so that processes that would make the same thing (a package in a cache) make it
// once. The holder records its pid, host, start time and command in the file. A process that
// finds the lock held says on `log` (when not null), once, whom it waits for; takes the lock over
// when the holder is a process of this host that is no longer running (its lock then lives on in
// a child that inherited it); and after `timeout_s` throws an Error naming `what`, the file, the
// holder and what to do. `path` must be a regular file if it exists (a FIFO is refused, not
// opened for good).
class FileLock {
 public:
  FileLock(const std::filesystem::path& path, const std::string& what,
           double timeout_s = lock_timeout_seconds(), std::ostream* log = nullptr);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

  // Who holds the lock on `path` as its file records it, e.g. "pid 12 on host h (gengraph run
  // x.yaml) since 2026-01-02 10:11:12", or "" when the file is missing or records no one.
  static std::string holder_of(const std::filesystem::path& path);

 private:
  int fd_ = -1;
};

}  // namespace gengraph

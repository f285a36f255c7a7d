// Errors and small string helpers shared by the whole framework.
#pragma once

#include <gengraph/error.h>  // Error, the one exception type (public)

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <stdexcept>
#include <string>
#include <vector>

namespace gengraph {

// The candidate closest to `word` by edit distance, or "" when none is reasonably close.
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

// "unknown key 'foo'" + " (did you mean 'bar'?)" when a close candidate exists.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

std::string join(const std::vector<std::string>& parts, const std::string& sep);

// Ends the registries' "unknown ..." errors: how a part from a plug-in library is loaded
// (gengraph --plugin, GENGRAPH_PLUGINS, load_plugin; <gengraph/plugin.h>).
std::string plugin_hint();

// The size cap for a configuration document read whole (experiment YAML, config.json, a results
// file, a safetensors index): far above any real one.
constexpr std::uintmax_t kMaxDocumentBytes = 64u << 20;

// Throws an Error unless `path` is a regular file, before anything opens it (opening a FIFO can
// block forever): "cannot read WHAT: file missing or unreadable (...)", "WHAT is a folder,
// expected EXPECTED", or "WHAT is not a regular file (a FIFO, device or socket), expected
// EXPECTED". `what` names the file (e.g. "trace file 'a.pt'").
void check_regular_file(const std::filesystem::path& path, const std::string& what,
                        const std::string& expected);

// The whole of a regular file. Refused before it is opened when it is not one: a folder, or a
// FIFO, device or socket (opening or reading one can block forever), or when it is larger than
// `max_bytes`. Errors begin with `what` (e.g. "experiment file 'run.yaml'"), say what was
// expected (`expected`, e.g. "a JSON file") and give the system's reason.
std::string read_regular_file(const std::filesystem::path& path, const std::string& what,
                              const std::string& expected, std::uintmax_t max_bytes);

// Writes `bytes` to `path` (created or truncated) and closes it; an Error names `what`, the path
// and the system's reason (a full disk: "No space left on device").
void write_file_or_throw(const std::filesystem::path& path, const std::string& bytes,
                         const std::string& what);

// Writes `bytes` to a temporary file beside `path`, then renames it over `path`: a reader never
// sees a half-written file, and on any failure (a full disk, a missing permission) the temporary
// file is removed and the Error names `what`, the path and the system's reason. The temporary
// file is temporary_path_for(path); the temporaries of `path` that writers killed before they
// could clean up left behind are removed first (remove_stale_temporaries).
void write_file_atomically(const std::filesystem::path& path, const std::string& bytes,
                           const std::string& what);

// This machine's host name ("" if the system gives none).
std::string host_name();

// Whether a process `pid` runs on this host (one of another user counts).
bool process_is_running(long pid);

// The temporary file a writer in this process uses for `target`: "TARGET.tmpPID-HOST".
std::filesystem::path temporary_path_for(const std::filesystem::path& target);

// Removes the temporaries of `target` ("TARGET.tmpPID-HOST", or "TARGET.tmpPID" of earlier
// versions) whose writer was on this host and is no longer running: a writer killed by SIGKILL
// cannot remove its own. Another host's are kept (its pid means nothing here). Returns how many
// were removed.
int remove_stale_temporaries(const std::filesystem::path& target);

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

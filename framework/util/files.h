// Files read and written safely: regular files only (a FIFO is never opened for good), a size cap
// on documents read whole, writes that name the file and the system's reason, and atomic writes
// through a temporary that an interrupt or a later writer removes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace gengraph {

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

// The temporary file a writer in this process uses for `target`: "TARGET.tmpPID-HOST".
std::filesystem::path temporary_path_for(const std::filesystem::path& target);

// Removes the temporaries of `target` ("TARGET.tmpPID-HOST", or "TARGET.tmpPID" of earlier
// versions) whose writer was on this host and is no longer running: a writer killed by SIGKILL
// cannot remove its own. Another host's are kept (its pid means nothing here). Returns how many
// were removed.
int remove_stale_temporaries(const std::filesystem::path& target);

}  // namespace gengraph

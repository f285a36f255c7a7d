// Errors and small string helpers shared by the whole framework.
#pragma once

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace gengraph {

// Every user-facing failure (bad config, bad file, bad tensor) is a gengraph::Error whose message
// names the file/key/tensor, what was expected and what was found. Library code never exits.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The candidate closest to `word` by edit distance, or "" when none is reasonably close.
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

// "unknown key 'foo'" + " (did you mean 'bar'?)" when a close candidate exists.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

std::string join(const std::vector<std::string>& parts, const std::string& sep);

// The size cap for a configuration document read whole (experiment YAML, config.json, a results
// file, a safetensors index): far above any real one.
constexpr std::uintmax_t kMaxDocumentBytes = 64u << 20;

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
// file is removed and the Error names `what`, the path and the system's reason.
void write_file_atomically(const std::filesystem::path& path, const std::string& bytes,
                           const std::string& what);

}  // namespace gengraph

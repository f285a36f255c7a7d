#include "framework/util/error.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

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

std::string read_regular_file(const std::filesystem::path& path, const std::string& what,
                              const std::string& expected, std::uintmax_t max_bytes) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(st)) {
    throw Error("cannot read " + what + ": file missing or unreadable (" +
                (ec ? ec.message() : std::string("no such file")) + ")");
  }
  if (std::filesystem::is_directory(st)) throw Error(what + " is a folder, expected " + expected);
  if (!std::filesystem::is_regular_file(st)) {
    throw Error(what + " is not a regular file (a FIFO, device or socket), expected " + expected);
  }
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

void write_file_atomically(const std::filesystem::path& path, const std::string& bytes,
                           const std::string& what) {
  const std::filesystem::path tmp = path.string() + ".tmp" + std::to_string(::getpid());
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

}  // namespace gengraph

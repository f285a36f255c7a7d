#include "framework/util/path_errors.h"

#include <cctype>

#include "framework/util/error.h"

namespace gengraph {

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

}  // namespace gengraph

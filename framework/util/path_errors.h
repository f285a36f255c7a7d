// File-system failures on the paths people give (model folders, experiment files, outputs, cache
// folders) in our words, naming the path and what it was for. std::filesystem's throwing calls
// say "filesystem error: status: Too many levels of symbolic links [path]"; these say
// "model folder 'm': a symbolic link loop (too many levels of symbolic links)". Implemented in
// path_errors.cpp.
#pragma once

#include <filesystem>
#include <string>
#include <system_error>

namespace gengraph {

// The reason for a failed file-system call in our words: "a symbolic link loop (too many levels
// of symbolic links)", "permission denied", "the path is too long", ...; else the system's text.
std::string path_problem(const std::error_code& ec);

// What is at `path`, links followed: its status, with file_type::not_found when nothing is there
// (nothing of that name, or a part of the path that is not a folder). Any other failure (a link
// loop, a folder above that cannot be searched) throws an Error: "<what> '<path>': <problem>".
std::filesystem::file_status checked_status(const std::filesystem::path& path,
                                            const std::string& what);
bool checked_exists(const std::filesystem::path& path, const std::string& what);
bool checked_is_directory(const std::filesystem::path& path, const std::string& what);

// A std::filesystem::filesystem_error that got through, in our words: "'<path>': <problem>"
// (both paths when it names two), never "filesystem error: ...".
std::string describe_filesystem_error(const std::filesystem::filesystem_error& e);

}  // namespace gengraph

// Checking an AOTInductor package without loading it (check_aoti_package): its zip directory, the
// entries LibTorch's loader unpacks, the program's ELF structure, the metadata and the manifest's
// SHA-256 digests. check_aoti_package is also what the tests and the fuzz target call; the rest is
// internal to backends/aoti.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <unordered_map>
#include <vector>

namespace gengraph {

class JsonAt;

struct ZipEntry {
  std::string name;
  uint16_t method = 0;
  uint64_t compressed = 0, size = 0, local = 0, data = 0;  // data: where its bytes begin
};

// What a package holds, as far as LibTorch's loader reads it.
struct PackageLayout {
  std::vector<ZipEntry> entries;
  std::string model_dir;                              // "<prefix>data/aotinductor/model"
  std::unordered_map<std::string, std::string> meta;  // the wrapper's metadata (gengraph.*)
  bool manifest_verified = false;  // every loaded entry matched its SHA-256 in the manifest
};

// Reads the zip directory of the package at `path` and checks, without loading anything, what
// LibTorch's loader relies on: every entry inside the file, the entries it unpacks stored (not
// compressed) and named inside its folder, a program (.so) that is a whole shared library for
// this machine, its metadata. With `hash`, the entries are compared with the manifest's SHA-256
// digests when the package has one. Throws Error naming the file and the fault.
PackageLayout inspect_package(const std::filesystem::path& path, bool hash);

// A SHA-256 digest as the manifest and the build record hold it: 64 lower-case hex digits.
std::string sha256_digest(const JsonAt& v);

// The SHA-256 of a whole file, as 64 lower-case hex digits.
std::string sha256_of_file(const std::filesystem::path& path);

// Checks the file at `path` as an AOTInductor package without loading anything from it, so that
// what would take the process down in LibTorch's loader (SIGBUS, SIGSEGV) or hang it is refused
// first: a regular file (a FIFO is not opened for good); a zip directory that fits in the file,
// every entry inside it, named inside the package; the files the loader unpacks stored, not
// compressed; the program (.so) a whole ELF shared library for this machine (its segments, dynamic
// section, relocation targets inside it); the metadata JSON objects of strings; and, when the
// package has the manifest tools/export_aoti.py writes (gengraph/manifest.json), every file it
// lists matching its SHA-256. Throws Error naming the file and the fault. For a fuzz target too:
// any bytes give a result or an Error.
void check_aoti_package(const std::filesystem::path& path);

}  // namespace gengraph

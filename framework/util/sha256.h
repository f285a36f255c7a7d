// SHA-256 (FIPS 180-4): the checksums of the aoti backend's cached packages and of the real
// models' converted files (framework/model/known_models.cpp). Hashing is done only where a
// file's record says it may have changed; this is not meant for hot paths.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace gengraph {

class Sha256 {
 public:
  void update(const unsigned char* p, size_t n);

  // The digest in lower-case hex; the object is spent afterwards.
  std::string hex();

 private:
  void block(const unsigned char* p);

  uint32_t h_[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  unsigned char buf_[64] = {};
  size_t used_ = 0;
  uint64_t bytes_ = 0;
};

// The SHA-256 of the whole regular file `path`, as 64 lower-case hex digits. The file is opened
// without blocking and refused unless regular (a FIFO cannot hang the reader). Throws an Error
// beginning with `what` (e.g. "'model.safetensors'") and giving the system's reason.
std::string file_sha256(const std::filesystem::path& path, const std::string& what);

}  // namespace gengraph

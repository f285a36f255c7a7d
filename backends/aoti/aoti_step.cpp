#include "backends/aoti/aoti_step.h"

#include <ATen/ATen.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/headeronly/version.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "backends/trace/traced_step.h"
#include "framework/backend/options.h"
#include "framework/kernels/weight_only.h"
#include "framework/model/causal_lm.h"
#include "framework/util/clock.h"
#include "framework/util/device.h"
#include "framework/util/error.h"
#include "framework/util/json_at.h"

namespace gengraph {
namespace {

std::mutex g_builder_mutex;
struct BuilderSlot {
  AotiPackageBuilder build;
  std::string identity;
};
BuilderSlot& builder_slot() {
  static BuilderSlot slot;
  return slot;
}

// The first line of an exception's text (LibTorch's carry a C++ backtrace after it).
std::string first_line(const std::string& what) { return what.substr(0, what.find('\n')); }

std::string device_kind(const c10::Device& d) { return d.is_cuda() ? "cuda" : d.str(); }

// The file of the shared library this code is in (libgengraph_core.so), which registers gengraph's
// operators: the exporter of a quantized model loads it into its Python.
std::string core_library_path() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&kernels::vectorized), &info) == 0 || !info.dli_fname)
    return "";
  return std::filesystem::absolute(info.dli_fname).string();
}

std::filesystem::path sidecar(const std::filesystem::path& package) {
  return package.string() + ".build.json";
}

// SHA-256 (FIPS 180-4): the packages' checksums, recorded when one is built and in its manifest.
class Sha256 {
 public:
  void update(const unsigned char* p, size_t n) {
    bytes_ += n;
    if (used_ > 0) {
      const size_t take = std::min(n, sizeof buf_ - used_);
      std::memcpy(buf_ + used_, p, take);
      used_ += take;
      p += take;
      n -= take;
      if (used_ < sizeof buf_) return;
      block(buf_);
      used_ = 0;
    }
    for (; n >= 64; p += 64, n -= 64) block(p);
    if (n > 0) {
      std::memcpy(buf_, p, n);
      used_ = n;
    }
  }

  // The digest in lower-case hex; the object is spent afterwards.
  std::string hex() {
    const uint64_t bits = bytes_ * 8;
    const unsigned char one = 0x80, zero = 0;
    update(&one, 1);
    while (used_ != 56) update(&zero, 1);
    unsigned char length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(bits >> (56 - 8 * i));
    update(length, 8);
    char out[65];
    for (int i = 0; i < 8; ++i) std::snprintf(out + 8 * i, 9, "%08x", h_[i]);
    return std::string(out, 64);
  }

 private:
  static uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

  void block(const unsigned char* p) {
    static constexpr uint32_t k[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2};
    uint32_t w[64];
    for (int i = 0; i < 16; ++i) {
      w[i] = uint32_t(p[4 * i]) << 24 | uint32_t(p[4 * i + 1]) << 16 | uint32_t(p[4 * i + 2]) << 8 |
             uint32_t(p[4 * i + 3]);
    }
    for (int i = 16; i < 64; ++i) {
      const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
    for (int i = 0; i < 64; ++i) {
      const uint32_t t1 =
          h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
      const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    h_[0] += a;
    h_[1] += b;
    h_[2] += c;
    h_[3] += d;
    h_[4] += e;
    h_[5] += f;
    h_[6] += g;
    h_[7] += h;
  }

  uint32_t h_[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  unsigned char buf_[64] = {};
  size_t used_ = 0;
  uint64_t bytes_ = 0;
};

// A package file opened for reading: refused unless regular (opened non-blocking, then checked,
// so that a FIFO in its place cannot block), read at offsets with every range checked.
class PackageFile {
 public:
  explicit PackageFile(const std::filesystem::path& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd_ < 0) {
      throw Error("cannot read AOTInductor package '" + path.string() +
                  "': " + std::strerror(errno));
    }
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd_);
      throw Error("AOTInductor package '" + path.string() +
                  "' is not a regular file (a FIFO, device, socket or folder)");
    }
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~PackageFile() { ::close(fd_); }
  PackageFile(const PackageFile&) = delete;
  PackageFile& operator=(const PackageFile&) = delete;

  uint64_t size() const { return size_; }

  // `n` bytes at `offset`; false when the file ends sooner or cannot be read.
  bool read(uint64_t offset, void* dst, uint64_t n) const {
    if (offset > size_ || n > size_ - offset) return false;
    auto* out = static_cast<char*>(dst);
    while (n > 0) {
      const ssize_t got = ::pread(fd_, out, std::min<uint64_t>(n, 1 << 24), offset);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return false;
      out += got;
      offset += static_cast<uint64_t>(got);
      n -= static_cast<uint64_t>(got);
    }
    return true;
  }

  // The SHA-256 of `n` bytes at `offset`, read in pieces; "" when they cannot be read.
  std::string sha256(uint64_t offset, uint64_t n) const {
    Sha256 h;
    std::vector<unsigned char> buf(1 << 20);
    while (n > 0) {
      const uint64_t piece = std::min<uint64_t>(n, buf.size());
      if (!read(offset, buf.data(), piece)) return "";
      h.update(buf.data(), piece);
      offset += piece;
      n -= piece;
    }
    return h.hex();
  }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

uint16_t le16(const unsigned char* p) { return uint16_t(p[0] | p[1] << 8); }
uint32_t le32(const unsigned char* p) { return uint32_t(le16(p)) | uint32_t(le16(p + 2)) << 16; }
uint64_t le64(const unsigned char* p) { return uint64_t(le32(p)) | uint64_t(le32(p + 4)) << 32; }

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

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

// The manifest tools/export_aoti.py adds: {"format": 1, "sha256": {entry name: hex digest}}.
constexpr const char* kManifestName = "gengraph/manifest.json";

#if defined(__x86_64__)
constexpr int kHostMachine = EM_X86_64;
#elif defined(__aarch64__)
constexpr int kHostMachine = EM_AARCH64;
#else
constexpr int kHostMachine = 0;  // not checked
#endif

// Checks the package's shared library `e` as the dynamic linker will map it: a truncated or
// damaged one is mapped past its end (SIGBUS) or relocated through garbage (SIGSEGV).
void check_program(const PackageFile& f, const ZipEntry& e,
                   const std::function<Error(const std::string&)>& damaged) {
  const std::string what = "its program '" + e.name + "' (" + std::to_string(e.size) + " bytes)";
  const auto within = [&](uint64_t off, uint64_t len) {
    return off <= e.size && len <= e.size - off;
  };
  Elf64_Ehdr h{};
  if (e.size < sizeof h || !f.read(e.data, &h, sizeof h) ||
      std::memcmp(h.e_ident, ELFMAG, SELFMAG) != 0) {
    throw damaged(what + " is not an ELF shared library");
  }
  if (h.e_ident[EI_CLASS] != ELFCLASS64 || h.e_ident[EI_DATA] != ELFDATA2LSB || h.e_type != ET_DYN)
    throw damaged(what + " is not a 64-bit little-endian ELF shared library");
  if (kHostMachine != 0 && h.e_machine != kHostMachine) {
    throw damaged(what + " was built for another machine (ELF machine " +
                  std::to_string(h.e_machine) + ", this one is " + std::to_string(kHostMachine) +
                  ")");
  }
  if (h.e_phentsize != sizeof(Elf64_Phdr) || h.e_phnum == 0 || h.e_phnum >= PN_XNUM ||
      !within(h.e_phoff, uint64_t(h.e_phnum) * sizeof(Elf64_Phdr))) {
    throw damaged(what + " has its program headers missing or past its end (truncated?)");
  }
  if (h.e_shoff != 0 && !within(h.e_shoff, uint64_t(h.e_shnum) * h.e_shentsize)) {
    throw damaged(what + " ends before its section headers at byte " + std::to_string(h.e_shoff) +
                  ": it is truncated");
  }
  std::vector<Elf64_Phdr> ph(h.e_phnum);
  if (!f.read(e.data + h.e_phoff, ph.data(), ph.size() * sizeof(Elf64_Phdr)))
    throw damaged(what + ": its program headers cannot be read");
  const Elf64_Phdr* dynamic = nullptr;
  int loads = 0;
  for (const auto& p : ph) {
    if (p.p_type != PT_LOAD && p.p_type != PT_DYNAMIC) continue;
    if (!within(p.p_offset, p.p_filesz)) {
      throw damaged(what + " is truncated: a segment needs its bytes up to " +
                    std::to_string(p.p_offset + p.p_filesz));
    }
    if (p.p_type == PT_LOAD) {
      ++loads;
      if (p.p_filesz > p.p_memsz)
        throw damaged(what + " has a segment larger in the file than mapped");
    } else {
      dynamic = &p;
    }
  }
  if (loads == 0 || dynamic == nullptr) throw damaged(what + " has no loadable or dynamic segment");
  // An address range the file backs (read by the dynamic linker), or that is mapped at all.
  const auto in_file = [&](uint64_t addr, uint64_t len) {
    return std::any_of(ph.begin(), ph.end(), [&](const Elf64_Phdr& p) {
      return p.p_type == PT_LOAD && addr >= p.p_vaddr && addr - p.p_vaddr <= p.p_filesz &&
             len <= p.p_filesz - (addr - p.p_vaddr);
    });
  };
  const auto mapped = [&](uint64_t addr, uint64_t len) {
    return std::any_of(ph.begin(), ph.end(), [&](const Elf64_Phdr& p) {
      return p.p_type == PT_LOAD && addr >= p.p_vaddr && addr - p.p_vaddr <= p.p_memsz &&
             len <= p.p_memsz - (addr - p.p_vaddr);
    });
  };
  const uint64_t n_dyn = std::min<uint64_t>(dynamic->p_filesz / sizeof(Elf64_Dyn), 1 << 16);
  std::vector<Elf64_Dyn> dyn(n_dyn);
  if (!f.read(e.data + dynamic->p_offset, dyn.data(), n_dyn * sizeof(Elf64_Dyn)))
    throw damaged(what + ": its dynamic section cannot be read");
  std::map<int64_t, uint64_t> tag;
  bool terminated = false;
  for (const auto& d : dyn) {
    if (d.d_tag == DT_NULL) {
      terminated = true;
      break;
    }
    tag.emplace(d.d_tag, d.d_un.d_val);
  }
  const auto bad = [&](const std::string& part) {
    return damaged(what + " is damaged: its dynamic section's " + part);
  };
  if (!terminated) throw bad("list has no end");
  if (!tag.count(DT_STRTAB) || !tag.count(DT_SYMTAB) || !tag.count(DT_STRSZ))
    throw bad("symbol or string table is missing");
  if (!in_file(tag[DT_STRTAB], tag[DT_STRSZ]) || !in_file(tag[DT_SYMTAB], sizeof(Elf64_Sym)))
    throw bad("symbol or string table lies outside the file");
  for (const int64_t t : {DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH}) {
    auto it = tag.find(t);
    if (it != tag.end() && it->second >= tag[DT_STRSZ]) throw bad("library names lie outside it");
  }
  for (const int64_t t : {DT_GNU_HASH, DT_HASH}) {
    if (tag.count(t) && !in_file(tag[t], 16)) throw bad("hash table lies outside the file");
  }
  for (const int64_t t : {DT_INIT, DT_FINI}) {
    if (tag.count(t) && !mapped(tag[t], 1)) throw bad("init or fini address lies outside it");
  }
  if (tag.count(DT_RELAENT) && tag[DT_RELAENT] != sizeof(Elf64_Rela)) throw bad("relocation size");
  // Tables the dynamic linker reads ((address, size) tags), and the relocations' targets.
  const std::pair<int64_t, int64_t> tables[] = {{DT_RELA, DT_RELASZ},
                                                {DT_JMPREL, DT_PLTRELSZ},
                                                {DT_INIT_ARRAY, DT_INIT_ARRAYSZ},
                                                {DT_FINI_ARRAY, DT_FINI_ARRAYSZ}};
  for (const auto& [addr, size] : tables) {
    if (!tag.count(addr)) continue;
    if (!tag.count(size) || !in_file(tag[addr], tag[size]))
      throw bad("tables lie outside the file");
  }
  for (const int64_t t : {DT_RELA, DT_JMPREL}) {
    if (!tag.count(t)) continue;
    const uint64_t addr = tag[t], bytes = tag[t == DT_RELA ? DT_RELASZ : DT_PLTRELSZ];
    // The file offset of the table, in a segment that holds it whole (in_file found one).
    uint64_t offset = 0;
    for (const auto& p : ph) {
      if (p.p_type == PT_LOAD && addr >= p.p_vaddr && addr - p.p_vaddr <= p.p_filesz &&
          bytes <= p.p_filesz - (addr - p.p_vaddr)) {
        offset = p.p_offset + (addr - p.p_vaddr);
      }
    }
    std::vector<Elf64_Rela> rela(bytes / sizeof(Elf64_Rela));
    if (!f.read(e.data + offset, rela.data(), rela.size() * sizeof(Elf64_Rela)))
      throw bad("relocations cannot be read");
    for (const auto& r : rela) {
      if (!mapped(r.r_offset, 8)) throw bad("relocations write outside the library");
    }
  }
}

// A JSON object of strings at most 1 MB, from the package's entry `e`.
std::unordered_map<std::string, std::string> read_string_map(
    const PackageFile& f, const ZipEntry& e,
    const std::function<Error(const std::string&)>& damaged) {
  if (e.size > (1 << 20)) throw damaged("'" + e.name + "' is larger than 1 MB");
  std::string text(e.size, '\0');
  if (!f.read(e.data, text.data(), e.size)) throw damaged("'" + e.name + "' cannot be read");
  std::unordered_map<std::string, std::string> out;
  try {
    const std::string source = "'" + e.name + "'";
    const nlohmann::json j = parse_json_text(text, source);
    const JsonAt doc(j, source);
    doc.object("an object of strings");
    for (const auto& item : j.items()) out[item.key()] = doc[item.key()].string();
  } catch (const Error& ex) {  // the entry's name, the key, what was expected and found
    throw damaged(ex.what());
  }
  return out;
}

// A SHA-256 digest as the manifest and the build record hold it: 64 lower-case hex digits.
std::string sha256_digest(const JsonAt& v) {
  const std::string expected = "a SHA-256 digest (64 lower-case hex digits)";
  const std::string d = v.string(expected);
  if (d.size() != 64 || d.find_first_not_of("0123456789abcdef") != std::string::npos)
    v.fail(expected);
  return d;
}

// Reads the zip directory of the package at `path` and checks, without loading anything, what
// LibTorch's loader relies on: every entry inside the file, the entries it unpacks stored (not
// compressed) and named inside its folder, a program (.so) that is a whole shared library for
// this machine, its metadata. With `hash`, the entries are compared with the manifest's SHA-256
// digests when the package has one. Throws Error naming the file and the fault.
PackageLayout inspect_package(const std::filesystem::path& path, bool hash) {
  const PackageFile f(path);
  const std::string file = "'" + path.string() + "'";
  const auto damaged = [&](std::string why) {
    // Entry names and parser messages come from the file: shown in printable ASCII.
    for (char& c : why) {
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
    }
    if (why.size() > 1000) why = why.substr(0, 1000) + "...";
    return Error("AOTInductor package " + file + " is damaged: " + why);
  };
  const auto not_zip = [&](const std::string& why) {
    return Error(file + " is not a readable AOTInductor package (" + why + ")");
  };
  // The end of central directory record: the last 22 bytes, or before a comment.
  const uint64_t tail_size = std::min<uint64_t>(f.size(), 22 + 0xffff);
  if (tail_size < 22) throw not_zip("not a zip archive: " + std::to_string(f.size()) + " bytes");
  std::vector<unsigned char> tail(tail_size);
  if (!f.read(f.size() - tail_size, tail.data(), tail_size)) throw not_zip("cannot be read");
  int64_t at = -1;
  for (int64_t i = static_cast<int64_t>(tail_size) - 22; i >= 0; --i) {
    if (le32(&tail[i]) == 0x06054b50 && i + 22 + le16(&tail[i + 20]) <= int64_t(tail_size)) {
      at = i;
      break;
    }
  }
  if (at < 0) throw not_zip("not a zip archive, or one cut short: no zip directory at its end");
  const unsigned char* eocd = &tail[at];
  const uint64_t eocd_pos = f.size() - tail_size + static_cast<uint64_t>(at);
  uint64_t count = le16(eocd + 10), cd_size = le32(eocd + 12), cd_offset = le32(eocd + 16);
  uint64_t cd_end_limit = eocd_pos;
  if (le16(eocd + 4) != 0 || le16(eocd + 6) != 0) throw not_zip("a multi-part zip archive");
  if (count == 0xffff || cd_size == 0xffffffff || cd_offset == 0xffffffff) {  // zip64
    unsigned char loc[20], z[56];
    if (eocd_pos < 20 || !f.read(eocd_pos - 20, loc, 20) || le32(loc) != 0x07064b50)
      throw damaged("its zip64 directory locator is missing");
    const uint64_t z_pos = le64(loc + 8);
    if (z_pos > eocd_pos - 20 || !f.read(z_pos, z, 56) || le32(z) != 0x06064b50)
      throw damaged("its zip64 directory record is missing");
    count = le64(z + 32);
    cd_size = le64(z + 40);
    cd_offset = le64(z + 48);
    cd_end_limit = z_pos;
  }
  if (cd_offset > cd_end_limit || cd_size > cd_end_limit - cd_offset || cd_size > (256u << 20) ||
      count > cd_size / 46) {
    throw damaged("its zip directory (" + std::to_string(count) + " entries, " +
                  std::to_string(cd_size) + " bytes at " + std::to_string(cd_offset) +
                  ") does not fit in the file (" + std::to_string(f.size()) +
                  " bytes): cut short?");
  }
  std::vector<unsigned char> cd(cd_size);
  if (!f.read(cd_offset, cd.data(), cd_size)) throw damaged("its zip directory cannot be read");
  PackageLayout layout;
  std::unordered_set<std::string> names;
  uint64_t pos = 0;
  for (uint64_t i = 0; i < count; ++i) {
    if (pos + 46 > cd_size || le32(&cd[pos]) != 0x02014b50)
      throw damaged("zip directory entry " + std::to_string(i) + " is malformed");
    const unsigned char* c = &cd[pos];
    const uint64_t n = le16(c + 28), x = le16(c + 30), m = le16(c + 32);
    if (pos + 46 + n + x + m > cd_size)
      throw damaged("zip directory entry " + std::to_string(i) + " runs past the directory");
    ZipEntry e;
    e.name.assign(reinterpret_cast<const char*>(c + 46), n);
    e.method = le16(c + 10);
    e.compressed = le32(c + 20);
    e.size = le32(c + 24);
    e.local = le32(c + 42);
    for (uint64_t q = pos + 46 + n; q + 4 <= pos + 46 + n + x;) {  // the zip64 extra field
      const uint16_t id = le16(&cd[q]), len = le16(&cd[q + 2]);
      if (q + 4 + len > pos + 46 + n + x) break;
      if (id == 0x0001) {
        uint64_t r = q + 4;
        const uint64_t end = q + 4 + len;
        for (uint64_t* v : {&e.size, &e.compressed, &e.local}) {
          if (*v != 0xffffffff) continue;
          if (r + 8 > end) throw damaged("'" + e.name + "' has a short zip64 field");
          *v = le64(&cd[r]);
          r += 8;
        }
      }
      q += 4 + len;
    }
    pos += 46 + n + x + m;
    const std::string where = "entry '" + e.name + "'";
    if (e.name.empty() || e.name.find('\0') != std::string::npos ||
        e.name.find('\\') != std::string::npos || e.name.front() == '/' ||
        ("/" + e.name + "/").find("/../") != std::string::npos) {
      throw damaged(where + " is not a relative path inside the package");
    }
    if (!names.insert(e.name).second) throw damaged(where + " appears twice");
    if (le16(c + 8) & 1) throw damaged(where + " is encrypted");
    unsigned char l[30];
    if (e.local > cd_offset || cd_offset - e.local < 30 || !f.read(e.local, l, 30) ||
        le32(l) != 0x04034b50) {
      throw damaged(where + " has no header at byte " + std::to_string(e.local));
    }
    const uint64_t ln = le16(l + 26), lx = le16(l + 28);
    std::string local_name(ln, '\0');
    if (!f.read(e.local + 30, local_name.data(), ln) || local_name != e.name)
      throw damaged(where + ": its header names another file");
    e.data = e.local + 30 + ln + lx;
    if (e.data > cd_offset || e.compressed > cd_offset - e.data) {
      throw damaged(where + " needs " + std::to_string(e.compressed) + " bytes from byte " +
                    std::to_string(e.data) + ", past the end of the data: cut short?");
    }
    if (e.method == 0 && e.compressed != e.size)
      throw damaged(where + " is stored with two sizes, " + std::to_string(e.compressed) + " and " +
                    std::to_string(e.size));
    layout.entries.push_back(std::move(e));
  }
  const auto& es = layout.entries;
  if (es.size() < 2) throw damaged("it holds " + std::to_string(es.size()) + " file(s)");
  // The loader's reading: a common first folder of the first two entries is the prefix.
  const std::string p0 = es[0].name.substr(0, es[0].name.find('/'));
  const std::string p1 = es[1].name.substr(0, es[1].name.find('/'));
  const std::string prefix = !p0.empty() && p0 == p1 ? p0 + "/" : "";
  layout.model_dir = prefix + "data/aotinductor/model";
  const std::string const_dir = prefix + "data/constants";
  const ZipEntry *so = nullptr, *cpp = nullptr, *wrapper_meta = nullptr, *manifest = nullptr;
  std::map<std::string, const ZipEntry*> by_name;
  for (const auto& e : es) {
    by_name[e.name] = &e;
    if (e.name == prefix + kManifestName) manifest = &e;
    if (!starts_with(e.name, layout.model_dir) && !starts_with(e.name, const_dir)) continue;
    if (e.method != 0) {
      throw damaged("'" + e.name +
                    "' is compressed; AOTInductor packages store the files the loader unpacks "
                    "(make it again with tools/export_aoti.py)");
    }
    if (!starts_with(e.name, layout.model_dir)) continue;
    if (ends_with(e.name, ".so")) so = &e;
    if (ends_with(e.name, ".cpp")) cpp = &e;
    if (!wrapper_meta && ends_with(e.name, "wrapper_metadata.json")) wrapper_meta = &e;
  }
  if (!so) throw damaged("it has no compiled program (" + layout.model_dir + "/*.so)");
  if (!cpp || !wrapper_meta)
    throw damaged("it lacks the program's source or metadata (" + layout.model_dir + ")");
  // The loader reads the device from the metadata beside the last source file.
  const std::string cpp_meta = cpp->name.substr(0, cpp->name.size() - 4) + "_metadata.json";
  if (!by_name.count(cpp_meta)) throw damaged("it lacks '" + cpp_meta + "'");
  if (read_string_map(f, *by_name[cpp_meta], damaged)["AOTI_DEVICE_KEY"].empty())
    throw damaged("'" + cpp_meta + "' names no device (AOTI_DEVICE_KEY)");
  layout.meta = read_string_map(f, *wrapper_meta, damaged);

  if (manifest) {
    const auto digests = [&] {
      if (manifest->method != 0 || manifest->size > (16u << 20))
        throw damaged("its manifest '" + manifest->name + "' is compressed or too large");
      std::string text(manifest->size, '\0');
      if (!f.read(manifest->data, text.data(), text.size()))
        throw damaged("its manifest cannot be read");
      try {
        const std::string source = "its manifest '" + manifest->name + "'";
        const nlohmann::json j = parse_json_text(text, source);
        const JsonAt doc(j, source);
        doc.object("a gengraph package manifest (an object)");
        const JsonAt sums = doc["sha256"];
        sums.object("an object of SHA-256 digests by entry name");
        std::map<std::string, std::string> d;
        for (const auto& item : sums.json().items())
          d[item.key()] = sha256_digest(sums[item.key()]);
        return d;
      } catch (const Error& ex) {  // the key, what was expected and what was found
        throw damaged(ex.what());
      }
    }();
    for (const auto& e : es) {
      if ((starts_with(e.name, layout.model_dir) || starts_with(e.name, const_dir)) &&
          !digests.count(e.name)) {
        throw damaged("'" + e.name + "' is not in its manifest: added after the package was made");
      }
    }
    for (const auto& [name, digest] : digests) {
      auto it = by_name.find(name);
      if (it == by_name.end()) throw damaged("'" + name + "', listed in its manifest, is missing");
      if (!hash) continue;
      const ZipEntry& e = *it->second;
      if (e.method != 0) throw damaged("'" + name + "' is compressed");
      const std::string got = f.sha256(e.data, e.size);
      if (got != digest) {
        throw damaged("'" + name + "' (" + std::to_string(e.size) +
                      " bytes) does not match the SHA-256 recorded when the package was made");
      }
    }
    layout.manifest_verified = hash;
  }
  check_program(f, *so, damaged);
  return layout;
}

std::string sha256_of_file(const std::filesystem::path& path) {
  const PackageFile f(path);
  return f.sha256(0, f.size());
}

// LibTorch's loader unpacks a package into a fresh folder /tmp/XXXXXX (mkdtemp, always under
// /tmp) and removes it in its destructor; when its constructor throws, the folder stays. While a
// load runs, this holds a lock that gengraph processes of this user share (and a mutex for the
// threads of this one), so that no other gengraph load makes such folders meanwhile; after a
// failure it removes the folders made since that hold nothing but this package's files.
class UnpackedCopies {
 public:
  explicit UnpackedCopies(const PackageLayout& layout) : layout_(layout), guard_(mutex()) {
    try {
      lock_.emplace(std::filesystem::path("/tmp") /
                        ("gengraph-aoti-unpack-" + std::to_string(::geteuid()) + ".lock"),
                    "the lock on unpacking AOTInductor packages", lock_timeout_seconds(),
                    &std::cerr);
    } catch (const Error&) {
      // Without the lock another load may run meanwhile; its folder is recognised by its files
      // all the same, and one of the same package left alone only when it is not complete.
    }
    before_ = folders();
  }

  void remove_leftovers() const {
    std::unordered_set<std::string> ours;
    for (const auto& e : layout_.entries) {
      ours.insert(e.name);
      // Constants are unpacked into the model's folder.
      ours.insert(layout_.model_dir + "/" + e.name.substr(e.name.rfind('/') + 1));
    }
    for (const auto& dir : folders()) {
      if (before_.count(dir) || !holds_only(dir, ours)) continue;
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  }

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }

  // This user's folders /tmp/XXXXXX.
  static std::set<std::string> folders() {
    std::set<std::string> out;
    std::error_code ec;
    for (std::filesystem::directory_iterator it("/tmp", ec), end; !ec && it != end;
         it.increment(ec)) {
      const std::string name = it->path().filename().string();
      struct stat st {};
      if (name.size() != 6 || ::lstat(it->path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
          st.st_uid != ::geteuid()) {
        continue;
      }
      out.insert(it->path().string());
    }
    return out;
  }

  static bool holds_only(const std::string& dir, const std::unordered_set<std::string>& ours) {
    std::error_code ec;
    int files = 0;
    for (std::filesystem::recursive_directory_iterator it(dir, ec), end; !ec && it != end;
         it.increment(ec)) {
      const auto st = it->symlink_status(ec);
      if (std::filesystem::is_directory(st)) continue;
      if (!std::filesystem::is_regular_file(st)) return false;
      if (!ours.count(it->path().lexically_relative(dir).generic_string())) return false;
      ++files;
    }
    return !ec && files > 0;
  }

  const PackageLayout& layout_;
  std::lock_guard<std::mutex> guard_;
  std::optional<FileLock> lock_;
  std::set<std::string> before_;
};

AotiMeta meta_from(const std::unordered_map<std::string, std::string>& raw,
                   const std::filesystem::path& path) {
  auto text = [&](const std::string& key) -> std::string {
    auto it = raw.find("gengraph." + key);
    if (it == raw.end()) {
      throw Error("AOTInductor package '" + path.string() + "' has no metadata 'gengraph." + key +
                  "': it was not made by tools/export_aoti.py");
    }
    return it->second;
  };
  auto number = [&](const std::string& key) -> int64_t {
    const std::string v = text(key);
    try {
      size_t used = 0;
      const int64_t n = std::stoll(v, &used);
      if (used == v.size()) return n;
    } catch (const std::exception&) {
    }
    throw Error("AOTInductor package '" + path.string() + "': metadata key 'gengraph." + key +
                "': expected an integer (written as a string), found the string " +
                JsonAt::quoted(v));
  };
  AotiMeta m;
  m.format = static_cast<int>(number("format"));
  m.model_type = text("model_type");
  m.model_fingerprint = text("model_fingerprint");
  m.layers = number("layers");
  m.kv_heads = number("kv_heads");
  m.head_dim = number("head_dim");
  m.vocab_size = number("vocab_size");
  m.dtype = text("dtype");
  m.device = text("device");
  m.max_rows = number("max_rows");
  m.context = number("context");
  m.freezing = text("freezing") == "True";
  // Packages made before quantized exports have no "weights": they hold the float model.
  const auto weights = raw.find("gengraph.weights");
  m.weights = weights == raw.end() ? "float" : weights->second;
  m.torch_version = text("torch_version");
  m.made_by = text("made_by");
  return m;
}

}  // namespace

std::string torch_version() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
         std::to_string(TORCH_VERSION_PATCH);
}

void set_aoti_package_builder(AotiPackageBuilder builder, std::string identity) {
  std::lock_guard<std::mutex> lock(g_builder_mutex);
  builder_slot() = {std::move(builder), std::move(identity)};
}

bool has_aoti_package_builder() {
  std::lock_guard<std::mutex> lock(g_builder_mutex);
  return static_cast<bool>(builder_slot().build);
}

AotiMeta AotiMeta::read(const std::filesystem::path& path) {
  if (!std::filesystem::is_regular_file(path)) {
    throw Error("AOTInductor package '" + path.string() + "' " +
                (std::filesystem::exists(path) ? "is not a file" : "does not exist"));
  }
  return meta_from(inspect_package(path, false).meta, path);
}

void check_aoti_package(const std::filesystem::path& path) { inspect_package(path, true); }

AotiMeta expected_aoti_meta(const CausalLM& model, bool freezing) {
  const auto& c = model.config();
  AotiMeta m;
  m.format = kAotiExportFormat;
  m.model_type = c.model_type;
  m.model_fingerprint = model_fingerprint(model);
  m.layers = c.num_layers;
  m.kv_heads = c.num_kv_heads;
  m.head_dim = c.head_dim;
  m.vocab_size = c.vocab_size;
  m.dtype = dtype_name(model.dtype());
  m.device = device_kind(model.device());
  m.freezing = freezing;
  m.weights = aoti_weights_tag(c.weights);
  m.torch_version = torch_version();
  return m;
}

std::string aoti_weights_tag(const WeightFormat& f) {
  if (!f.quantized()) return "float";
  std::string tag = f.name();
  if (f.kind == WeightFormat::Kind::kInt4) tag += "-g" + std::to_string(f.group_size);
  if (!f.lm_head) tag += "-float-head";
  return tag;
}

std::filesystem::path default_aoti_cache_dir() {
  if (const char* p = std::getenv("GENGRAPH_AOTI_CACHE"); p && *p) return p;
  if (const char* p = std::getenv("XDG_CACHE_HOME"); p && *p)
    return std::filesystem::path(p) / "gengraph" / "aoti";
  if (const char* p = std::getenv("HOME"); p && *p)
    return std::filesystem::path(p) / ".cache" / "gengraph" / "aoti";
  return std::filesystem::temp_directory_path() / "gengraph-aoti";
}

void read_aoti_options(const BackendOptions& o, AotiStepOptions& out) {
  const std::string backend = o.backend();
  out.package = expand_home(o.get_string("package", ""));
  out.cache_dir = expand_home(o.get_string("cache_dir", ""));
  out.freezing = o.get_bool("freezing", false);
  out.max_rows = o.get_int("max_rows", 1024, 2, 1 << 20);
  if (!out.package.empty() && !out.cache_dir.empty()) {
    throw Error("backend '" + backend + "': options 'package' and 'cache_dir' exclude each other");
  }
  if (!out.package.empty() && !std::filesystem::is_regular_file(out.package)) {
    throw Error("backend '" + backend + "' option 'package': '" + out.package + "' " +
                (std::filesystem::exists(out.package) ? "is not a file" : "does not exist"));
  }
  if (!out.cache_dir.empty() && std::filesystem::exists(out.cache_dir) &&
      !std::filesystem::is_directory(out.cache_dir)) {
    throw Error("backend '" + backend + "' option 'cache_dir': '" + out.cache_dir +
                "' is not a folder");
  }
}

AotiStep::AotiStep(const CausalLM& model, const AotiStepOptions& o, const std::string& backend)
    : backend_(backend) {
  const WeightFormat& weights = model.config().weights;
  if (weights.quantized() && !model.device().is_cpu()) {
    // The exported projections call gengraph's weight-only operators (gengraph::linear_int8,
    // ...), which have CPU kernels only.
    throw Error("backend '" + backend + "': model.weights " + weights.name() + " on " +
                model.device().str() +
                " is not exported yet (a package calls gengraph's weight-only operators, which "
                "run on CPU only); use eager, trace or cuda_graph (step: eager), or "
                "model.weights: float");
  }
  const AotiMeta want = expected_aoti_meta(model, o.freezing);
  PackageLayout layout;  // what the checks found in the package, before it is loaded
  if (!o.package.empty()) {
    path_ = o.package;
    try {
      layout = inspect_package(path_, true);
    } catch (const Error& e) {
      throw Error("backend '" + backend + "' option 'package': " + e.what());
    }
  } else {
    const std::filesystem::path dir =
        o.cache_dir.empty() ? default_aoti_cache_dir() : std::filesystem::path(o.cache_dir);
    BuilderSlot builder;
    {
      std::lock_guard<std::mutex> guard(g_builder_mutex);
      builder = builder_slot();
    }
    path_ = dir /
            (want.model_type + "-" + want.model_fingerprint + "-" + want.dtype + "-" + want.device +
             "-f" + std::to_string(kAotiExportFormat) + "-torch" + want.torch_version + "-r" +
             std::to_string(o.max_rows) + (o.freezing ? "-frozen" : "") +
             // The fingerprint is the loaded (float) weights': the format keeps a quantized
             // model's package apart from the float one's.
             (want.weights == "float" ? "" : "-w" + want.weights) +
             (builder.identity.empty() ? "" : "-b" + builder.identity) + ".pt2");
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      throw Error("backend '" + backend + "': cannot create the package cache folder '" +
                  dir.string() + "': " + ec.message());
    }
    // A cached package, checked: its whole file against the SHA-256 its build record holds (then
    // its structure), or without a record against its manifest. Returns what is wrong ("" when
    // nothing), filling `out` and the recorded build figures.
    const auto read_cached = [&](PackageLayout& out) -> std::string {
      std::string recorded;
      const std::filesystem::path record_file = sidecar(path_);
      std::error_code status_error;
      if (std::filesystem::exists(std::filesystem::symlink_status(record_file, status_error))) {
        try {
          const std::string source = "the package's build record '" + record_file.string() + "'";
          const nlohmann::json j = parse_json_text(
              read_regular_file(record_file, source, "a JSON file", 1 << 16), source);
          const JsonAt doc(j, source);
          doc.object("an object (written when the package was built)");
          const std::string seconds = "a number of seconds >= 0";
          const double most = std::numeric_limits<double>::max();
          build_.export_seconds = doc["export_seconds"].number_in(0, most, seconds);
          build_.compile_seconds = doc["compile_seconds"].number_in(0, most, seconds);
          if (const auto sum = doc.find("sha256")) recorded = sha256_digest(*sum);
        } catch (const Error& e) {
          // A damaged record loses its figures; the package is checked against its manifest.
          std::cerr << "gengraph: " << e.what()
                    << "; checking the package against its own manifest instead\n";
          build_ = {};
          recorded.clear();
        }
      }
      try {
        if (!recorded.empty() && sha256_of_file(path_) != recorded) {
          return "AOTInductor package '" + path_.string() +
                 "' is damaged: its SHA-256 is not the one recorded in '" +
                 sidecar(path_).string() + "' when it was built";
        }
        out = inspect_package(path_, recorded.empty());
      } catch (const Error& e) {
        return e.what();
      }
      return "";
    };
    // One process builds a package; the others wait for it (saying whom for), up to the lock
    // timeout.
    FileLock lock(path_.string() + ".lock", "the lock on building the package",
                  lock_timeout_seconds(), &std::cerr);
    if (std::filesystem::exists(std::filesystem::symlink_status(path_, ec))) {
      if (!std::filesystem::is_regular_file(std::filesystem::status(path_, ec))) {
        throw Error("backend '" + backend + "': the package cache entry '" + path_.string() +
                    "' is not a regular file (a FIFO, device, socket or folder); remove it to "
                    "rebuild the package");
      }
      const std::string damage = read_cached(layout);
      if (!damage.empty()) {
        if (!builder.build) {
          throw Error("backend '" + backend + "': " + damage +
                      " (a cached package: remove it to rebuild it)");
        }
        std::cerr << "gengraph: " << damage << "; rebuilding the cached package\n";
        std::filesystem::remove(path_, ec);
        std::filesystem::remove(sidecar(path_), ec);
        build_ = {};
      }
    }
    if (!std::filesystem::exists(std::filesystem::symlink_status(path_, ec))) {
      if (!builder.build) {
        throw Error("backend '" + backend + "': no package at '" + path_.string() +
                    "' and no package builder installed (gengraph's CLI installs one that runs "
                    "tools/export_aoti.py; an embedding program can pass the option 'package')");
      }
      AotiExportRequest request;
      request.dtype = want.dtype;
      request.device = want.device;
      request.fingerprint = want.model_fingerprint;
      request.freezing = o.freezing;
      request.max_rows = o.max_rows;
      request.weights = weights;
      if (weights.quantized()) request.ops_library = core_library_path();
      build_ = builder.build(model, request, path_);
      built_ = true;
      if (!std::filesystem::is_regular_file(path_)) {
        throw Error("backend '" + backend + "': the package builder wrote no package at '" +
                    path_.string() + "'");
      }
      try {
        layout = inspect_package(path_, true);
      } catch (const Error& e) {
        std::filesystem::remove(path_, ec);
        throw Error("backend '" + backend + "': the package builder wrote a damaged package " +
                    "(removed): " + e.what());
      }
      // The package's checksum, checked before each later load of it from the cache.
      write_file_atomically(sidecar(path_),
                            nlohmann::json{{"export_seconds", build_.export_seconds},
                                           {"compile_seconds", build_.compile_seconds},
                                           {"sha256", sha256_of_file(path_)}}
                                .dump(),
                            "the package's build record");
    }
  }

  meta_ = meta_from(layout.meta, path_);
  auto refuse = [&](const std::string& what, const std::string& found, const std::string& need) {
    if (found == need) return;
    throw Error("backend '" + backend + "': package '" + path_.string() + "' was made for " + what +
                " '" + found + "', but this run needs '" + need + "'" +
                (o.package.empty() ? " (remove it from the cache to rebuild it)"
                                   : " (make one with tools/export_aoti.py)"));
  };
  refuse("export format", std::to_string(meta_.format), std::to_string(want.format));
  refuse("torch", meta_.torch_version, want.torch_version);
  refuse("model type", meta_.model_type, want.model_type);
  refuse("layers", std::to_string(meta_.layers), std::to_string(want.layers));
  refuse("kv_heads", std::to_string(meta_.kv_heads), std::to_string(want.kv_heads));
  refuse("head_dim", std::to_string(meta_.head_dim), std::to_string(want.head_dim));
  refuse("vocab_size", std::to_string(meta_.vocab_size), std::to_string(want.vocab_size));
  // A package made outside gengraph without --fingerprint carries none: unchecked, as Python
  // traces are (docs/aoti.md).
  if (!meta_.model_fingerprint.empty())
    refuse("model weights (fingerprint)", meta_.model_fingerprint, want.model_fingerprint);
  refuse("dtype", meta_.dtype, want.dtype);
  refuse("device", meta_.device, want.device);
  refuse("model.weights", meta_.weights, want.weights);

  const auto t0 = Clock::now();
  const c10::Device d = model.device();
  {
    UnpackedCopies copies(layout);
    try {
      loader_ = std::make_unique<torch::inductor::AOTIModelPackageLoader>(
          path_.string(), "model", false, 1, d.is_cuda() ? (d.has_index() ? d.index() : 0) : -1);
    } catch (const std::exception& e) {
      copies.remove_leftovers();
      throw Error("backend '" + backend + "': package '" + path_.string() +
                  "' could not be loaded: " + first_line(e.what()));
    }
  }
  load_s_ = since(t0);
}

AotiStep::~AotiStep() = default;

at::Tensor AotiStep::run(const at::Tensor& input_ids, const at::Tensor& positions,
                         const at::Tensor& slots, const at::Tensor& token_valid,
                         const at::Tensor& valid, const at::Tensor& keys, const at::Tensor& values,
                         void* cuda_stream) {
  const int64_t rows = input_ids.size(0), max_length = valid.size(1);
  if (rows > meta_.max_rows) {
    throw Error("backend '" + backend_ + "': " + std::to_string(rows) +
                " rows (batch x beams) exceed the package's bound " +
                std::to_string(meta_.max_rows) + "; raise the option 'max_rows'");
  }
  if (max_length > meta_.context) {
    throw Error("backend '" + backend_ + "': " + std::to_string(max_length) +
                " cache positions exceed the package's bound (the model's context, " +
                std::to_string(meta_.context) + ")");
  }
  // The compiled program computes strides from the sizes: every input must be contiguous, and
  // the cache buffers are the ones written in place, so they must be too (they are: StaticCache,
  // or its first rows, whose per-layer slices are contiguous).
  const auto layer_contiguous = [](const at::Tensor& t) {
    return t.size(0) == 0 || t.select(0, 0).is_contiguous();
  };
  TORCH_INTERNAL_ASSERT(valid.is_contiguous() && layer_contiguous(keys) &&
                        layer_contiguous(values));
  // The cache goes in per layer (export format 2): views of the stacked buffers, written in place.
  // The views are made once per buffer (the cache outlives many steps), not 2 x layers ops a step;
  // those of a buffer's first rows (a shared prefill, once a generation) are made for the call.
  LayerViews once;
  LayerViews* lv = nullptr;
  for (auto& c : layer_views_) {
    if (c.keys == keys.data_ptr() && c.values == values.data_ptr() && c.sizes == keys.sizes()) {
      lv = &c;
    }
  }
  if (!lv) {
    const bool whole_buffers = keys.is_contiguous();
    lv = whole_buffers ? &layer_views_[next_views_] : &once;
    if (whole_buffers) next_views_ = 1 - next_views_;
    lv->views.clear();
    for (int64_t l = 0; l < keys.size(0); ++l) {
      lv->views.push_back(keys.select(0, l));
      lv->views.push_back(values.select(0, l));
    }
    lv->keys = keys.data_ptr();
    lv->values = values.data_ptr();
    lv->sizes = keys.sizes().vec();
  }
  std::vector<at::Tensor> inputs = {input_ids.contiguous(), positions.contiguous(),
                                    slots.contiguous(), token_valid.contiguous(), valid};
  inputs.insert(inputs.end(), lv->views.begin(), lv->views.end());
  std::vector<at::Tensor> out;
  try {
    out = loader_->run(inputs, cuda_stream);
  } catch (const std::exception& e) {
    throw Error("backend '" + backend_ + "': the program of package '" + path_.string() +
                "' failed: " + first_line(e.what()));
  }
  return out.at(0);
}

std::map<std::string, double> AotiStep::report() const {
  std::error_code ec;
  const auto bytes = std::filesystem::file_size(path_, ec);
  return {{"aoti_built", built_ ? 1.0 : 0.0},
          {"aoti_export_seconds", build_.export_seconds},
          {"aoti_compile_seconds", build_.compile_seconds},
          {"aoti_load_seconds", load_s_},
          {"aoti_package_bytes", ec ? 0.0 : double(bytes)},
          {"aoti_freezing", meta_.freezing ? 1.0 : 0.0}};
}

}  // namespace gengraph

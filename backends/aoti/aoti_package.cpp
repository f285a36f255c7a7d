#include "backends/aoti/aoti_package.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>

#include "framework/util/error.h"
#include "framework/util/json_at.h"
#include "framework/util/sha256.h"

namespace gengraph {
namespace {

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

}  // namespace

std::string sha256_digest(const JsonAt& v) {
  const std::string expected = "a SHA-256 digest (64 lower-case hex digits)";
  const std::string d = v.string(expected);
  if (d.size() != 64 || d.find_first_not_of("0123456789abcdef") != std::string::npos)
    v.fail(expected);
  return d;
}

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

void check_aoti_package(const std::filesystem::path& path) { inspect_package(path, true); }

}  // namespace gengraph

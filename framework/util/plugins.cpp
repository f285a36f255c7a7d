#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <gengraph/plugin.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <utility>

#include "framework/util/error.h"

namespace gengraph {
namespace {

// Recursive: a plug-in's registration may load another plug-in.
std::recursive_mutex& plugins_mutex() {
  static std::recursive_mutex m;
  return m;
}

// Every library opened, by real path, and whether its registration succeeded.
std::vector<std::pair<std::string, bool>>& opened() {
  static std::vector<std::pair<std::string, bool>> libraries;
  return libraries;
}

// The machine this gengraph was built for, as an ELF header names it.
#if defined(__x86_64__)
constexpr uint16_t kMachine = EM_X86_64;
constexpr const char* kMachineName = "x86-64";
#elif defined(__aarch64__)
constexpr uint16_t kMachine = EM_AARCH64;
constexpr const char* kMachineName = "AArch64";
#else
#error "plug-in checks: add this machine's ELF e_machine"
#endif

std::string elf_machine_name(uint16_t machine) {
  switch (machine) {
    case EM_386:
      return "x86 (32-bit)";
    case EM_X86_64:
      return "x86-64";
    case EM_ARM:
      return "ARM (32-bit)";
    case EM_AARCH64:
      return "AArch64";
    case EM_RISCV:
      return "RISC-V";
    case EM_PPC64:
      return "PowerPC 64";
    case EM_S390:
      return "s390";
    default:
      return "machine number " + std::to_string(machine);
  }
}

// Whether [offset, offset + size) lies inside a file of `file_size` bytes, without overflow.
bool inside(uint64_t offset, uint64_t size, uint64_t file_size) {
  return offset <= file_size && size <= file_size - offset;
}

// Checks, before the dynamic loader sees the file, what would make it crash instead of refuse:
// a file cut short maps segments past its end (SIGBUS inside dlopen on the first touch), and a
// library for another machine or word size. Reads only the ELF, program and section headers.
// A file changed after this check is not covered: plug-ins are trusted code (docs/extending.md).
void check_elf_library(const std::string& path, const std::string& where) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(where + ": cannot be opened: " + std::strerror(errno));
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } close_fd{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw Error(where + ": cannot be read: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw Error(where + ": not a file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  auto read_at = [&](void* out, uint64_t n, uint64_t offset) {
    return ::pread(fd, out, n, static_cast<off_t>(offset)) == static_cast<ssize_t>(n);
  };
  const std::string not_library = where + ": not a shared library: ";
  unsigned char ident[EI_NIDENT] = {};
  if (size < EI_NIDENT || !read_at(ident, EI_NIDENT, 0) || std::memcmp(ident, ELFMAG, SELFMAG) != 0)
    throw Error(not_library + "expected an ELF file (one that begins with \\x7fELF), found " +
                (size == 0 ? std::string("an empty file") : "other bytes"));
  if (ident[EI_CLASS] != ELFCLASS64)
    throw Error(where + ": a " + (ident[EI_CLASS] == ELFCLASS32 ? "32-bit" : "damaged") +
                " ELF file; this gengraph loads 64-bit " + kMachineName + " libraries");
  if (ident[EI_DATA] != ELFDATA2LSB)
    throw Error(where + ": a big-endian ELF file; this gengraph loads little-endian " +
                kMachineName + " libraries");
  Elf64_Ehdr eh{};
  if (size < sizeof(eh) || !read_at(&eh, sizeof(eh), 0))
    throw Error(where + ": the file is cut short: " + std::to_string(size) +
                " bytes, fewer than an ELF header's " + std::to_string(sizeof(eh)));
  if (eh.e_type != ET_DYN)
    throw Error(not_library + "an ELF " +
                (eh.e_type == ET_REL    ? std::string("object file (.o)")
                 : eh.e_type == ET_EXEC ? std::string("executable")
                 : eh.e_type == ET_CORE ? std::string("core dump")
                                        : "file of type " + std::to_string(eh.e_type)) +
                "; build it as a MODULE or SHARED library");
  if (eh.e_machine != kMachine)
    throw Error(where + ": built for " + elf_machine_name(eh.e_machine) +
                ", but this gengraph runs on " + kMachineName);
  const std::string damaged = where + ": the file is cut short or damaged: ";
  if (eh.e_phnum == 0 || eh.e_phentsize != sizeof(Elf64_Phdr) ||
      !inside(eh.e_phoff, uint64_t{eh.e_phnum} * sizeof(Elf64_Phdr), size))
    throw Error(damaged + "its program headers (" + std::to_string(eh.e_phnum) + " at byte " +
                std::to_string(eh.e_phoff) + ") do not lie inside its " + std::to_string(size) +
                " bytes");
  std::vector<Elf64_Phdr> ph(eh.e_phnum);
  if (!read_at(ph.data(), ph.size() * sizeof(Elf64_Phdr), eh.e_phoff))
    throw Error(damaged + "its program headers cannot be read");
  for (size_t i = 0; i < ph.size(); ++i) {
    if (ph[i].p_type != PT_LOAD && ph[i].p_type != PT_DYNAMIC) continue;
    if (!inside(ph[i].p_offset, ph[i].p_filesz, size))
      throw Error(damaged + "segment " + std::to_string(i) + " (bytes " +
                  std::to_string(ph[i].p_offset) + " to " +
                  std::to_string(ph[i].p_offset + ph[i].p_filesz) + ") ends past the file's " +
                  std::to_string(size) + " bytes");
  }
  if (eh.e_shnum != 0) {
    if (eh.e_shentsize != sizeof(Elf64_Shdr) ||
        !inside(eh.e_shoff, uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr), size))
      throw Error(damaged + "its section headers (" + std::to_string(eh.e_shnum) + " at byte " +
                  std::to_string(eh.e_shoff) + ") do not lie inside its " + std::to_string(size) +
                  " bytes");
    std::vector<Elf64_Shdr> sh(eh.e_shnum);
    if (!read_at(sh.data(), sh.size() * sizeof(Elf64_Shdr), eh.e_shoff))
      throw Error(damaged + "its section headers cannot be read");
    for (size_t i = 0; i < sh.size(); ++i) {
      if (sh[i].sh_type == SHT_NOBITS || sh[i].sh_type == SHT_NULL) continue;
      if (!inside(sh[i].sh_offset, sh[i].sh_size, size))
        throw Error(damaged + "section " + std::to_string(i) + " (bytes " +
                    std::to_string(sh[i].sh_offset) + " to " +
                    std::to_string(sh[i].sh_offset + sh[i].sh_size) + ") ends past the file's " +
                    std::to_string(size) + " bytes");
    }
  }
}

// Checks that `symbol`, found by dlsym in the library `handle`, is a function defined by that
// library itself: a variable of that name would be called as code (SIGSEGV), and a function of
// that name from one of its dependencies is not this plug-in's.
void check_entry_point(void* handle, void* address, const char* symbol, const std::string& where) {
  Dl_info info{};
  void* entry = nullptr;
  const int found = dladdr1(address, &info, &entry, RTLD_DL_SYMENT);
  const auto* sym = static_cast<const ElfW(Sym)*>(entry);
  if (found == 0 || sym == nullptr || info.dli_saddr != address)
    throw Error(where + ": " + symbol + " cannot be told apart from its other symbols");
  const int type = ELF64_ST_TYPE(sym->st_info);
  if (type != STT_FUNC && type != STT_GNU_IFUNC)
    throw Error(where + ": " + symbol + " is " +
                (type == STT_OBJECT || type == STT_TLS
                     ? std::string("a variable")
                     : "not a function (symbol type " + std::to_string(type) + ")") +
                ", expected the function GENGRAPH_PLUGIN defines (docs/extending.md#plug-ins)");
  struct link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && info.dli_fname != nullptr &&
      map->l_name != nullptr && std::string(info.dli_fname) != map->l_name)
    throw Error(where + ": " + symbol + " comes from another library, '" + info.dli_fname +
                "', not from the plug-in itself");
}

}  // namespace

void load_plugin(const std::string& path) {
  namespace fs = std::filesystem;
  const std::string where = "plug-in '" + path + "'";
  std::error_code ec;
  if (path.empty()) throw Error("plug-in: expected the path of a shared library, found ''");
  const fs::file_status status = fs::status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory)
    throw Error(where + ": cannot be read: " +
                (ec == std::errc::too_many_symbolic_link_levels
                     ? std::string("a symbolic link loop (too many levels of symbolic links)")
                     : ec.message()));
  if (!fs::exists(status)) throw Error(where + ": no such file");
  if (!fs::is_regular_file(status)) throw Error(where + ": not a file");
  const std::string absolute = fs::canonical(path, ec).string();
  if (ec) throw Error(where + ": cannot be read: " + ec.message());
  const std::lock_guard<std::recursive_mutex> lock(plugins_mutex());
  for (const auto& [p, ok] : opened()) {
    if (p == absolute) return;
  }
  check_elf_library(absolute, where);
  // RTLD_LOCAL: its symbols stay its own; it finds gengraph's in the libraries already loaded.
  void* handle = dlopen(absolute.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    throw Error(where + ": cannot be loaded as a shared library: " +
                (why != nullptr ? std::string(why) : std::string("(no reason given)")));
  }
  using AbiFn = int (*)();
  using RegisterFn = void (*)();
  auto abi = reinterpret_cast<AbiFn>(dlsym(handle, "gengraph_plugin_abi"));
  auto reg = reinterpret_cast<RegisterFn>(dlsym(handle, "gengraph_plugin_register"));
  if (abi == nullptr || reg == nullptr) {
    dlclose(handle);
    throw Error(
        where +
        ": not a gengraph plug-in: it defines no gengraph_plugin_abi and "
        "gengraph_plugin_register (GENGRAPH_PLUGIN(register_function) in <gengraph/plugin.h>"
        " defines them; docs/extending.md#plug-ins)");
  }
  const int version = [&] {
    try {
      check_entry_point(handle, reinterpret_cast<void*>(abi), "gengraph_plugin_abi", where);
      check_entry_point(handle, reinterpret_cast<void*>(reg), "gengraph_plugin_register", where);
      return abi();
    } catch (const Error&) {
      dlclose(handle);
      throw;
    } catch (...) {
      dlclose(handle);
      throw Error(where + ": its gengraph_plugin_abi threw instead of returning a number");
    }
  }();
  if (version != GENGRAPH_PLUGIN_ABI) {
    dlclose(handle);
    throw Error(where + ": built for gengraph plug-in ABI " + std::to_string(version) +
                ", but this gengraph has ABI " + std::to_string(GENGRAPH_PLUGIN_ABI) +
                ": rebuild it against this gengraph");
  }
  // Recorded first and never closed: what it registered before a failure stays registered (its
  // code loaded), and it is never registered twice.
  const size_t index = opened().size();
  opened().emplace_back(absolute, false);
  try {
    reg();
  } catch (const std::exception& e) {
    throw Error(where + ": its registration failed: " + e.what());
  } catch (...) {
    // Not a std::exception (an int, a string literal, a type of its own): nothing to read but
    // that it was thrown. Before, it escaped to std::terminate (SIGABRT).
    throw Error(where +
                ": its registration failed: it threw something that is not a std::exception "
                "(throw std::runtime_error(\"why\") to say why)");
  }
  opened()[index].second = true;
}

void load_plugins_from_environment() {
  const char* value = std::getenv("GENGRAPH_PLUGINS");
  if (value == nullptr) return;
  std::istringstream list(value);
  std::string entry;
  while (std::getline(list, entry, ':')) {
    if (entry.empty()) continue;
    try {
      load_plugin(entry);
    } catch (const Error& e) {
      throw Error(std::string("GENGRAPH_PLUGINS: ") + e.what());
    }
  }
}

std::string plugin_hint() {
  return " (one from a plug-in library is known once the library is loaded: gengraph --plugin "
         "LIB.so, GENGRAPH_PLUGINS, or gengraph::load_plugin)";
}

std::vector<std::string> loaded_plugins() {
  const std::lock_guard<std::recursive_mutex> lock(plugins_mutex());
  std::vector<std::string> out;
  for (const auto& [path, ok] : opened()) {
    if (ok) out.push_back(path);
  }
  return out;
}

}  // namespace gengraph

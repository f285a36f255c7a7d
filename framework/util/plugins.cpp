#include <dlfcn.h>
#include <gengraph/plugin.h>

#include <cstdlib>
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

}  // namespace

void load_plugin(const std::string& path) {
  namespace fs = std::filesystem;
  const std::string where = "plug-in '" + path + "'";
  std::error_code ec;
  if (path.empty()) throw Error("plug-in: expected the path of a shared library, found ''");
  if (!fs::exists(path, ec)) throw Error(where + ": no such file");
  if (!fs::is_regular_file(path, ec)) throw Error(where + ": not a file");
  const std::string absolute = fs::canonical(path, ec).string();
  const std::lock_guard<std::recursive_mutex> lock(plugins_mutex());
  for (const auto& [p, ok] : opened()) {
    if (p == absolute) return;
  }
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
  const int version = abi();
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

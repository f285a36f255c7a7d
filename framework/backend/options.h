// String options for a backend (from YAML or --set), read with types and checked for unknown keys.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace gengraph {

class BackendOptions {
 public:
  BackendOptions() = default;
  BackendOptions(std::string backend, std::map<std::string, std::string> values)
      : backend_(std::move(backend)), values_(std::move(values)) {}

  std::string get_string(const std::string& key, const std::string& fallback,
                         const std::vector<std::string>& allowed = {}) const;
  int64_t get_int(const std::string& key, int64_t fallback, int64_t min, int64_t max) const;
  bool get_bool(const std::string& key, bool fallback) const;
  // Throws for any key not read by one of the getters above (call after reading all options).
  void check_all_used() const;
  const std::map<std::string, std::string>& values() const { return values_; }
  const std::string& backend() const { return backend_; }

 private:
  std::string backend_;
  std::map<std::string, std::string> values_;
  mutable std::set<std::string> known_;
};

// The option share_prefill (default true), of backends that can run the prompt of several rows
// (the beams of one input) once and copy its cache: false prefills every row, for comparison.
bool read_share_prefill(const BackendOptions& o);

// "~/x" as the shell would expand it (YAML does not); other paths as they are. For path options.
std::string expand_home(const std::string& path);

}  // namespace gengraph

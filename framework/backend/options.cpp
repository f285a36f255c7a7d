#include "framework/backend/options.h"

#include <gengraph/ext/model.h>

#include <algorithm>
#include <cstdlib>

#include "framework/util/error.h"
#include "framework/util/strings.h"

namespace gengraph {

std::string BackendOptions::get_string(const std::string& key, const std::string& fallback,
                                       const std::vector<std::string>& allowed) const {
  known_.insert(key);
  auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), it->second) == allowed.end()) {
    throw Error("backend '" + backend_ + "' option '" + key + "': expected one of " +
                join(allowed, ", ") + ", found '" + it->second + "'");
  }
  return it->second;
}

int64_t BackendOptions::get_int(const std::string& key, int64_t fallback, int64_t min,
                                int64_t max) const {
  known_.insert(key);
  auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(it->second, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  // Digits alone that do not fit (in 64 bits, or under `max`) are a number too large, not a
  // malformed one.
  const std::string& text = it->second;
  if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos &&
      (used != text.size() || v > max)) {
    throw Error("backend '" + backend_ + "' option '" + key + "': too large (the most is " +
                std::to_string(max) + "), found '" + text + "'");
  }
  if (used != it->second.size() || used == 0 || v < min || v > max) {
    throw Error("backend '" + backend_ + "' option '" + key + "': expected an integer in [" +
                std::to_string(min) + ", " + std::to_string(max) + "], found '" + it->second + "'");
  }
  return v;
}

bool BackendOptions::get_bool(const std::string& key, bool fallback) const {
  known_.insert(key);
  auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  if (it->second == "true") return true;
  if (it->second == "false") return false;
  throw Error("backend '" + backend_ + "' option '" + key + "': expected true or false, found '" +
              it->second + "'");
}

void BackendOptions::check_all_used() const {
  std::vector<std::string> known(known_.begin(), known_.end());
  for (const auto& [k, v] : values_) {
    if (!known_.count(k)) {
      throw Error("backend '" + backend_ + "': unknown option '" + k + "'" +
                  did_you_mean(k, known) +
                  "; options: " + (known.empty() ? std::string("none") : join(known, ", ")));
    }
  }
}

bool read_share_prefill(const BackendOptions& o) { return o.get_bool("share_prefill", true); }

int64_t read_ring_spare(const BackendOptions& o) {
  const bool rings = o.get_bool("window_rings", true);
  const int64_t spare = o.get_int("ring_spare", kDefaultRingSpare, 0, 1 << 20);
  if (!rings && o.values().count("ring_spare")) {
    throw Error("backend '" + o.backend() +
                "': option ring_spare applies to window_rings: true, found window_rings: false");
  }
  return rings ? spare : -1;
}

void refuse_ring_options(const BackendOptions& o, const std::string& apply_to,
                         const std::string& found) {
  if (o.values().count("window_rings") || o.values().count("ring_spare")) {
    throw Error("backend '" + o.backend() + "': options window_rings and ring_spare apply to " +
                apply_to + ", found " + found);
  }
}

std::string expand_home(const std::string& path) {
  if (path == "~" || path.rfind("~/", 0) == 0) {
    if (const char* home = std::getenv("HOME")) return std::string(home) + path.substr(1);
  }
  return path;
}

}  // namespace gengraph

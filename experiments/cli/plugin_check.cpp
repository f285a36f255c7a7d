#include "experiments/cli/plugin_check.h"

#include <gengraph/plugin.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "experiments/cli/arguments.h"
#include "experiments/tools/process.h"
#include "framework/backend/backend_registry.h"
#include "framework/backend/model_step.h"
#include "framework/decoding/registry.h"
#include "framework/util/error.h"
#include "framework/util/strings.h"

namespace gengraph {
namespace {

// The first line of the child's standard output when the plug-in loaded; the JSON follows it.
constexpr const char* kLoaded = "gengraph plug-in check: loaded";

using Names = std::map<std::string, std::vector<std::string>>;

// Every registry's names, by the kind of part, in the order `gengraph plugin check` prints them.
Names registered_names() {
  return {{"backends", BackendRegistry::instance().names()},
          {"model steps", ModelStepRegistry::instance().names()},
          {"logits processors", processor_registry().names()},
          {"stopping criteria", stopping_registry().names()},
          {"search strategies", strategy_registry().names()},
          {"candidate generators", candidate_registry().names()}};
}

int load_here(const std::string& library, std::ostream& out) {
  const Names before = registered_names();
  load_plugin(library);
  const Names after = registered_names();
  nlohmann::json added = nlohmann::json::object();
  for (const auto& [kind, names] : after) {
    const auto& old = before.at(kind);
    const std::set<std::string> known(old.begin(), old.end());
    nlohmann::json list = nlohmann::json::array();
    for (const auto& n : names) {
      if (!known.count(n)) list.push_back(n);
    }
    added[kind] = list;
  }
  out << kLoaded << "\n" << added.dump() << "\n" << std::flush;
  return 0;
}

// The last non-empty line of a child's error output, without gengraph's "error: " prefix.
std::string last_error_line(const std::string& text) {
  std::istringstream lines(text);
  std::string line, last;
  while (std::getline(lines, line)) {
    if (!line.empty()) last = line;
  }
  return last.rfind("error: ", 0) == 0 ? last.substr(7) : last;
}

int check(const std::string& library, int64_t timeout_s, std::ostream& out, std::ostream& err) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error("plugin check: cannot find this program to run it again: " + ec.message());
  const std::string where = "plug-in '" + library + "'";
  // coreutils' timeout: TERM at the limit, KILL 5 s later, exit 124; a child killed by a signal
  // ends timeout with the same signal, which run_captured reports as 128 + the signal.
  const CapturedCommand r = run_captured({"timeout", "-k", "5", std::to_string(timeout_s),
                                          self.string(), "plugin", "load-here", library});
  if (!r.found) throw Error("plugin check: coreutils' 'timeout' is not on PATH");
  const size_t marker = r.out.find(kLoaded);
  if (r.rc == 0 && marker != std::string::npos) {
    nlohmann::json added;
    try {
      added = nlohmann::json::parse(r.out.substr(marker + std::strlen(kLoaded)));
    } catch (const nlohmann::json::exception&) {
      err << "error: " << where << ": the child's report cannot be read (the plug-in wrote to "
          << "standard output while loading?)\n";
      return 1;
    }
    std::string report = where + ": loads in a child process; it registers";
    bool any = false;
    for (const auto& [kind, names] : added.items()) {
      if (names.empty()) continue;
      std::vector<std::string> list;
      for (const auto& n : names) list.push_back(n.get<std::string>());
      report += "\n  " + kind + ": " + join(list, ", ");
      any = true;
    }
    out << (any ? report : report + " nothing") << "\n";
    return 0;
  }
  std::string why;
  if (r.rc == 124) {
    why = "still loading after " + std::to_string(timeout_s) +
          " s (its registration does not return); the child was stopped";
  } else if (r.rc > 128 && r.rc < 128 + 65) {
    const int sig = r.rc - 128;
    why = "crashed the process loading it: signal " + std::to_string(sig) + " (" + strsignal(sig) +
          ")" + (sig == SIGABRT ? ", from abort() or an exception that escaped its code" : "");
  } else if (r.rc == 1 && r.err.rfind("error: ", 0) == 0) {
    err << "error: " << last_error_line(r.err) << "\n";  // gengraph's own refusal, as is
    return 1;
  } else {
    why = "ended the process loading it with exit status " + std::to_string(r.rc) +
          " (exit() in its own code) before its registration returned";
  }
  err << "error: " << where << ": " << why
      << "; plug-ins run as part of gengraph and are trusted code (docs/extending.md#plug-ins)\n";
  return 1;
}

}  // namespace

int plugin_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  using cli::UsageError;
  const std::string usage = "plugin: expected 'check LIB.so [--timeout SECONDS]'";
  if (args.empty()) throw UsageError(usage + ", found nothing");
  const std::string& sub = args[0];
  if (sub == "load-here") {
    if (args.size() != 2) throw UsageError("plugin load-here: expected one library");
    return load_here(args[1], out);
  }
  if (sub != "check") throw UsageError(usage + ", found '" + sub + "'");
  std::string library;
  int64_t timeout_s = 60;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--timeout" || args[i].rfind("--timeout=", 0) == 0) {
      std::string v;
      if (args[i] == "--timeout") {
        if (i + 1 >= args.size()) throw UsageError("--timeout: expected a number of seconds");
        v = args[++i];
      } else {
        v = args[i].substr(10);
      }
      if (v.empty() || v.size() > 6 || v.find_first_not_of("0123456789") != std::string::npos ||
          std::stoll(v) < 1)
        throw UsageError("--timeout: expected whole seconds from 1 to 999999, found '" + v + "'");
      timeout_s = std::stoll(v);
    } else if (library.empty() && (args[i].empty() || args[i][0] != '-')) {
      library = args[i];
    } else {
      throw UsageError(usage + ", found '" + args[i] + "'");
    }
  }
  if (library.empty()) throw UsageError(usage + ", found no library");
  return check(library, timeout_s, out, err);
}

}  // namespace gengraph

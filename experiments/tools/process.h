// Running gengraph's Python tools (tools/*.py in the .venv) from C++: without a shell, with
// interrupts forwarded and temporary files removed on every path.
#pragma once

#include <signal.h>

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "framework/util/error.h"

namespace gengraph {

// Thrown when SIGINT or SIGTERM arrived while gengraph held temporary files or ran a tool (peer,
// tokenizer, plot): the tool got the signal too, the temporary files are removed, and no results
// are written. The CLI exits with 128 + the signal, as a shell does.
struct Interrupted : Error {
  explicit Interrupted(int sig)
      : Error("interrupted by signal " + std::to_string(sig) +
              ": temporary files removed, no results written"),
        signal(sig) {}
  // One that says what was kept instead (gengraph generate --prompts keeps what it wrote).
  Interrupted(int sig, const std::string& what) : Error(what), signal(sig) {}
  int signal;
};

// A folder or program the Python tools need, and why it was taken (`gengraph paths` prints both).
struct FoundPath {
  std::filesystem::path path;
  std::string origin;
};
// The folder holding tools/, first match wins: GENGRAPH_ROOT; this install's own share/gengraph
// (found from the library's folder, so a copied or relocated prefix finds its own); the source
// tree the library was built from.
FoundPath tools_home();
// The Python that runs them: GENGRAPH_PYTHON; GENGRAPH_ROOT's .venv when that is set; this
// install's record (share/gengraph/python, written by cmake --install); the source tree's .venv.
FoundPath tools_python();
std::filesystem::path source_root();       // tools_home().path
std::filesystem::path python_for_tools();  // tools_python().path

// Interrupts (SIGINT, SIGTERM) while temporary files exist. Outside an InterruptGuard a signal
// keeps its default action. Inside one, it is forwarded to the running tool (if any) and noted;
// the code then throws Interrupted at the next check (throw_if_interrupted), and the destructors
// remove the temporary files on the way out. Guards nest.
class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

 private:
  struct sigaction old_int_ {
  }, old_term_{};
};

// Throws Interrupted when a guarded signal arrived.
void throw_if_interrupted();

// Runs argv[0] (looked up in PATH) with these arguments, no shell in between, and waits for it.
// Returns its exit status or 128 + the signal that ended it; throws when it cannot be started,
// and Interrupted when this process was interrupted meanwhile.
int run_command(const std::vector<std::string>& argv);

// run_command with the program's standard output and error captured (a scheduler's client:
// sbatch, squeue). `found` is false when argv[0] is not on PATH.
struct CapturedCommand {
  bool found = true;
  int rc = -1;
  std::string out, err;
};
CapturedCommand run_captured(const std::vector<std::string>& argv);

// Removes a file when it goes out of scope, whatever happened meanwhile.
struct RemoveOnExit {
  std::filesystem::path path;
  ~RemoveOnExit();
};

// Runs tools/SCRIPT --request REQ.json --out OUT.json with the tools' Python, optionally under
// coreutils' timeout (TERM at the limit, KILL 10 s later; exit 124 when the limit hit). Returns the
// exit status and, when it succeeded and wrote OUT, its JSON. Request and output files are removed.
struct ToolResult {
  int rc = -1;
  std::optional<nlohmann::json> out;
};
ToolResult run_tool(const std::string& script, const nlohmann::json& request, int64_t timeout_s,
                    std::ostream& log);

}  // namespace gengraph

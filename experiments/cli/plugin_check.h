// `gengraph plugin check LIB.so`: a plug-in tried in a child process before a run trusts it.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace gengraph {

// The `plugin` command's arguments after the word `plugin`:
//   check LIB.so [--timeout SECONDS]   loads LIB.so in a child gengraph (this program, re-run) and
//                                      reports what it registers, or how the child ended: refused
//                                      (gengraph's reason), killed by a signal, exit() or abort()
//                                      in the plug-in's own code, or still loading at the limit
//   load-here LIB.so                   what the child runs: loads it in this process and prints
//                                      the names it registered, as one JSON line
// Returns the exit status: 0 when the plug-in loads, 1 when it does not (the reason on `err`).
// Usage errors throw cli::UsageError.
int plugin_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace gengraph

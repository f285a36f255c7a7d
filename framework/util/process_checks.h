// This host and its processes: what the temporary files and locks record of their writer, and
// whether that writer still runs.
#pragma once

#include <string>

namespace gengraph {

// This machine's host name ("" if the system gives none).
std::string host_name();

// Whether a process `pid` runs on this host (one of another user counts).
bool process_is_running(long pid);

}  // namespace gengraph

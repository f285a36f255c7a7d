// `gengraph serve`: the OpenAI-compatible HTTP server (server/http_server.h) from a config file's
// `serve:` section or from flags, with SIGINT/SIGTERM draining it (docs/serving.md#the-server).
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace gengraph {

// The arguments after the word `serve`. Returns the exit status (0 after a signal's drain);
// usage errors throw cli::UsageError, other errors gengraph::Error.
int serve_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace gengraph

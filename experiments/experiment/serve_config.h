// A server's configuration (YAML `serve:` beside `model:`, `backend:` and `serving:`; `gengraph
// serve` builds the same from its flags): the HTTP server's options (server/http_server.h) and the
// scheduler's (`serving:`, as a load experiment reads it). Read through the one YAML reader, so
// errors name the file, line and column, and the key.
#pragma once

#include <gengraph/serving.h>

#include <string>

#include "experiments/experiment/yaml_input.h"
#include "server/http_server.h"

namespace gengraph {

struct ServeSpec {
  server::ServeOptions options;
  SchedulerOptions serving;
  // The API key is never written in the file: `api_key_env` names the environment variable that
  // holds it ("" none; --api-key on the command line, or GENGRAPH_API_KEY, give it too).
  std::string api_key_env;
};

// `serve:` (the server's options by name, unknown keys refused) and `serving:` of the file's root.
ServeSpec read_serve(MapReader& root, const std::string& file);

}  // namespace gengraph

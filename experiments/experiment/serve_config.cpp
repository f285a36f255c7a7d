#include "experiments/experiment/serve_config.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "experiments/experiment/load_config.h"

namespace gengraph {
namespace {

double seconds(MapReader& r, const std::string& key, double fallback, double min) {
  const double v = r.scalar<double>(key, fallback, "a number of seconds");
  if (!std::isfinite(v) || v < min || v > 86400) {
    r.fail(key, "a number of seconds from " + nlohmann::json(min).dump() + " to 86400");
  }
  return v;
}

}  // namespace

ServeSpec read_serve(MapReader& root, const std::string& file) {
  ServeSpec s;
  s.serving =
      read_serving(MapReader(root.child("serving"), "serving", file), SchedulerOptions{}, file);
  MapReader r(root.child("serve"), "serve", file);
  server::ServeOptions& o = s.options;
  o.host = r.scalar<std::string>("host", o.host, "an address to listen on (127.0.0.1, 0.0.0.0)");
  o.port = static_cast<int>(r.integer("port", o.port, 0, 65535));
  o.model_id = r.scalar<std::string>("model_id", "", "the name clients send as model");
  s.api_key_env = r.scalar<std::string>("api_key_env", "", "an environment variable's name");
  if (r.has("api_key")) {
    r.fail("api_key",
           "no key in the file: api_key_env names the environment variable that holds it");
  }
  o.max_body_bytes = r.integer("max_body_bytes", o.max_body_bytes, 1024, int64_t{1} << 30);
  o.max_connections = r.integer("max_connections", o.max_connections, 1, 100000);
  o.default_max_tokens = r.integer("default_max_tokens", o.default_max_tokens, 1, 1 << 20);
  o.max_n = r.integer("max_n", o.max_n, 1, 128);
  o.drain_timeout_s = seconds(r, "drain_timeout_s", o.drain_timeout_s, 0);
  o.read_timeout_s = seconds(r, "read_timeout_s", o.read_timeout_s, 0.1);
  o.write_timeout_s = seconds(r, "write_timeout_s", o.write_timeout_s, 0.1);
  o.keep_alive_timeout_s = seconds(r, "keep_alive_timeout_s", o.keep_alive_timeout_s, 0);
  o.request_timeout_s = seconds(r, "request_timeout_s", o.request_timeout_s, 0.1);
  o.log_prompts = r.scalar<bool>("log_prompts", false, "true or false");
  r.finish();
  const std::string why = " with serve: (";
  if (root.has("inputs")) root.fail("inputs", "no inputs:" + why + "requests bring the prompts)");
  if (root.has("load")) root.fail("load", "no load:" + why + "drive the server with a client)");
  if (root.has("peers")) root.fail("peers", "no peers:" + why + "one model is served)");
  if (root.has("sweep")) root.fail("sweep", "no sweep:" + why + "one server per file)");
  if (root.has("backends") && root.child("backends").IsSequence() &&
      root.child("backends").size() != 1) {
    root.fail("backends", "one backend" + why + "the server runs on it)");
  }
  return s;
}

}  // namespace gengraph

#include "experiments/experiment/load_config.h"

#include <gengraph/ext/scheduling.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "framework/util/error.h"
#include "framework/util/strings.h"

namespace gengraph {

const std::vector<std::string> kLoadSystems = {"scheduler", "one_at_a_time", "static_batching"};

namespace {

constexpr int64_t kMaxLength = int64_t{1} << 20;
constexpr double kMaxRate = 1e6;

// `key`: a whole number, or a mapping {min, max} of whole numbers, in [1, kMaxLength].
LengthRange read_lengths(MapReader& r, const std::string& key, LengthRange fallback,
                         const std::string& file) {
  if (!r.has(key)) return fallback;
  const YAML::Node n = r.child(key);
  if (n.IsScalar()) {
    const int64_t v = r.integer(key, 1, 1, kMaxLength);
    return {v, v};
  }
  if (!n.IsMap()) r.fail(key, "a token count, or a mapping {min, max} of token counts");
  MapReader m(n, r.key_path(key), file);
  if (!m.has("min")) m.fail("min", "the least length (an integer >= 1)");
  if (!m.has("max")) m.fail("max", "the largest length (an integer >= min)");
  LengthRange out;
  out.min = m.integer("min", 1, 1, kMaxLength);
  out.max = m.integer("max", out.min, 1, kMaxLength);
  if (out.max < out.min) m.fail("max", "an integer >= min (" + std::to_string(out.min) + ")");
  m.finish();
  return out;
}

// One entry of `rate`: requests per second, or all_at_once (a saturation point).
double read_rate(const YAML::Node& n, const std::string& path, const std::string& file) {
  const std::string expected =
      "a rate in requests per second (a number > 0, at most 1e6) or all_at_once";
  if (!n.IsScalar())
    throw Error(where(file, n) + path + ": expected " + expected + ", found " + describe(n));
  if (n.Scalar() == "all_at_once") return kAllAtOnce;
  double v = 0;
  try {
    v = n.as<double>();
  } catch (const YAML::BadConversion&) {
    throw Error(where(file, n) + path + ": expected " + expected + ", found " + describe(n));
  }
  if (!std::isfinite(v) || v <= 0 || v > kMaxRate)
    throw Error(where(file, n) + path + ": expected " + expected + ", found " + describe(n));
  return v;
}

std::vector<double> read_rates(MapReader& r, const std::string& file) {
  std::vector<double> out;
  const YAML::Node n = r.child("rate");
  if (n.IsSequence()) {
    if (n.size() == 0) r.fail("rate", "a rate or a non-empty list of rates");
    for (size_t i = 0; i < n.size(); ++i)
      out.push_back(read_rate(n[i], r.key_path("rate") + "[" + std::to_string(i) + "]", file));
  } else {
    out.push_back(read_rate(n, r.key_path("rate"), file));
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (std::count(out.begin(), out.end(), out[i]) > 1)
      r.fail("rate", "distinct rates (" + rate_name(out[i]) + " is listed twice)");
  }
  return out;
}

std::vector<LoadSystem> read_systems(MapReader& r, const SchedulerOptions& serving,
                                     const std::string& file) {
  std::vector<LoadSystem> out;
  if (!r.has("systems")) {
    for (const auto& kind : kLoadSystems) out.push_back({kind, kind, serving});
    return out;
  }
  const YAML::Node list = r.child("systems");
  const std::string known = join(kLoadSystems, ", ");
  if (!list.IsSequence() || list.size() == 0)
    r.fail("systems", "a non-empty list of systems (" + known + ")");
  std::set<std::string> labels;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string path = r.key_path("systems") + "[" + std::to_string(i) + "]";
    LoadSystem s;
    s.serving = serving;
    const YAML::Node n = list[i];
    if (n.IsScalar()) {
      s.kind = n.Scalar();
    } else {
      MapReader m(n, path, file);
      s.kind = m.scalar<std::string>("name", "", "a system name (" + known + ")");
      s.label = m.scalar<std::string>("label", "", "a label");
      if (m.has("serving")) {
        if (s.kind != "scheduler")
          m.fail("serving", "no serving: here (it configures the scheduler system only)");
        s.serving =
            read_serving(MapReader(m.child("serving"), path + ".serving", file), serving, file);
      }
      m.finish();
    }
    if (std::find(kLoadSystems.begin(), kLoadSystems.end(), s.kind) == kLoadSystems.end()) {
      throw Error(where(file, n) + path + ": unknown system '" + s.kind + "'" +
                  did_you_mean(s.kind, kLoadSystems) + "; systems: " + known);
    }
    if (s.label.empty()) s.label = s.kind;
    if (!labels.insert(s.label).second) {
      throw Error(where(file, n) + path + ": the label '" + s.label +
                  "' is used twice; give each entry a distinct label:");
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace

std::string rate_name(double rate) {
  if (rate == kAllAtOnce) return "all at once";
  std::ostringstream s;
  s << rate << " req/s";
  return s.str();
}

SchedulerOptions read_serving(MapReader r, const SchedulerOptions& base, const std::string& file) {
  (void)file;
  SchedulerOptions o = base;
  if (r.has("policy")) {
    o.policy = r.scalar<std::string>("policy", o.policy, "a scheduling policy name");
    try {
      PolicyRegistry::instance().get(o.policy);
    } catch (const Error&) {
      const std::vector<std::string> names = PolicyRegistry::instance().names();
      r.fail("policy", "one of " + join(names, ", ") + did_you_mean(o.policy, names));
    }
  }
  o.block_size = r.integer("block_size", o.block_size, 1, 1 << 16);
  o.kv_blocks = r.integer("kv_blocks", o.kv_blocks, 0, int64_t{1} << 32);
  o.kv_memory_mb = r.scalar<double>("kv_memory_mb", o.kv_memory_mb, "a size in MB (> 0)");
  if (!(o.kv_memory_mb > 0) || o.kv_memory_mb > 1e9) r.fail("kv_memory_mb", "a size in MB (> 0)");
  o.max_step_tokens = r.integer("max_step_tokens", o.max_step_tokens, 1, 1 << 24);
  o.prefill_chunk = r.integer("prefill_chunk", o.prefill_chunk, 1, 1 << 24);
  o.max_running = r.integer("max_running", o.max_running, 1, 1 << 20);
  o.max_queue = r.integer("max_queue", o.max_queue, 1, 1 << 24);
  o.prefix_sharing = r.scalar<bool>("prefix_sharing", o.prefix_sharing, "true or false");
  o.batch_invariant = r.scalar<bool>("batch_invariant", o.batch_invariant, "true or false");
  r.finish();
  return o;
}

LoadSpec read_load(MapReader r, const SchedulerOptions& serving, const std::string& file) {
  LoadSpec l;
  l.serving = serving;
  l.arrival = r.choice("arrival", "poisson", {"poisson", "all_at_once"});
  if (l.arrival == "poisson") {
    if (!r.has("rate"))
      r.fail("rate", "the arrival rate in requests per second, or a list of rates");
    l.rates = read_rates(r, file);
  } else {
    (void)r.child("rate");  // every request waits from the start: no rate applies
    l.rates = {kAllAtOnce};
  }
  l.requests = r.integer("requests", l.requests, 1, 1000000);
  l.prompt_lengths = read_lengths(r, "prompt_lengths", l.prompt_lengths, file);
  l.has_output_lengths = r.has("output_lengths");
  l.output_lengths = read_lengths(r, "output_lengths", l.output_lengths, file);
  if (r.has("shared_prefix")) {
    MapReader p(r.child("shared_prefix"), r.key_path("shared_prefix"), file);
    if (!p.has("length")) p.fail("length", "the shared prefix's length in tokens");
    l.shared_prefix_length = p.integer("length", 0, 1, kMaxLength);
    l.shared_prefix_fraction =
        p.scalar<double>("fraction", 1.0, "the fraction of requests that share it, in (0, 1]");
    if (!(l.shared_prefix_fraction > 0) || l.shared_prefix_fraction > 1)
      p.fail("fraction", "the fraction of requests that share it, in (0, 1]");
    p.finish();
  }
  l.seed = r.seed("seed", 0);
  l.systems = read_systems(r, serving, file);
  l.static_batch_max = r.integer("static_batch_max", l.static_batch_max, 1, 4096);
  l.time_limit_s = r.scalar<double>("time_limit_s", l.time_limit_s, "seconds (> 0)");
  if (!(l.time_limit_s > 0) || l.time_limit_s > 1e7)
    r.fail("time_limit_s", "seconds (> 0, at most 1e7)");
  r.finish();
  return l;
}

}  // namespace gengraph

#include "experiments/runner.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <iomanip>
#include <optional>
#include <sstream>

#include "framework/backend/backend_registry.h"
#include "framework/decoding/generator.h"
#include "framework/decoding/pipeline.h"
#include "framework/model/loader.h"
#include "framework/util/device.h"
#include "framework/util/error.h"
#include "framework/util/version.h"

namespace gengraph {
namespace {

nlohmann::json summary(std::vector<double> v) {
  nlohmann::json j;
  if (v.empty()) return j;
  std::vector<double> s = v;
  std::sort(s.begin(), s.end());
  const size_t n = s.size();
  const double median = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  double mean = 0;
  for (double x : s) mean += x;
  mean /= static_cast<double>(n);
  double var = 0;
  for (double x : s) var += (x - mean) * (x - mean);
  j["median"] = median;
  j["min"] = s.front();
  j["max"] = s.back();
  j["mean"] = mean;
  j["stdev"] = n > 1 ? std::sqrt(var / static_cast<double>(n - 1)) : 0.0;
  j["values"] = v;
  return j;
}

// The rank k of a distribution-free confidence interval [x(k), x(n+1-k)] for the median of n
// samples, and its coverage 1 - 2 P(Binomial(n, 1/2) < k): the largest k with coverage >= 95%,
// or k = 1 (min to max) when none reaches it (n <= 5).
std::pair<size_t, double> median_interval_rank(size_t n) {
  std::vector<double> cdf(n + 1);  // cdf[j] = P(Binomial(n, 1/2) <= j)
  double pmf = std::pow(0.5, static_cast<double>(n)), acc = 0;
  for (size_t j = 0; j <= n; ++j) {
    acc += pmf;
    cdf[j] = acc;
    pmf = pmf * static_cast<double>(n - j) / static_cast<double>(j + 1);
  }
  size_t k = 1;
  while (k + 1 <= n / 2 && 1 - 2 * cdf[k] >= 0.95) ++k;
  return {k, 1 - 2 * cdf[k - 1]};
}

std::string ratio_confidence_text(int64_t repeats) {
  if (repeats < 2) return "none with one repeat";
  std::ostringstream s;
  s << std::fixed << std::setprecision(1)
    << 100 * median_interval_rank(static_cast<size_t>(repeats)).second << "% confidence";
  return s.str();
}

// How much faster a row is than the baseline, as baseline total time / row total time.
//
// Rows timed in the same interleaved repeats as the baseline (gengraph's backends) are paired
// repeat by repeat: repeat i of both ran back to back, so drift hits both alike. The point is the
// median of the n per-repeat ratios, and the interval a distribution-free confidence interval for
// that median from order statistics: [r(k), r(n+1-k)] with the largest k whose coverage
// 1 - 2 P(Binomial(n, 1/2) < k) is still at least 95%, or k = 1 (min to max) when no k reaches it
// (n <= 5), with the coverage reached stated. Peers run in their own process, not interleaved:
// their ratio is the ratio of medians, with no interval.
nlohmann::json ratio_to_baseline(const nlohmann::json& row, const nlohmann::json& base) {
  auto values = [](const nlohmann::json& r) {
    std::vector<double> v;
    const auto& t = r.value("timings", nlohmann::json::object());
    if (t.contains("total_ms") && t["total_ms"].contains("values"))
      v = t["total_ms"]["values"].get<std::vector<double>>();
    return v;
  };
  auto is_peer = [](const nlohmann::json& r) {
    return r.value("backend", std::string()).rfind("peer:", 0) == 0;
  };
  const std::vector<double> x = values(row), b = values(base);
  nlohmann::json out = {{"baseline", base.at("label")}};
  if (x.empty() || b.empty()) return out;
  if (is_peer(row) || is_peer(base) || x.size() != b.size() || x.size() < 2) {
    const double mx = summary(x)["median"].get<double>(), mb = summary(b)["median"].get<double>();
    out["median"] = mx > 0 ? mb / mx : 0.0;
    const bool paired = !is_peer(row) && !is_peer(base) && x.size() == b.size();
    out["method"] = paired ? "one paired repeat: its ratio, no interval" : "ratio of medians";
    return out;
  }
  std::vector<double> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = x[i] > 0 ? b[i] / x[i] : 0.0;
  const auto sr = summary(r);
  std::sort(r.begin(), r.end());
  const size_t n = r.size();
  const auto [k, confidence] = median_interval_rank(n);
  out["median"] = sr["median"];
  out["low"] = r[k - 1];
  out["high"] = r[n - k];
  out["confidence"] = confidence;
  out["method"] = "median of paired per-repeat ratios, order-statistic interval";
  return out;
}

std::vector<std::vector<int64_t>> make_inputs(const InputsSpec& in, int64_t vocab) {
  if (!in.synthetic) return in.prompts;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(in.seed);
  const at::Tensor ids = at::randint(vocab, {in.batch_size, in.prompt_length}, gen, at::kLong);
  std::vector<std::vector<int64_t>> out(in.batch_size);
  for (int64_t i = 0; i < in.batch_size; ++i) {
    const int64_t* p = ids[i].data_ptr<int64_t>();
    out[i].assign(p, p + in.prompt_length);
  }
  return out;
}

nlohmann::json outputs_json(const GenerationResult& r,
                            const std::vector<std::vector<int64_t>>& prompts) {
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < r.outputs.size(); ++i) {
    nlohmann::json seqs = nlohmann::json::array();
    for (const auto& h : r.outputs[i]) {
      nlohmann::json s{{"tokens", h.tokens}};
      if (h.score) s["score"] = *h.score;
      seqs.push_back(s);
    }
    out.push_back({{"input", i}, {"prompt_length", prompts[i].size()}, {"sequences", seqs}});
  }
  return out;
}

// How a row's outputs compare with the first row's: whether every input's sequences hold the
// same tokens ("same tokens" means tokens: in bfloat16 two correct backends can pick the same
// beams with scores that differ in the last bits), and, where they do and both carry scores, the
// largest |score difference|. Outputs of another shape (a failed or older row) do not match.
struct OutputComparison {
  bool same_tokens = false;
  std::optional<double> max_score_difference;
};

OutputComparison compare_outputs(const nlohmann::json& a, const nlohmann::json& b) {
  OutputComparison c;
  if (!a.is_array() || !b.is_array() || a.size() != b.size()) return c;
  double max_diff = 0;
  bool scored = true;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].is_object() || !b[i].is_object()) return c;
    const auto sa = a[i].value("sequences", nlohmann::json());
    const auto sb = b[i].value("sequences", nlohmann::json());
    if (!sa.is_array() || !sb.is_array() || sa.size() != sb.size()) return c;
    for (size_t k = 0; k < sa.size(); ++k) {
      if (!sa[k].is_object() || !sb[k].is_object() || !sa[k].contains("tokens") ||
          sa[k]["tokens"] != sb[k].value("tokens", nlohmann::json())) {
        return c;
      }
      const auto x = sa[k].value("score", nlohmann::json()),
                 y = sb[k].value("score", nlohmann::json());
      if (x.is_number() && y.is_number()) {
        max_diff = std::max(max_diff, std::abs(x.get<double>() - y.get<double>()));
      } else {
        scored = false;
      }
    }
  }
  c.same_tokens = true;
  if (scored) c.max_score_difference = max_diff;
  return c;
}

// Records the comparison with the first row's outputs in a run's JSON.
void record_comparison(nlohmann::json& run, const nlohmann::json& first_outputs) {
  const OutputComparison c = compare_outputs(first_outputs, run.value("outputs", nlohmann::json()));
  run["tokens_match_first_row"] = c.same_tokens;
  if (c.max_score_difference) run["max_score_difference_to_first_row"] = *c.max_score_difference;
}

std::string now_iso8601() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace

GenerationConfig resolve_generation(const LoadedModel& model, const nlohmann::json& overrides,
                                    const std::string& source,
                                    std::vector<std::string>* ignored_keys) {
  GenerationConfig g;
  if (model.generation_defaults.is_object()) {
    auto ignored = apply_generation_defaults(g, model.generation_defaults,
                                             model.source + "/generation_config.json");
    if (ignored_keys) *ignored_keys = ignored;
  } else {
    // transformers builds the generation config from config.json's special tokens.
    const auto& mc = model.model->config();
    g.bos_token_id = mc.bos_token_id;
    g.eos_token_id = mc.eos_token_ids;
    g.pad_token_id = mc.pad_token_id;
  }
  for (auto it = overrides.begin(); it != overrides.end(); ++it) {
    apply_generation_key(g, it.key(), it.value(), source);
  }
  g.validate();
  const bool preset = model.source.rfind("preset:", 0) == 0;
  const std::string defaults =
      preset ? model.source + " (its config)"
             : model.source + (model.generation_defaults.is_object() ? "/generation_config.json"
                                                                     : "/config.json");
  g.validate_for_vocab(model.model->config().vocab_size, [&](const std::string& key) {
    return overrides.contains(key) ? source : defaults;
  });
  return g;
}

namespace {

struct Timings {
  std::vector<double> ttft, total, per_token, tps;
  void add(const GenerationResult& r, size_t batch) {
    ttft.push_back(r.timing.time_to_first_token_s * 1e3);
    total.push_back(r.timing.total_s * 1e3);
    if (r.timing.steps > 1) {
      per_token.push_back((r.timing.total_s - r.timing.time_to_first_token_s) * 1e3 /
                          static_cast<double>(r.timing.steps - 1));
    }
    tps.push_back(static_cast<double>(batch * r.timing.steps) / r.timing.total_s);
  }
  nlohmann::json to_json() const {
    return {{"time_to_first_token_ms", summary(ttft)},
            {"decode_ms_per_token", summary(per_token)},
            {"total_ms", summary(total)},
            {"tokens_per_second", summary(tps)}};
  }
};

struct Row {
  BackendSpec spec;
  std::unique_ptr<ForwardBackend> backend;
  Timings timings;
  nlohmann::json outputs;
  bool deterministic = true;
  int64_t steps = 0;
  int64_t peak_device = 0;
};

// The device's memory bandwidth, measured two ways (bytes/s, best of 5 timings after a warm-up):
// `read` is a float32 matrix-vector product over a matrix far bigger than any cache (bytes of the
// matrix read), the access pattern of a batch-1 decode step and the fastest read stream found
// here (faster than a sum); `copy` is a copy_ of a buffer of the same size (bytes read + written).
// CUDA gets a bigger buffer and several ops per timing, so launch and sync costs stay small.
struct Bandwidth {
  double read = 0, copy = 0;
  std::string method;
};

Bandwidth measure_bandwidth(const c10::Device& device) {
  const bool cuda = device.is_cuda();
  const int64_t side = cuda ? 16384 : 8192;  // floats: 1 GiB on CUDA, 256 MiB elsewhere
  const int iters = cuda ? 8 : 1;
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(device);
  at::Tensor m = at::ones({side, side}, opts), v = at::ones({side}, opts),
             out = at::empty({side}, opts);
  at::Tensor a = m.view({-1}), b = at::empty_like(a);
  const double bytes = static_cast<double>(m.nbytes()) * iters;
  auto best_of = [&](double bytes_moved, const std::function<void()>& op) {
    double best = 0;
    for (int i = 0; i < 6; ++i) {
      synchronize(device);
      const auto t0 = std::chrono::steady_clock::now();
      for (int k = 0; k < iters; ++k) op();
      synchronize(device);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (i > 0) best = std::max(best, bytes_moved / s);
    }
    return best;
  };
  Bandwidth bw;
  bw.read = best_of(bytes, [&] { at::mv_out(out, m, v); });
  bw.copy = best_of(2 * bytes, [&] { b.copy_(a); });
  std::ostringstream d;
  d << "read: float32 mv over a " << side << "x" << side
    << " matrix (bytes of the matrix); copy: copy_ of " << (m.nbytes() >> 20)
    << " MiB (bytes read + written); " << iters << " op(s) per timing, best of 5 after a warm-up";
  bw.method = d.str();
  return bw;
}

// Bytes a decode step must read at least: every weight once, plus the keys/values written so far.
double decode_bytes_per_step(const CausalLM& m, int64_t rows, double mean_cache_len) {
  double bytes = 0;
  for (const auto& [name, t] : m.weights()) bytes += static_cast<double>(t.nbytes());
  const auto& c = m.config();
  bytes += 2.0 * c.num_layers * rows * c.num_kv_heads * c.head_dim * mean_cache_len *
           static_cast<double>(c10::elementSize(m.dtype()));
  return bytes;
}

// The source tree holding tools/ (GENGRAPH_ROOT overrides the one the library was built from,
// for binaries carried to another machine) and the Python that runs them.
std::filesystem::path source_root() {
  if (const char* p = std::getenv("GENGRAPH_ROOT")) return p;
  return GENGRAPH_SOURCE_DIR;
}

std::filesystem::path python_for_tools() {
  if (const char* p = std::getenv("GENGRAPH_PYTHON")) return p;
  return source_root() / ".venv" / "bin" / "python";
}

// Interrupts (SIGINT, SIGTERM) while temporary files exist. Outside an InterruptGuard a signal
// keeps its default action. Inside one, it is forwarded to the running tool (if any) and noted;
// the code then throws Interrupted at the next check, and the destructors remove the temporary
// files (the peers' model copy, results being written) on the way out.
volatile sig_atomic_t g_child_pid = 0;
volatile sig_atomic_t g_signal = 0;
int g_guards = 0;

extern "C" void on_interrupt(int sig) {
  g_signal = sig;
  if (g_child_pid > 0) ::kill(static_cast<pid_t>(g_child_pid), sig);
}

class InterruptGuard {
 public:
  InterruptGuard() {
    if (g_guards++ > 0) return;
    g_signal =
        0;  // a signal before this had its default action; one noted by an earlier guard is handled
    struct sigaction sa {};
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, &old_int_);
    ::sigaction(SIGTERM, &sa, &old_term_);
  }
  ~InterruptGuard() {
    if (--g_guards > 0) return;
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
  }
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

 private:
  struct sigaction old_int_ {
  }, old_term_{};
};

void throw_if_interrupted() {
  if (g_signal != 0) throw Interrupted(static_cast<int>(g_signal));
}

// Runs argv[0] (looked up in PATH) with these arguments, no shell in between, and waits for it.
// Returns its exit status or 128 + the signal that ended it; throws when it cannot be started,
// and Interrupted when this process was interrupted meanwhile.
int run_command(const std::vector<std::string>& argv) {
  InterruptGuard guard;
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  if (const int err = posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), environ);
      err != 0) {
    throw Error(
        "cannot start '" + argv[0] + "': " + std::strerror(err) +
        (argv[0].find("python") != std::string::npos
             ? " (the tools' Python: GENGRAPH_PYTHON, or .venv/bin/python in the source tree)"
             : ""));
  }
  g_child_pid = pid;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      g_child_pid = 0;
      return -1;
    }
  }
  g_child_pid = 0;
  throw_if_interrupted();
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Removes a file when it goes out of scope, whatever happened meanwhile.
struct RemoveOnExit {
  std::filesystem::path path;
  ~RemoveOnExit() {
    std::error_code ignored;
    std::filesystem::remove(path, ignored);
  }
};

// The model folder the peers load: the configured one, or (for a preset) the very same random
// weights written once to a temporary folder, removed when the peers are done.
class PeerModelFolder {
 public:
  PeerModelFolder(const ExperimentConfig& c, const LoadedModel& loaded) : path_(c.model.path) {
    if (!path_.empty()) return;
    path_ = std::filesystem::temp_directory_path() /
            ("gengraph-peer-model-" + std::to_string(::getpid()));
    temporary_ = true;
    try {
      save_model_folder(loaded, path_);
      throw_if_interrupted();
    } catch (...) {
      remove();
      throw;
    }
  }
  ~PeerModelFolder() { remove(); }
  PeerModelFolder(const PeerModelFolder&) = delete;
  PeerModelFolder& operator=(const PeerModelFolder&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  void remove() {
    std::error_code ignored;
    if (temporary_) std::filesystem::remove_all(path_, ignored);
  }
  InterruptGuard guard_;  // constructed first: an interrupt while writing the copy is caught too
  std::filesystem::path path_;
  bool temporary_ = false;
};

// Runs tools/SCRIPT --request REQ.json --out OUT.json with the tools' Python, optionally under
// coreutils' timeout (TERM at the limit, KILL 10 s later; exit 124 when the limit hit). Returns the
// exit status and, when it succeeded and wrote OUT, its JSON. Request and output files are removed.
struct ToolResult {
  int rc = -1;
  std::optional<nlohmann::json> out;
};

ToolResult run_tool(const std::string& script, const nlohmann::json& request, int64_t timeout_s,
                    std::ostream& log) {
  static int calls = 0;
  const auto stem =
      std::filesystem::temp_directory_path() /
      ("gengraph-" + script + "-" + std::to_string(::getpid()) + "-" + std::to_string(++calls));
  const auto req_path = stem.string() + ".json", out_path = stem.string() + ".out.json";
  const RemoveOnExit remove_request{req_path}, remove_output{out_path};
  {
    std::ofstream f(req_path);
    f << request.dump();
    if (!f) throw Error("cannot write the request for tools/" + script + " to '" + req_path + "'");
  }
  std::vector<std::string> argv;
  if (timeout_s > 0) argv = {"timeout", "-k", "10", std::to_string(timeout_s)};
  for (const std::string& a :
       {python_for_tools().string(), (source_root() / "tools" / script).string(),
        std::string("--request"), req_path, std::string("--out"), out_path}) {
    argv.push_back(a);
  }
  log << script << ":";
  for (const auto& a : argv) log << " " << a;
  log << "\n";
  ToolResult r;
  r.rc = run_command(argv);
  if (r.rc == 0 && std::filesystem::exists(out_path)) r.out = read_json_file(out_path);
  return r;
}

nlohmann::json run_peer(const PeerSpec& peer, const ExperimentConfig& c,
                        const std::filesystem::path& folder, const nlohmann::json& generation,
                        const std::vector<std::vector<int64_t>>& prompts, std::ostream& log) {
  const nlohmann::json request = {{"peer", peer.name},
                                  {"label", peer.label},
                                  {"model", folder.string()},
                                  {"dtype", c.model.dtype},
                                  {"device", c.model.device},
                                  {"prompts", prompts},
                                  {"generation", generation},
                                  {"warmup", c.run.warmup},
                                  {"repeats", c.run.repeats},
                                  {"seed", c.run.seed},
                                  {"threads", at::get_num_threads()}};
  log << "peer " << peer.label << "\n";
  ToolResult r = run_tool("hf_peer.py", request, c.run.peer_timeout_s, log);
  if (!r.out) {
    if (c.run.peer_timeout_s > 0 && (r.rc == 124 || r.rc == 137)) {
      throw Error("peer '" + peer.label + "': stopped after run.peer_timeout_s = " +
                  std::to_string(c.run.peer_timeout_s) + " s");
    }
    throw Error("peer '" + peer.label + "': tools/hf_peer.py failed (exit " + std::to_string(r.rc) +
                "; any message it printed is above)");
  }
  return *r.out;
}

// Texts in and out through the model folder's own tokenizer (tools/hf_tokenizer.py).
nlohmann::json tokenizer_call(const std::string& folder, const char* op,
                              const nlohmann::json& items, const char* field, std::ostream& log) {
  ToolResult r = run_tool("hf_tokenizer.py", {{"model", folder}, {op, items}}, 0, log);
  if (!r.out || !(*r.out).contains(field) || (*r.out)[field].size() != items.size()) {
    throw Error(std::string("inputs.texts: tools/hf_tokenizer.py could not ") + op +
                " with the tokenizer in '" + folder + "' (exit " + std::to_string(r.rc) +
                "; any message it printed is above)");
  }
  return (*r.out)[field];
}

// Adds "text" to every generated sequence of every row, decoded in one call.
void decode_outputs(nlohmann::json& runs, const std::string& folder, std::ostream& log) {
  nlohmann::json seqs = nlohmann::json::array();
  for (const auto& run : runs) {
    if (!run.contains("outputs")) continue;
    for (const auto& in : run["outputs"]) {
      for (const auto& s : in["sequences"]) seqs.push_back(s["tokens"]);
    }
  }
  if (seqs.empty()) return;
  const nlohmann::json texts = tokenizer_call(folder, "decode", seqs, "texts", log);
  size_t k = 0;
  for (auto& run : runs) {
    if (!run.contains("outputs")) continue;
    for (auto& in : run["outputs"]) {
      for (auto& s : in["sequences"]) s["text"] = texts[k++];
    }
  }
}

}  // namespace

namespace {

// Where the experiment's model comes from (no dtype or device: callers that load add them).
ModelSource model_source(const ExperimentConfig& c) {
  ModelSource src;
  src.preset = c.model.preset;
  src.path = c.model.path;
  src.config_overrides = c.model.config_overrides;
  src.seed = c.model.seed;
  return src;
}

// The fields every results document starts with, for one point or a whole sweep.
nlohmann::json results_header(const ExperimentConfig& c) {
  return {{"schema_version", 1},
          {"experiment", c.name},
          {"config_file", c.file},
          // The experiment as written and the overrides applied to it: enough to run it again.
          {"config", {{"text", c.source_text}, {"overrides", c.overrides}}},
          {"created", now_iso8601()}};
}

}  // namespace

void check_runnable(const ExperimentConfig& c) {
  register_builtin_backends();
  for (const auto& b : c.backends) {
    try {
      // The device as written (parse_device would also demand that it exist here: validating a
      // CUDA experiment on a CPU machine is allowed).
      BackendRegistry::instance().validate(b.name, BackendOptions(b.name, b.options),
                                           c10::Device(c.model.device));
    } catch (const Error& e) {
      throw Error(c.file + ": backends: '" + b.label + "': " + e.what());
    }
  }
  if (c.model.preset.empty() && !std::filesystem::is_directory(c.model.path)) {
    throw Error(c.file + ": model.path: '" + c.model.path + "' is not a folder");
  } else if (c.model.preset.empty() && !std::filesystem::is_regular_file(
                                           std::filesystem::path(c.model.path) / "config.json")) {
    throw Error(c.file + ": model.path: '" + c.model.path + "' has no config.json");
  }
  // The model's configuration (no weights): the preset and its overrides, and the prompts and
  // lengths against its vocabulary and context. Texts are checked once encoded, at run time.
  const ModelConfig mc = model_config_of(model_source(c));
  if (c.inputs.texts.empty()) {
    GenerationConfig
        g;  // the experiment's keys; a folder's generation_config.json joins at run time
    for (auto it = c.generation.begin(); it != c.generation.end(); ++it) {
      apply_generation_key(g, it.key(), it.value(), c.file + ": generation");
    }
    const auto prompts = c.inputs.synthetic ? std::vector<std::vector<int64_t>>(
                                                  c.inputs.batch_size,
                                                  std::vector<int64_t>(c.inputs.prompt_length, 0))
                                            : c.inputs.prompts;
    try {
      check_prompts(mc, g, prompts);
    } catch (const Error& e) {
      throw Error(c.file + ": " + e.what());
    }
  }
}

std::vector<std::pair<std::vector<std::string>, ExperimentConfig>> check_experiment(
    const ExperimentConfig& c) {
  auto points = expand_sweep(c);
  for (const auto& [overrides, pc] : points) {
    try {
      check_runnable(pc);
    } catch (const Error& e) {
      if (overrides.empty()) throw;
      throw Error("sweep point [" + join(overrides, ", ") + "]: " + e.what());
    }
  }
  return points;
}

namespace {

// run_point for a configuration check_runnable has passed.
nlohmann::json run_checked_point(const ExperimentConfig& c, std::ostream& log) {
  register_builtin_backends();
  if (c.run.threads > 0) at::set_num_threads(static_cast<int>(c.run.threads));
  const c10::Device device = parse_device(c.model.device);
  const c10::ScalarType dtype = parse_dtype(c.model.dtype);

  // Texts are encoded before the (possibly slow) model load too, so a tokenizer problem fails fast.
  std::vector<std::vector<int64_t>> prompts;
  if (!c.inputs.texts.empty()) {
    log << "encoding " << c.inputs.texts.size() << " text(s) with the tokenizer in " << c.model.path
        << "\n";
    prompts = tokenizer_call(c.model.path, "encode", c.inputs.texts, "ids", log)
                  .get<std::vector<std::vector<int64_t>>>();
  }

  ModelSource src = model_source(c);
  src.load = LoadOptions{dtype, device};
  log << "loading model " << (src.preset.empty() ? src.path.string() : "preset " + src.preset)
      << " (" << c.model.dtype << ", " << c.model.device << ")\n";
  const LoadedModel loaded = [&] {
    try {
      return load_model(src);
    } catch (
        const c10::Error& e) {  // e.g. an allocation for a model.config too big for this machine
      throw Error("loading model " +
                  (src.preset.empty() ? "'" + src.path.string() + "'" : "preset " + src.preset) +
                  " (" + c.model.dtype + ", " + c.model.device +
                  ") failed: " + e.what_without_backtrace());
    }
  }();
  const auto& mc = loaded.model->config();

  std::vector<std::string> ignored;
  const GenerationConfig gen =
      resolve_generation(loaded, c.generation, c.file + ": generation", &ignored);
  if (c.inputs.texts.empty()) {
    prompts = make_inputs(c.inputs, mc.vocab_size);
  } else {
    for (size_t i = 0; i < prompts.size(); ++i) {
      for (const int64_t id : prompts[i]) {
        if (id < 0 || id >= mc.vocab_size) {
          throw Error(c.file + ": inputs.texts[" + std::to_string(i) + "]: the tokenizer in '" +
                      c.model.path + "' gave token id " + std::to_string(id) +
                      ", outside the model's vocabulary [0, " + std::to_string(mc.vocab_size) +
                      "): the tokenizer does not match the model");
        }
      }
    }
  }
  std::function<void()> sync;
  if (device.is_cuda()) sync = [device] { synchronize(device); };
  const Generator generator(gen, sync);

  nlohmann::json doc = results_header(c);
  doc["environment"] = {{"gengraph_commit", gengraph_commit()},
                        {"torch_version", torch_version()},
                        {"device", device_description(device)},
                        {"dtype", c.model.dtype},
                        {"threads", at::get_num_threads()}};
  doc["model"] = {{"source", loaded.source},
                  {"model_type", mc.model_type},
                  {"parameters", loaded.model->parameter_count()},
                  {"layers", mc.num_layers},
                  {"hidden_size", mc.hidden_size},
                  {"vocab_size", mc.vocab_size},
                  {"load_seconds", loaded.load_seconds}};
  doc["generation"] = gen.to_json();
  if (!ignored.empty()) doc["generation_config_ignored_keys"] = ignored;
  doc["inputs"] = {{"batch_size", prompts.size()}, {"prompt_lengths", [&] {
                                                      std::vector<size_t> l;
                                                      for (const auto& p : prompts)
                                                        l.push_back(p.size());
                                                      return l;
                                                    }()}};
  if (!c.inputs.texts.empty()) {
    doc["inputs"]["texts"] = c.inputs.texts;
    doc["inputs"]["prompts"] = prompts;  // as the tokenizer encoded them
  }
  doc["run"] = {
      {"warmup", c.run.warmup},
      {"repeats", c.run.repeats},
      {"seed", c.run.seed},
      {"order", "interleaved: each repeat runs every backend once, the starting backend rotating"}};

  // Build and warm up every backend first, then interleave the timed repeats.
  std::vector<Row> rows;
  for (const auto& spec : c.backends) {
    log << "backend " << spec.label << ": preparing and warming up\n";
    Row row;
    row.spec = spec;
    row.backend = BackendRegistry::instance().create(spec.name, loaded.model,
                                                     BackendOptions(spec.name, spec.options));
    reset_peak_memory(device);
    for (int64_t i = 0; i < c.run.warmup; ++i) {
      at::manual_seed(c.run.seed);
      generator.generate(*row.backend, prompts);
    }
    row.peak_device = peak_memory_bytes(device);
    rows.push_back(std::move(row));
  }
  for (int64_t i = 0; i < c.run.repeats; ++i) {
    for (size_t k = 0; k < rows.size(); ++k) {
      Row& row = rows[(k + static_cast<size_t>(i)) % rows.size()];
      at::manual_seed(c.run.seed);
      const GenerationResult r = generator.generate(*row.backend, prompts);
      const nlohmann::json outputs = outputs_json(r, prompts);
      if (row.outputs.is_null()) row.outputs = outputs;
      row.deterministic = row.deterministic && outputs == row.outputs;
      row.steps = r.timing.steps;
      row.timings.add(r, prompts.size());
    }
  }
  log << "timed " << c.run.repeats << " interleaved repeat(s) of " << rows.size()
      << " backend(s)\n";

  const Bandwidth bandwidth = c.run.bandwidth ? measure_bandwidth(device) : Bandwidth{};
  if (c.run.bandwidth) {
    doc["bandwidth"] = {{"read_bytes_per_second", bandwidth.read},
                        {"copy_bytes_per_second", bandwidth.copy},
                        {"method", bandwidth.method}};
  }
  doc["runs"] = nlohmann::json::array();
  for (auto& row : rows) {
    nlohmann::json run;
    run["label"] = row.spec.label;
    run["backend"] = row.spec.name;
    run["options"] = row.spec.options;
    run["report"] = row.backend->report();
    run["steps"] = row.steps;
    run["deterministic_across_repeats"] = row.deterministic;
    run["outputs"] = row.outputs;
    record_comparison(run, rows.front().outputs);
    run["timings"] = row.timings.to_json();
    run["memory"] = {{"peak_rss_bytes", peak_rss_bytes()}, {"peak_device_bytes", row.peak_device}};
    if (c.run.bandwidth && !row.timings.per_token.empty()) {
      const double mean_len =
          static_cast<double>(prompts.empty() ? 0 : prompts[0].size()) + row.steps / 2.0;
      const double bytes = decode_bytes_per_step(
          *loaded.model, static_cast<int64_t>(prompts.size()) * rows_per_input(gen), mean_len);
      const double step_s = summary(row.timings.per_token)["median"].get<double>() / 1e3;
      run["bandwidth"] = {{"bytes_per_decode_step", bytes},
                          {"achieved_bytes_per_second", bytes / step_s},
                          {"fraction_of_read_bandwidth", bytes / step_s / bandwidth.read},
                          {"fraction_of_copy_bandwidth", bytes / step_s / bandwidth.copy}};
    }
    doc["runs"].push_back(run);
  }
  if (!c.peers.empty()) {
    const PeerModelFolder folder(c, loaded);
    for (const auto& peer : c.peers) {
      nlohmann::json run;
      try {
        throw_if_interrupted();
        run = run_peer(peer, c, folder.path(), gen.to_json(), prompts, log);
        if (doc["runs"].empty()) {
          run["tokens_match_first_row"] = true;
        } else {
          record_comparison(run, doc["runs"][0]["outputs"]);
        }
      } catch (const Interrupted&) {
        throw;  // not a failed peer: the whole run stops
      } catch (const Error& e) {
        // gengraph's rows are measured already: keep them, and say which peer failed and why.
        log << "peer " << peer.label << " FAILED: " << e.what() << "\n";
        run = {{"label", peer.label}, {"backend", "peer:" + peer.name}, {"error", e.what()}};
      }
      doc["runs"].push_back(run);
    }
  }
  if (!c.inputs.texts.empty()) decode_outputs(doc["runs"], c.model.path, log);
  // Ratios to the baseline row (the first when the baseline is not a measured row).
  if (!doc["runs"].empty()) {
    nlohmann::json base = doc["runs"][0];
    for (const auto& r : doc["runs"]) {
      if (r["label"] == c.baseline && !r.contains("error")) base = r;
    }
    for (auto& r : doc["runs"]) {
      if (!r.contains("error") && !base.contains("error"))
        r["vs_baseline"] = ratio_to_baseline(r, base);
    }
  }
  return doc;
}

}  // namespace

nlohmann::json run_point(const ExperimentConfig& c, std::ostream& log) {
  // Backends, their options and the model's configuration are checked before the (possibly slow)
  // model load, so a typo fails fast.
  check_runnable(c);
  return run_checked_point(c, log);
}

nlohmann::json run_experiment(const ExperimentConfig& c, std::ostream& log) {
  const auto points = check_experiment(c);  // every point checked before anything runs
  if (c.sweep.empty()) {
    nlohmann::json doc = run_checked_point(c, log);
    doc["baseline"] = c.baseline;
    return doc;
  }
  nlohmann::json doc = results_header(c);
  doc["baseline"] = c.baseline;
  doc["sweep"] = nlohmann::json::object();
  for (const auto& [key, values] : c.sweep) doc["sweep"][key] = values;
  doc["points"] = nlohmann::json::array();
  for (size_t i = 0; i < points.size(); ++i) {
    log << "sweep point " << i + 1 << "/" << points.size() << ": " << join(points[i].first, ", ")
        << "\n";
    nlohmann::json point = run_checked_point(points[i].second, log);
    point["point"] = points[i].first;
    doc["points"].push_back(point);
  }
  return doc;
}

void check_output_path(const std::filesystem::path& path, const std::string& what) {
  for (std::filesystem::path p = path.parent_path(); !p.empty(); p = p.parent_path()) {
    std::error_code ec;
    const auto st = std::filesystem::status(p, ec);
    if (std::filesystem::exists(st)) {
      if (!std::filesystem::is_directory(st)) {
        throw Error(what + " '" + path.string() + "': '" + p.string() + "' is not a folder");
      }
      break;
    }
    if (p == p.parent_path()) break;
  }
  if (std::filesystem::is_directory(path))
    throw Error(what + " '" + path.string() + "' is a folder, expected a file");
}

void write_outputs(const nlohmann::json& doc, const std::filesystem::path& path,
                   const std::filesystem::path& plot) {
  const InterruptGuard guard;
  std::string text;
  try {
    text = doc.dump(2) + "\n";
  } catch (const nlohmann::json::exception& e) {
    throw Error("cannot write results to '" + path.string() +
                "': they hold text that is not valid UTF-8 (the experiment's name, a label, or a "
                "file name?): " +
                e.what());
  }
  check_output_path(path, "results");
  if (!plot.empty()) check_output_path(plot, "plot");
  // A device, pipe or symlink (/dev/stdout, /dev/null, a link to a file) is written through, never
  // renamed over; the plot then reads a private copy. symlink_status: /dev/stdout is a link whose
  // target may be a regular file when stdout is redirected to one.
  const auto st = std::filesystem::symlink_status(path);
  const bool device = std::filesystem::exists(st) && !std::filesystem::is_regular_file(st);
  const std::filesystem::path tmp =
      device ? std::filesystem::temp_directory_path() /
                   ("gengraph-results-" + std::to_string(::getpid()) + ".json")
             : std::filesystem::path(path.string() + ".tmp");
  const std::filesystem::path plot_tmp =
      plot.empty()
          ? plot
          : plot.parent_path() / (plot.stem().string() + ".tmp" + plot.extension().string());
  auto clean = [&] {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    if (!plot_tmp.empty()) std::filesystem::remove(plot_tmp, ignored);
  };
  try {
    if (!device && path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
    {
      std::ofstream out(tmp);
      if (!out) throw Error("cannot write results to '" + tmp.string() + "'");
      out << text;
      if (!out) throw Error("writing results to '" + tmp.string() + "' failed");
    }
    if (!plot.empty()) {
      if (plot.has_parent_path()) std::filesystem::create_directories(plot.parent_path());
      const std::vector<std::string> argv = {python_for_tools().string(),
                                             (source_root() / "tools" / "plot_results.py").string(),
                                             tmp.string(), plot_tmp.string()};
      const int rc = run_command(argv);
      if (rc != 0 || !std::filesystem::exists(plot_tmp)) {
        throw Error("plot: tools/plot_results.py failed for '" + plot.string() + "' (exit " +
                    std::to_string(rc) +
                    "; any message it printed is above); no results were written");
      }
    }
    if (device) {
      std::ofstream out(path);
      out << text;
      if (!out) throw Error("writing results to '" + path.string() + "' failed");
      std::filesystem::remove(tmp);
    } else {
      std::filesystem::rename(tmp, path);
    }
    if (!plot.empty()) std::filesystem::rename(plot_tmp, plot);
    throw_if_interrupted();
  } catch (const std::filesystem::filesystem_error& e) {
    clean();
    throw Error("writing results to '" + path.string() + "'" +
                (plot.empty() ? "" : " and the plot '" + plot.string() + "'") +
                " failed: " + e.code().message() + " ('" + e.path1().string() + "')");
  } catch (...) {
    clean();
    throw;
  }
}

namespace {

std::string cell(const nlohmann::json& t, const char* key) {
  if (!t.contains(key) || !t.at(key).contains("median")) return "-";
  std::ostringstream s;
  const double m = t.at(key).at("median").get<double>();
  s << std::fixed << std::setprecision(m >= 1000 ? 0 : 2) << m;
  if (t.at(key).at("values").size() > 1) {
    s << " [" << t.at(key).at("min").get<double>() << "-" << t.at(key).at("max").get<double>()
      << "]";
  }
  return s.str();
}

// The "same tokens" cell: from the outputs both rows recorded (so files written when the flag
// still compared scores too read right), else the recorded flag; a score difference is shown.
std::string same_tokens_cell(const nlohmann::json& r, const nlohmann::json& first) {
  if (!r.contains("outputs") || !first.contains("outputs"))
    return r.value("tokens_match_first_row", true) ? "yes" : "NO";
  const OutputComparison c = compare_outputs(first.at("outputs"), r.at("outputs"));
  if (!c.same_tokens) return "NO";
  if (!c.max_score_difference || *c.max_score_difference == 0) return "yes";
  std::ostringstream s;
  s << "yes (scores +-" << std::scientific << std::setprecision(1) << *c.max_score_difference
    << ")";
  return s.str();
}

void point_table(std::ostringstream& o, const nlohmann::json& doc,
                 const std::string& baseline_label) {
  const auto& runs = doc.at("runs");
  if (runs.empty()) return;
  const nlohmann::json* base = &runs.at(0);
  for (const auto& r : runs) {
    if (r.at("label") == baseline_label && !r.contains("error"))
      base = &r;  // a failed peer divides nothing
  }
  o << std::left << std::setw(20) << "row" << std::setw(24) << "first token ms" << std::setw(24)
    << "decode ms/token" << std::setw(24) << "total ms" << std::setw(24) << "tokens/s"
    << std::setw(22) << "vs " + (*base).at("label").get<std::string>() << "same tokens\n";
  for (const auto& r : runs) {
    if (r.contains("error")) {
      o << std::left << std::setw(20) << r.at("label").get<std::string>()
        << "FAILED: " << r.at("error").get<std::string>() << "\n";
      continue;
    }
    // Recomputed from the values, so results files written before vs_baseline existed show it too.
    const nlohmann::json v =
        base->contains("error") ? nlohmann::json::object() : ratio_to_baseline(r, *base);
    std::ostringstream ratio;
    ratio << std::fixed << std::setprecision(2) << v.value("median", 0.0) << "x";
    if (v.contains("low") && &r != base)
      ratio << " [" << v.at("low").get<double>() << "-" << v.at("high").get<double>() << "]";
    o << std::left << std::setw(20) << r.at("label").get<std::string>() << std::setw(24)
      << cell(r.at("timings"), "time_to_first_token_ms") << std::setw(24)
      << cell(r.at("timings"), "decode_ms_per_token") << std::setw(24)
      << cell(r.at("timings"), "total_ms") << std::setw(24)
      << cell(r.at("timings"), "tokens_per_second") << std::setw(22) << ratio.str()
      << same_tokens_cell(r, runs.at(0)) << "\n";
    if (r.contains("bandwidth")) {
      // Results written before the read measurement existed carry only the copy fraction.
      const auto& bw = r.at("bandwidth");
      o << "    decode reads >= " << std::setprecision(1)
        << bw.at("bytes_per_decode_step").get<double>() / 1e6 << " MB/step: ";
      if (bw.contains("fraction_of_read_bandwidth"))
        o << 100 * bw.at("fraction_of_read_bandwidth").get<double>()
          << "% of the measured read (mv) bandwidth, ";
      o << 100 * bw.at("fraction_of_copy_bandwidth").get<double>() << "% of the copy bandwidth\n";
    }
  }
}

void point_header(std::ostringstream& o, const nlohmann::json& doc) {
  o << "model " << doc.at("model").at("source").get<std::string>() << " ("
    << doc.at("model").at("model_type").get<std::string>() << ", "
    << doc.at("model").at("parameters").get<int64_t>() << " parameters), "
    << doc.at("environment").at("device").get<std::string>() << ", "
    << doc.at("environment").at("dtype").get<std::string>() << ", batch "
    << doc.at("inputs").at("batch_size").get<int64_t>() << ", "
    << doc.at("run").at("repeats").get<int64_t>() << " repeats (median [min-max])\n"
    << "'vs' = baseline total time / row total time: for rows timed in the same interleaved "
       "repeats, the median"
    << " of per-repeat ratios [its order-statistic interval, "
    << ratio_confidence_text(doc.at("run").at("repeats").get<int64_t>())
    << "]; for peers, the ratio of medians\n";
  if (doc.contains("bandwidth")) {
    const auto& bw = doc.at("bandwidth");
    o << "measured bandwidth: " << std::fixed << std::setprecision(1);
    if (bw.contains("read_bytes_per_second"))
      o << "read (mv) " << bw.at("read_bytes_per_second").get<double>() / 1e9 << " GB/s, ";
    o << "copy " << bw.at("copy_bytes_per_second").get<double>() / 1e9 << " GB/s\n";
  }
}

}  // namespace

std::vector<std::string> failed_runs(const nlohmann::json& doc) {
  std::vector<std::string> out;
  auto scan = [&](const nlohmann::json& point, const std::string& where) {
    for (const auto& r : point.at("runs")) {
      if (r.contains("error")) out.push_back(r.at("label").get<std::string>() + where);
    }
  };
  if (doc.contains("points")) {
    for (const auto& p : doc.at("points"))
      scan(p, " [" + join(p.at("point").get<std::vector<std::string>>(), ", ") + "]");
  } else {
    scan(doc, "");
  }
  return out;
}

std::string format_table(const nlohmann::json& doc) {
  std::ostringstream o;
  const std::string baseline = doc.value("baseline", "");
  o << "experiment " << doc.at("experiment").get<std::string>() << "\n";
  if (doc.contains("points")) {
    for (const auto& p : doc.at("points")) {
      o << "\n[" << join(p.at("point").get<std::vector<std::string>>(), ", ") << "] ";
      point_header(o, p);
      point_table(o, p, baseline);
    }
    return o.str();
  }
  point_header(o, doc);
  point_table(o, doc, baseline);
  if (!doc.at("runs").empty()) {
    o << "generated tokens (" << doc.at("runs").at(0).at("label").get<std::string>() << "):\n";
    int shown = 0;
    for (const auto& in : doc.at("runs").at(0).at("outputs")) {
      if (++shown > 4) {
        o << "  ...\n";
        break;
      }
      for (const auto& s : in.at("sequences")) {
        o << "  input " << in.at("input").get<int64_t>() << ": " << s.at("tokens").dump();
        if (s.contains("score")) o << "  score " << s.at("score").get<double>();
        o << "\n";
        if (s.contains("text")) o << "    text: " << s.at("text").dump() << "\n";
      }
    }
  }
  return o.str();
}

}  // namespace gengraph

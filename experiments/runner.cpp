#include "experiments/runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <sstream>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include "framework/backend/backend_registry.h"
#include "framework/decoding/generator.h"
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
  return g;
}

nlohmann::json run_experiment(const ExperimentConfig& c, std::ostream& log) {
  register_builtin_backends();
  if (c.run.threads > 0) at::set_num_threads(static_cast<int>(c.run.threads));
  const c10::Device device = parse_device(c.model.device);
  const c10::ScalarType dtype = parse_dtype(c.model.dtype);
  // Every backend is resolved before the (possibly slow) model load, so a typo fails fast.
  for (const auto& b : c.backends) BackendRegistry::instance().get(b.name);

  ModelSource src;
  src.preset = c.model.preset;
  src.path = c.model.path;
  src.config_overrides = c.model.config_overrides;
  src.seed = c.model.seed;
  src.load = LoadOptions{dtype, device};
  log << "loading model " << (src.preset.empty() ? src.path.string() : "preset " + src.preset)
      << " (" << c.model.dtype << ", " << c.model.device << ")\n";
  const LoadedModel loaded = load_model(src);
  const auto& mc = loaded.model->config();

  std::vector<std::string> ignored;
  const GenerationConfig gen =
      resolve_generation(loaded, c.generation, c.file + ": generation", &ignored);
  const auto prompts = make_inputs(c.inputs, mc.vocab_size);
  std::function<void()> sync;
  if (device.is_cuda()) sync = [device] { synchronize(device); };
  const Generator generator(gen, sync);

  nlohmann::json doc;
  doc["schema_version"] = 1;
  doc["experiment"] = c.name;
  doc["config_file"] = c.file;
  doc["created"] = now_iso8601();
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
  doc["inputs"] = {{"batch_size", prompts.size()},
                   {"prompt_lengths", [&] {
                      std::vector<size_t> l;
                      for (const auto& p : prompts) l.push_back(p.size());
                      return l;
                    }()}};
  doc["run"] = {{"warmup", c.run.warmup}, {"repeats", c.run.repeats}, {"seed", c.run.seed}};
  doc["runs"] = nlohmann::json::array();

  for (const auto& spec : c.backends) {
    log << "backend " << spec.label << ": preparing\n";
    auto backend = BackendRegistry::instance().create(spec.name, loaded.model,
                                                      BackendOptions(spec.name, spec.options));
    reset_peak_memory(device);
    for (int64_t i = 0; i < c.run.warmup; ++i) {
      at::manual_seed(c.run.seed);
      generator.generate(*backend, prompts);
    }
    std::vector<double> ttft, total, per_token, tps;
    nlohmann::json first_outputs;
    bool deterministic = true;
    int64_t steps = 0;
    for (int64_t i = 0; i < c.run.repeats; ++i) {
      at::manual_seed(c.run.seed);
      const GenerationResult r = generator.generate(*backend, prompts);
      const nlohmann::json outputs = outputs_json(r, prompts);
      if (i == 0) first_outputs = outputs;
      deterministic = deterministic && outputs == first_outputs;
      steps = r.timing.steps;
      ttft.push_back(r.timing.time_to_first_token_s * 1e3);
      total.push_back(r.timing.total_s * 1e3);
      if (r.timing.steps > 1) {
        per_token.push_back((r.timing.total_s - r.timing.time_to_first_token_s) * 1e3 /
                            static_cast<double>(r.timing.steps - 1));
      }
      tps.push_back(static_cast<double>(prompts.size() * r.timing.steps) / r.timing.total_s);
    }
    nlohmann::json run;
    run["label"] = spec.label;
    run["backend"] = spec.name;
    run["options"] = spec.options;
    run["report"] = backend->report();
    run["steps"] = steps;
    run["deterministic_across_repeats"] = deterministic;
    run["outputs"] = first_outputs;
    run["timings"] = {{"time_to_first_token_ms", summary(ttft)},
                      {"decode_ms_per_token", summary(per_token)},
                      {"total_ms", summary(total)},
                      {"tokens_per_second", summary(tps)}};
    run["memory"] = {{"peak_rss_bytes", peak_rss_bytes()},
                     {"peak_device_bytes", peak_memory_bytes(device)}};
    doc["runs"].push_back(run);
    log << "backend " << spec.label << ": done\n";
  }
  return doc;
}

void write_results(const nlohmann::json& doc, const std::filesystem::path& path) {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp);
    if (!out) throw Error("cannot write results to '" + tmp.string() + "'");
    out << doc.dump(2) << "\n";
    if (!out) throw Error("writing results to '" + tmp.string() + "' failed");
  }
  std::filesystem::rename(tmp, path);
}

std::string format_table(const nlohmann::json& doc) {
  std::ostringstream o;
  auto med = [](const nlohmann::json& t, const char* key) -> std::string {
    if (!t.contains(key) || !t[key].contains("median")) return "-";
    std::ostringstream s;
    s << std::fixed << std::setprecision(2) << t[key]["median"].get<double>();
    if (t[key]["values"].size() > 1) {
      s << " [" << std::setprecision(2) << t[key]["min"].get<double>() << "-"
        << t[key]["max"].get<double>() << "]";
    }
    return s.str();
  };
  o << "experiment " << doc["experiment"].get<std::string>() << ": model "
    << doc["model"]["source"].get<std::string>() << " (" << doc["model"]["model_type"].get<std::string>()
    << ", " << doc["model"]["parameters"].get<int64_t>() << " parameters), "
    << doc["environment"]["device"].get<std::string>() << ", " << doc["environment"]["dtype"].get<std::string>()
    << ", batch " << doc["inputs"]["batch_size"].get<int64_t>() << ", " << doc["run"]["repeats"].get<int64_t>()
    << " repeats (median [min-max])\n";
  o << std::left << std::setw(16) << "backend" << std::setw(22) << "first token ms" << std::setw(22)
    << "decode ms/token" << std::setw(22) << "total ms" << std::setw(22) << "tokens/s"
    << "steps\n";
  for (const auto& r : doc["runs"]) {
    const auto& t = r["timings"];
    o << std::left << std::setw(16) << r["label"].get<std::string>() << std::setw(22)
      << med(t, "time_to_first_token_ms") << std::setw(22) << med(t, "decode_ms_per_token")
      << std::setw(22) << med(t, "total_ms") << std::setw(22) << med(t, "tokens_per_second")
      << r["steps"].get<int64_t>() << "\n";
  }
  if (!doc["runs"].empty()) {
    o << "generated tokens (" << doc["runs"][0]["label"].get<std::string>() << "):\n";
    int shown = 0;
    for (const auto& in : doc["runs"][0]["outputs"]) {
      if (++shown > 4) {
        o << "  ...\n";
        break;
      }
      for (const auto& s : in["sequences"]) {
        o << "  input " << in["input"].get<int64_t>() << ": " << s["tokens"].dump();
        if (s.contains("score")) o << "  score " << s["score"].get<double>();
        o << "\n";
      }
    }
  }
  return o.str();
}

}  // namespace gengraph

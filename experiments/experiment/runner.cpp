#include "experiments/experiment/runner.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "backends/register_builtin.h"
#include "engine/engine_access.h"
#include "experiments/results/bandwidth.h"
#include "experiments/results/results.h"
#include "experiments/results/statistics.h"
#include "experiments/tools/peers.h"
#include "experiments/tools/process.h"
#include "experiments/tools/python_tools.h"
#include "experiments/tools/text_io.h"
#include "framework/backend/backend_registry.h"
#include "framework/decoding/generation_defaults.h"
#include "framework/decoding/generator.h"
#include "framework/decoding/pipeline.h"
#include "framework/model/loader.h"
#include "framework/model/memory.h"
#include "framework/model/model_registry.h"
#include "framework/util/device.h"
#include "framework/util/error.h"
#include "framework/util/version.h"

namespace gengraph {
namespace {

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

struct Timings {
  std::vector<double> ttft, total, per_token, tps;
  void add(const Generation& r, size_t batch) {
    ttft.push_back(r.time_to_first_token_s * 1e3);
    total.push_back(r.seconds * 1e3);
    if (r.steps > 1) {
      per_token.push_back((r.seconds - r.time_to_first_token_s) * 1e3 /
                          static_cast<double>(r.steps - 1));
    }
    tps.push_back(static_cast<double>(batch * r.steps) / r.seconds);
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
  const Model* model = nullptr;  // the experiment's model, or the row's form of it
  std::string weights;           // its weight format, described
  // One Engine per row, on the experiment's Model (or its other form): its backend, and its
  // generator kept across repeats (a whole-step graph serves every repeat).
  std::unique_ptr<Engine> engine;
  nlohmann::json settings;  // the generation keys it runs with (the experiment's and its own)
  Timings timings;
  nlohmann::json outputs;
  bool deterministic = true;
  int64_t steps = 0;
  int64_t peak_device = 0;
  Generation last;       // the last timed generation (its loop report)
  double capture_s = 0;  // the whole-step graph's capture, in whichever generation made it
};

// The experiment's model as the public Model loads it: "preset:NAME" or the folder, in the form
// `model:` asks for.
std::string model_name(const ModelSpec& m) {
  return m.preset.empty() ? m.path : "preset:" + m.preset;
}

ModelOptions model_options(const ModelSpec& m) {
  ModelOptions o;
  o.device = m.device;
  const c10::ScalarType dtype = parse_dtype(m.dtype);
  o.dtype = dtype == at::kBFloat16 ? DType::kBFloat16
            : dtype == at::kHalf   ? DType::kFloat16
                                   : DType::kFloat32;
  o.fused = m.fused;
  o.check_weights = m.check_weights;
  o.weights = m.weights;
  o.group_size = m.group_size;
  o.quantize_head = m.quantize_head;
  o.int8_head = m.int8_head;
  o.int8_activation_rows = m.int8_activation_rows;
  o.int8_activation_block = m.int8_activation_block;
  if (!m.preset.empty()) {
    o.model_config = m.config_overrides;
    o.weights_seed = m.seed;
  }
  return o;
}

// A row's generation settings: the experiment's, under the row's own `generation:` keys.
nlohmann::json row_generation(const ExperimentConfig& c, const BackendSpec& spec) {
  nlohmann::json g = c.generation;
  for (auto it = spec.generation.begin(); it != spec.generation.end(); ++it) g[it.key()] = *it;
  return g;
}

RunOptions run_options(const BackendSpec& spec) {
  RunOptions o;
  o.backend = spec.name;
  o.backend_options = spec.options;
  o.whole_step = spec.loop.whole_step;
  o.capture = spec.loop.capture;
  o.sync_every = spec.loop.sync_every;
  return o;
}

// Where the experiment's model comes from (no dtype or device: callers that load add them).
WeightFormat weight_format(const ModelSpec& m) {
  WeightFormat f;
  f.kind = parse_weight_kind(m.weights, "model.weights");
  f.group_size = m.group_size;
  f.lm_head = m.quantize_head;
  f.int8_head = m.int8_head;
  f.int8_activation_rows = m.int8_activation_rows;
  f.int8_activation_block = m.int8_activation_block;
  return f;
}

// The model a row runs on: the experiment's, in the row's weight format (`model:`) and form
// (`fused`). The unfused form computes transformers' way, weights as loaded.
ModelSpec row_model_spec(const ExperimentConfig& c, const BackendSpec& b) {
  ModelSpec m = b.model.value_or(c.model);
  if (b.fused) m.fused = *b.fused;
  if (!m.fused) {
    m.weights = "float";
    m.int8_head = false;
    m.int8_activation_rows = 0;
  }
  return m;
}

// What tells two rows' models apart: the runner loads one model per distinct key.
std::string form_key(const ModelSpec& m) {
  return weight_format(m).describe() + (m.fused ? "" : ", unfused");
}

ModelSource model_source(const ExperimentConfig& c) {
  ModelSource src;
  src.preset = c.model.preset;
  src.path = c.model.path;
  src.config_overrides = c.model.config_overrides;
  src.seed = c.model.seed;
  return src;
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
    // A whole step that must be captured needs the model on CUDA; say so before any work.
    if (b.loop.whole_step == LoopOptions::WholeStep::kOn && b.loop.capture &&
        c.model.device.rfind("cuda", 0) != 0) {
      throw Error(c.file + ": backends: '" + b.label +
                  "': loop.whole_step: on with capture: true needs model.device: cuda (found " +
                  c.model.device + "); set loop.capture: false to run the whole step uncaptured");
    }
  }
  if (c.model.preset.empty()) {
    try {
      check_model_folder(c.model.path);
    } catch (const Error& e) {
      throw Error(c.file + ": model.path: " + e.what());
    }
  }
  // The model's configuration (no weights): the preset and its overrides, and the prompts and
  // lengths against its vocabulary and context. Texts are checked once encoded, at run time.
  const ModelSource src = model_source(c);
  const ModelConfig mc = model_config_of(src);
  // The generation settings exactly as `run` resolves them (the folder's generation_config.json
  // under the experiment's keys), and the pipeline they make: unknown processors, stopping
  // criteria or strategies, wrong parameter types and values, and impossible combinations fail
  // here, in `validate` and `submit`, not in every task of a submitted job.
  // Errors name the experiment file (those of its own keys do already).
  const auto in_file = [&](const Error& e) {
    const std::string what = e.what();
    return what.rfind(c.file, 0) == 0 ? Error(what) : Error(c.file + ": " + what);
  };
  // The folder's generation_config.json, read once, under the experiment's or a row's keys.
  nlohmann::json defaults;  // read inside the try below, so that its errors name the file too
  const std::string defaults_source =
      src.preset.empty() ? src.path.string() : "preset:" + src.preset;
  const auto resolve = [&](const nlohmann::json& keys, const std::string& where) {
    return resolve_generation(mc, defaults, defaults_source, keys, where);
  };
  GenerationConfig g;
  try {
    if (src.preset.empty()) defaults = read_generation_defaults(src.path);
    g = resolve(c.generation, c.file + ": generation");
  } catch (const Error& e) {
    throw in_file(e);
  }
  // A peer that cannot honour a setting is refused here, not after gengraph's rows have run.
  for (const auto& peer : c.peers) {
    const std::string why = peer_refusal(peer.name, g, c.model.device, c.model.dtype);
    if (!why.empty()) throw Error(c.file + ": peers: '" + peer.label + "' cannot run " + why);
  }
  // The longest prompt decides the lengths: a synthetic batch is checked as one prompt of its
  // length (its ids are drawn inside the vocabulary), so nothing batch-sized is built here. Texts
  // are encoded at run time; one token stands for them here.
  const auto prompts =
      !c.inputs.texts.empty() ? std::vector<std::vector<int64_t>>{std::vector<int64_t>(1, 0)}
      : c.inputs.synthetic
          ? std::vector<std::vector<int64_t>>{std::vector<int64_t>(c.inputs.prompt_length, 0)}
          : c.inputs.prompts;
  int64_t max_length = 0;
  int64_t prompt_length = 0;
  try {
    max_length = check_prompts(mc, g, prompts);
    for (const auto& p : prompts)
      prompt_length = std::max<int64_t>(prompt_length, static_cast<int64_t>(p.size()));
    build_pipeline(g, max_length, prompt_length, mc.vocab_size);
  } catch (const Error& e) {
    throw in_file(e);
  }
  // Inputs of the generation: one prompt per text, the synthetic batch, or the prompts.
  const size_t inputs = !c.inputs.texts.empty() ? c.inputs.texts.size()
                        : c.inputs.synthetic    ? static_cast<size_t>(c.inputs.batch_size)
                                                : c.inputs.prompts.size();
  // Each row's own settings (`generation:` over the experiment's), checked the same way.
  for (const auto& b : c.backends) {
    GenerationConfig rg = g;
    try {
      if (!b.generation.empty()) {
        rg = resolve(row_generation(c, b), "generation");
        const int64_t row_max = check_prompts(mc, rg, prompts);
        build_pipeline(rg, row_max, prompt_length, mc.vocab_size);
      }
      if (rg.speculative() && inputs != 1) {
        throw Error(
            "speculative decoding verifies one sequence at a time, as transformers' "
            "assisted generation does: found " +
            std::to_string(inputs) + " inputs; give one prompt or text");
      }
    } catch (const Error& e) {
      throw Error(c.file + ": backends: '" + b.label + "': " + e.what());
    }
  }
  if (c.inputs.texts.empty()) {
    const double batch = c.inputs.synthetic ? static_cast<double>(c.inputs.batch_size)
                                            : static_cast<double>(prompts.size());
    // Before any load: the weights, the KV cache of every row (batch x beams or sequences), the
    // prefill (quadratic in the prompt), a decode step and the search's state, against what the
    // device (and this process's limits) have available. The largest need of any row counts.
    GenerationShape shape;
    shape.inputs = batch;
    shape.rows_per_input = static_cast<double>(rows_per_input(g));
    shape.prompt_length = static_cast<double>(prompt_length);
    shape.max_length = static_cast<double>(max_length);
    shape.beam_search = g.num_beams > 1;
    ModelConfig sized = mc;
    sized.fused = c.model.fused;
    for (const auto& b : c.backends) {
      const auto cache = b.options.find("cache"), share = b.options.find("share_prefill");
      if (b.name != "eager" || (cache != b.options.end() && cache->second == "static"))
        shape.static_cache = true;
      if (share != b.options.end() && share->second == "false") shape.shared_prefill = false;
      if (b.fused && !*b.fused) sized.fused = false;
    }
    const c10::ScalarType dtype = parse_dtype(c.model.dtype);
    const Architecture& arch = ModelRegistry::instance().get(mc.model_type, mc.source);
    const MemoryEstimate need = estimate_generation_memory(sized, dtype, shape, &arch);
    // Each further form of the model that rows ask for (`fused`, `model:`) is loaded beside it:
    // the checkpoint's weights again and its own projections (quantized or fused) besides them,
    // counted as 1.5 times the weights (the most any format holds).
    std::set<std::string> forms{form_key(c.model)};
    double further = 0;
    for (const auto& b : c.backends) {
      if (forms.insert(form_key(row_model_spec(c, b))).second) further += 1.5 * need.weights;
    }
    const std::string further_text = further > 0 ? ", " + std::to_string(forms.size() - 1) +
                                                       " further form(s) of the model " +
                                                       human_bytes(further)
                                                 : std::string();
    check_memory(c.file + ": this experiment (" + need.breakdown() + further_text + ")",
                 need.total() + further, c10::Device(c.model.device),
                 "lower inputs (batch_size or prompts), the prompt length, generation.num_beams / "
                 "num_return_sequences, generation.max_new_tokens, or the model's size");
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
nlohmann::json run_checked_point(const ExperimentConfig& c, std::ostream& log,
                                 const TokenStream& stream = {}) {
  register_builtin_backends();
  install_aoti_export_tool();  // backend aoti builds its package on first use
  if (c.run.threads > 0) at::set_num_threads(static_cast<int>(c.run.threads));
  const c10::Device device = parse_device(c.model.device);

  // Texts are encoded before the (possibly slow) model load too, so a tokenizer problem fails fast.
  std::vector<std::vector<int64_t>> prompts;
  std::unique_ptr<TextCodec> codec;
  std::vector<std::string> chat_prompts;
  if (!c.inputs.texts.empty()) {
    codec = std::make_unique<TextCodec>(
        c.model.path, parse_tokenizer_choice(c.inputs.tokenizer, c.file + ": inputs.tokenizer"),
        log);
    log << "encoding " << c.inputs.texts.size() << " text(s)"
        << (c.inputs.chat ? " as chat messages" : "") << " with the tokenizer ("
        << codec->description() << ")\n";
    if (c.inputs.chat) {
      // The template's markers are in the prompt text already: nothing more is added.
      chat_prompts = codec->chat_prompts(c.inputs.texts);
      prompts = codec->encode(chat_prompts, false, c.file + ": inputs.texts (chat)");
    } else {
      prompts = codec->encode(c.inputs.texts, true, c.file + ": inputs.texts");
    }
  }

  // The model, loaded once as the public Model; every row is an Engine on it (or on the form of
  // it the row asks for, loaded once per form below).
  const WeightFormat weights = weight_format(c.model);
  const ModelOptions options = model_options(c.model);
  log << "loading model " << (c.model.preset.empty() ? c.model.path : "preset " + c.model.preset)
      << " (" << c.model.dtype << ", " << c.model.device
      << (weights.quantized() ? ", weights " + weights.describe() : "") << ")\n";
  const Model model(model_name(c.model), options);
  const LoadedModel& loaded = EngineAccess::loaded(model);
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

  nlohmann::json doc = results_header(c);
  doc["environment"] = {{"gengraph_commit", gengraph_commit()},
                        {"torch_version", torch_version()},
                        {"device", device_description(device)},
                        {"dtype", c.model.dtype},
                        {"threads", at::get_num_threads()}};
  doc["model"] = {{"source", loaded.source},
                  {"model_type", mc.model_type},
                  {"fused", c.model.fused},
                  {"weights", weights.describe()},
                  {"parameters", loaded.model->parameter_count()},
                  {"layers", mc.num_layers},
                  {"hidden_size", mc.hidden_size},
                  {"vocab_size", mc.vocab_size},
                  {"load_seconds", loaded.load_seconds}};
  if (!loaded.warnings.empty()) {
    doc["model"]["warnings"] = loaded.warnings;
    for (const auto& w : loaded.warnings) log << "warning: " << w << "\n";
  }
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
    doc["inputs"]["tokenizer"] = codec->description();
    if (c.inputs.chat) doc["inputs"]["chat_prompts"] = chat_prompts;  // the template's output
    doc["inputs"]["prompts"] = prompts;  // as the tokenizer encoded them
  }
  doc["run"] = {
      {"warmup", c.run.warmup},
      {"repeats", c.run.repeats},
      {"seed", c.run.seed},
      {"order", "interleaved: each repeat runs every backend once, the starting backend rotating"}};

  // Build and warm up every backend first, then interleave the timed repeats.
  std::vector<Row> rows;
  // The model in each other form or weight format that rows ask for (`fused`, `model:`), loaded
  // once per form.
  const std::string main_form = form_key(c.model);
  std::map<std::string, std::unique_ptr<Model>> other_forms;
  for (const auto& spec : c.backends) {
    log << "backend " << spec.label << ": preparing and warming up\n";
    Row row;
    row.spec = spec;
    const ModelSpec row_spec = row_model_spec(c, spec);
    row.weights = weight_format(row_spec).describe();
    const Model* row_model = &model;
    const std::string form = form_key(row_spec);
    if (form != main_form) {
      auto& other = other_forms[form];
      if (!other) {
        log << "loading the model again (" << form << ") for " << spec.label << "\n";
        other = std::make_unique<Model>(model_name(c.model), model_options(row_spec));
      }
      row_model = other.get();
    }
    row.model = row_model;
    row.engine = std::make_unique<Engine>(*row_model, run_options(spec));
    row.settings = row_generation(c, spec);
    reset_peak_memory(device);
    for (int64_t i = 0; i < c.run.warmup; ++i) {
      at::manual_seed(c.run.seed);
      const Generation r = row.engine->generate(prompts, row.settings);
      row.capture_s = std::max(row.capture_s, r.capture_s);
      if (i == 0 && !r.whole_step_fallback.empty()) {
        log << "backend " << spec.label
            << ": whole step not possible, host loop: " << r.whole_step_fallback << "\n";
      }
    }
    row.peak_device = peak_memory_bytes(device);
    rows.push_back(std::move(row));
  }
  for (int64_t i = 0; i < c.run.repeats; ++i) {
    for (size_t k = 0; k < rows.size(); ++k) {
      Row& row = rows[(k + static_cast<size_t>(i)) % rows.size()];
      at::manual_seed(c.run.seed);
      const bool streamed = stream && i == 0 && &row == &rows.front();
      Generation r = row.engine->generate(prompts, row.settings, streamed ? stream : TokenStream());
      row.capture_s = std::max(row.capture_s, r.capture_s);
      const nlohmann::json outputs = outputs_json(r, prompts);
      if (row.outputs.is_null()) row.outputs = outputs;
      row.deterministic = row.deterministic && outputs == row.outputs;
      row.steps = r.steps;
      row.timings.add(r, prompts.size());
      row.last = std::move(r);
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
    run["fused"] = row.spec.fused.value_or(c.model.fused);
    run["weights"] = row.weights;
    run["report"] = row.engine->backend_report();
    run["loop"] = {{"whole_step", whole_step_name(row.spec.loop.whole_step)},
                   {"capture", row.spec.loop.capture},
                   {"sync_every", row.spec.loop.sync_every},
                   {"ran_whole_step", row.last.whole_step},
                   {"captured", row.last.captured},
                   {"fallback", row.last.whole_step_fallback},
                   {"steps_run", row.last.steps_run},
                   {"flag_reads", row.last.flag_reads},
                   {"capture_seconds", row.capture_s}};
    if (!row.spec.generation.empty()) run["generation"] = row.spec.generation;
    if (row.last.verify_steps > 0) {
      // Speculative decoding, in the last timed repeat: every token after the first came from a
      // verify forward.
      const Generation& g = row.last;
      run["speculation"] = {{"verify_steps", g.verify_steps},
                            {"candidates_proposed", g.candidates_proposed},
                            {"candidates_accepted", g.candidates_accepted},
                            {"acceptance_rate", g.candidates_proposed > 0
                                                    ? static_cast<double>(g.candidates_accepted) /
                                                          static_cast<double>(g.candidates_proposed)
                                                    : 0.0},
                            {"tokens_per_verify", static_cast<double>(g.steps - 1) /
                                                      static_cast<double>(g.verify_steps)},
                            {"propose_ms", g.propose_s * 1e3},
                            {"verify_ms", g.verify_s * 1e3}};
    }
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
          *EngineAccess::loaded(*row.model).model,
          static_cast<int64_t>(prompts.size()) * rows_per_input(gen), mean_len);
      const double step_s = summary(row.timings.per_token)["median"].get<double>() / 1e3;
      // What the step moved besides that minimum: the beam reorder's cache traffic.
      const auto report = row.engine->backend_report();
      const auto reorder = report.find("reorder_bytes_per_step");
      const double moved = bytes + (reorder == report.end() ? 0.0 : reorder->get<double>());
      run["bandwidth"] = {{"bytes_per_decode_step", bytes},
                          {"bytes_moved_per_step", moved},
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
  if (codec) decode_outputs(doc["runs"], *codec);
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

nlohmann::json run_experiment(const ExperimentConfig& c, std::ostream& log,
                              const TokenStream& stream) {
  const auto points = check_experiment(c);  // every point checked before anything runs
  if (c.sweep.empty()) {
    nlohmann::json doc = run_checked_point(c, log, stream);
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
    nlohmann::json point = run_checked_point(points[i].second, log, stream);
    point["point"] = points[i].first;
    doc["points"].push_back(point);
  }
  return doc;
}

}  // namespace gengraph

#include "experiments/experiment/runner.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <functional>
#include <map>
#include <memory>

#include "backends/register_builtin.h"
#include "experiments/experiment/load_runner.h"
#include "experiments/experiment/row_forms.h"
#include "experiments/results/bandwidth.h"
#include "experiments/results/results.h"
#include "experiments/results/statistics.h"
#include "experiments/tools/process.h"
#include "experiments/tools/python_tools.h"
#include "experiments/tools/text_io.h"
#include "framework/util/clock.h"
#include "framework/util/device.h"
#include "framework/util/error.h"
#include "framework/util/progress.h"
#include "framework/util/strings.h"
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
  // One Engine per row, on the experiment's Model (or its other form): its backend, and its
  // generator kept across repeats (a whole-step graph serves every repeat).
  std::unique_ptr<Engine> engine;
  Plan plan;  // made once: every warm-up and timed repeat executes it
  Timings timings;
  nlohmann::json outputs;
  bool deterministic = true;
  int64_t steps = 0;
  int64_t peak_device = 0;
  Generation last;       // the last timed generation (its loop report)
  double capture_s = 0;  // the whole-step graph's capture, in whichever generation made it
};

// The prompts of the experiment: texts encoded (before the model loads, so that a tokenizer
// problem fails fast), else explicit ids or a synthetic batch (made once the vocabulary is known).
struct Inputs {
  std::vector<std::vector<int64_t>> prompts;
  std::unique_ptr<TextCodec> codec;
  std::vector<std::string> chat_prompts;  // the chat template's output, when inputs.chat
};

Inputs encode_texts(const ExperimentConfig& c, std::ostream& log) {
  Inputs in;
  if (!c.inputs.has_texts()) return in;
  in.codec = std::make_unique<TextCodec>(
      c.model.path, parse_tokenizer_choice(c.inputs.tokenizer, c.file + ": inputs.tokenizer"), log);
  if (!c.inputs.messages.empty()) {
    log << "encoding " << c.inputs.messages.size()
        << " conversation(s) in the chat template with the tokenizer (" << in.codec->description()
        << ")\n";
    in.chat_prompts = in.codec->chat_conversations(c.inputs.messages);
    in.prompts = in.codec->encode(in.chat_prompts, false, c.file + ": inputs.messages");
    return in;
  }
  log << "encoding " << c.inputs.texts.size() << " text(s)"
      << (c.inputs.chat ? " as chat messages" : "") << " with the tokenizer ("
      << in.codec->description() << ")\n";
  if (c.inputs.chat) {
    // The template's markers are in the prompt text already: nothing more is added.
    in.chat_prompts = in.codec->chat_prompts(c.inputs.texts);
    in.prompts = in.codec->encode(in.chat_prompts, false, c.file + ": inputs.texts (chat)");
  } else {
    in.prompts = in.codec->encode(c.inputs.texts, true, c.file + ": inputs.texts");
  }
  return in;
}

// The prompts once the model is loaded: the synthetic batch drawn, or the texts' ids checked
// against the vocabulary (a tokenizer that does not match the model).
void complete_inputs(const ExperimentConfig& c, int64_t vocab, Inputs& in) {
  if (!c.inputs.has_texts()) {
    in.prompts = make_inputs(c.inputs, vocab);
    return;
  }
  for (size_t i = 0; i < in.prompts.size(); ++i) {
    for (const int64_t id : in.prompts[i]) {
      if (id < 0 || id >= vocab) {
        throw Error(c.file + ": inputs.texts[" + std::to_string(i) + "]: the tokenizer in '" +
                    c.model.path + "' gave token id " + std::to_string(id) +
                    ", outside the model's vocabulary [0, " + std::to_string(vocab) +
                    "): the tokenizer does not match the model");
      }
    }
  }
}

// The model in every form the rows ask for, each loaded once.
class Forms {
 public:
  Forms(const ExperimentConfig& c, std::ostream& log) : c_(c), log_(log) {
    const WeightFormat weights = weight_format(c.model);
    log << "loading model " << (c.model.preset.empty() ? c.model.path : "preset " + c.model.preset)
        << " (" << c.model.dtype << ", " << c.model.device
        << (weights.quantized() ? ", weights " + weights.describe() : "") << ")\n";
    main_ = std::make_unique<Model>(model_name(c.model), model_options(c.model));
  }
  const Model& main() const { return *main_; }
  // The model `spec`'s row runs on: the main one, or its form loaded on first use.
  const Model& of(const BackendSpec& spec) {
    const ModelSpec row_spec = row_model_spec(c_, spec);
    const std::string form = form_key(row_spec);
    if (form == form_key(c_.model)) return *main_;
    auto& other = others_[form];
    if (!other) {
      log_ << "loading the model again (" << form << ") for " << spec.label << "\n";
      other = std::make_unique<Model>(model_name(c_.model), model_options(row_spec));
    }
    return *other;
  }

 private:
  const ExperimentConfig& c_;
  std::ostream& log_;
  std::unique_ptr<Model> main_;
  std::map<std::string, std::unique_ptr<Model>> others_;
};

// Every row's Engine and plan, warmed up.
std::vector<Row> prepare_rows(const ExperimentConfig& c, Forms& forms,
                              const std::vector<std::vector<int64_t>>& prompts,
                              const c10::Device& device, std::ostream& log) {
  std::vector<Row> rows;
  for (const auto& spec : c.backends) {
    log << "backend " << spec.label << ": preparing and warming up\n";
    Row row;
    row.spec = spec;
    row.model = &forms.of(spec);
    row.engine = std::make_unique<Engine>(*row.model, run_options(spec));
    try {
      row.plan = row.engine->plan(prompts, row_generation(c, spec));
    } catch (const Error& e) {
      throw Error(c.file + ": backends: '" + spec.label + "': " + e.what());
    }
    reset_peak_memory(device);
    Progress shown("backend " + spec.label + ": warm-up", c.run.warmup, 0, loop_position_text,
                   progress_mode_for(log));
    for (int64_t i = 0; i < c.run.warmup; ++i) {
      at::manual_seed(c.run.seed);
      const Generation r = row.engine->generate(row.plan, prompts);
      shown.advance();
      row.capture_s = std::max(row.capture_s, r.capture_s);
      if (i == 0 && !r.whole_step_fallback.empty()) {
        shown.log(log, "backend " + spec.label +
                           ": whole step not possible, host loop: " + r.whole_step_fallback);
      }
    }
    row.peak_device = peak_memory_bytes(device);
    rows.push_back(std::move(row));
  }
  return rows;
}

// A peer timed in turn with the rows (run.peer_order: interleaved): one process a repeat, each
// with its own warm-up, its rows kept until they are merged; the first failure ends its turns.
struct PeerTurns {
  const PeerSpec* peer = nullptr;
  std::vector<nlohmann::json> repeats;
  std::string error;
};

// The timed repeats, interleaved: each repeat runs every row once, and every interleaved peer
// once, the starting one rotating.
void time_rows(const ExperimentConfig& c, std::vector<Row>& rows,
               const std::vector<std::vector<int64_t>>& prompts, const TokenStream& stream,
               std::ostream& log, std::vector<PeerTurns>& peers,
               const std::function<void(PeerTurns&)>& peer_turn) {
  const size_t items = rows.size() + peers.size();
  const int64_t runs = c.run.repeats * static_cast<int64_t>(items);
  // A stream shows the tokens as they come: no display beside it.
  Progress shown(runs == 1 ? "generating" : "timed repeats", runs == 1 ? 0 : runs, 0,
                 loop_position_text, stream ? ProgressMode::kOff : progress_mode_for(log));
  for (int64_t i = 0; i < c.run.repeats; ++i) {
    for (size_t k = 0; k < items; ++k) {
      const size_t j = (k + static_cast<size_t>(i)) % items;
      if (j >= rows.size()) {
        peer_turn(peers[j - rows.size()]);
        shown.advance();
        continue;
      }
      Row& row = rows[j];
      at::manual_seed(c.run.seed);
      const bool streamed = stream && i == 0 && &row == &rows.front();
      Generation r = row.engine->generate(row.plan, prompts, streamed ? stream : TokenStream());
      row.capture_s = std::max(row.capture_s, r.capture_s);
      const nlohmann::json outputs = outputs_json(r, prompts);
      if (row.outputs.is_null()) row.outputs = outputs;
      row.deterministic = row.deterministic && outputs == row.outputs;
      row.steps = r.steps;
      row.timings.add(r, prompts.size());
      row.last = std::move(r);
      shown.advance();
    }
  }
  shown.finish();
  log << "timed " << c.run.repeats << " interleaved repeat(s) of " << rows.size() << " backend(s)"
      << (peers.empty() ? "" : " and " + std::to_string(peers.size()) + " peer(s)") << "\n";
}

// Speculative decoding, in the last timed repeat: every token after the first came from a
// verify forward.
nlohmann::json speculation_json(const Generation& g) {
  return {
      {"verify_steps", g.verify_steps},
      {"candidates_proposed", g.candidates_proposed},
      {"candidates_accepted", g.candidates_accepted},
      {"acceptance_rate", g.candidates_proposed > 0 ? static_cast<double>(g.candidates_accepted) /
                                                          static_cast<double>(g.candidates_proposed)
                                                    : 0.0},
      {"tokens_per_verify", static_cast<double>(g.steps - 1) / static_cast<double>(g.verify_steps)},
      {"propose_ms", g.propose_s * 1e3},
      {"verify_ms", g.verify_s * 1e3}};
}

// A row's entry in the results' `runs`.
nlohmann::json row_json(const ExperimentConfig& c, const Row& row, const Row& first,
                        const std::vector<std::vector<int64_t>>& prompts,
                        const Bandwidth& bandwidth) {
  nlohmann::json run;
  run["label"] = row.spec.label;
  run["backend"] = row.spec.name;
  run["options"] = row.spec.options;
  run["fused"] = row.spec.fused.value_or(c.model.fused);
  run["weights"] = row.model->describe()["weights"];
  const auto report = row.engine->backend_report();
  run["report"] = report;
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
  if (row.last.verify_steps > 0) run["speculation"] = speculation_json(row.last);
  run["steps"] = row.steps;
  run["deterministic_across_repeats"] = row.deterministic;
  run["outputs"] = row.outputs;
  record_comparison(run, first.outputs);
  run["timings"] = row.timings.to_json();
  run["memory"] = {{"peak_rss_bytes", peak_rss_bytes()}, {"peak_device_bytes", row.peak_device}};
  if (c.run.bandwidth && !row.timings.per_token.empty()) {
    const double mean_len =
        static_cast<double>(prompts.empty() ? 0 : prompts[0].size()) + row.steps / 2.0;
    const double bytes = row.model->decode_read_bytes(
        static_cast<int64_t>(prompts.size()) * row.plan.rows_per_input(), mean_len);
    const double step_s = summary(row.timings.per_token)["median"].get<double>() / 1e3;
    // What the step moved besides that minimum: the beam reorder's cache traffic.
    const auto reorder = report.find("reorder_bytes_per_step");
    const double moved = bytes + (reorder == report.end() ? 0.0 : reorder->get<double>());
    run["bandwidth"] = {{"bytes_per_decode_step", bytes},
                        {"bytes_moved_per_step", moved},
                        {"achieved_bytes_per_second", bytes / step_s},
                        {"fraction_of_read_bandwidth", bytes / step_s / bandwidth.read},
                        {"fraction_of_copy_bandwidth", bytes / step_s / bandwidth.copy}};
  }
  return run;
}

// A peer's row beside the rows before it: whether its tokens are the first row's.
void add_peer_row(nlohmann::json run, nlohmann::json& doc) {
  if (!run.contains("error")) {
    if (doc["runs"].empty()) {
      run["tokens_match_first_row"] = true;
    } else {
      record_comparison(run, doc["runs"][0]["outputs"]);
    }
  }
  doc["runs"].push_back(std::move(run));
}

nlohmann::json failed_peer(const PeerSpec& peer, const std::string& why, std::ostream& log) {
  // gengraph's rows are measured already: keep them, and say which peer failed and why.
  log << "peer " << peer.label << " FAILED: " << why << "\n";
  return {{"label", peer.label}, {"backend", "peer:" + peer.name}, {"error", why}};
}

// The peers' rows, after gengraph's: a peer that fails is recorded with its reason.
void add_peer_rows(const ExperimentConfig& c, const Model& model, const nlohmann::json& settings,
                   const std::vector<std::vector<int64_t>>& prompts, nlohmann::json& doc,
                   std::ostream& log) {
  const PeerModelFolder folder(c, model);
  for (const auto& peer : c.peers) {
    try {
      throw_if_interrupted();
      add_peer_row(run_peer(peer, c, folder.path(), settings, prompts, log), doc);
    } catch (const Interrupted&) {
      throw;  // not a failed peer: the whole run stops
    } catch (const Error& e) {
      add_peer_row(failed_peer(peer, e.what(), log), doc);
    }
  }
}

// The results document's header: the environment, the model, the settings and the inputs.
nlohmann::json results_document(const ExperimentConfig& c, const Model& model,
                                const Plan& settings_plan, const Inputs& in,
                                const c10::Device& device, std::ostream& log) {
  nlohmann::json doc = results_header(c);
  doc["environment"] = {{"gengraph_commit", gengraph_commit()},
                        {"torch_version", torch_version()},
                        {"device", device_description(device)},
                        {"dtype", c.model.dtype},
                        {"threads", at::get_num_threads()}};
  doc["model"] = model.describe();
  if (!model.warnings().empty()) {
    doc["model"]["warnings"] = model.warnings();
    for (const auto& w : model.warnings()) log << "warning: " << w << "\n";
  }
  doc["generation"] = settings_plan.settings();
  if (!settings_plan.ignored_keys().empty())
    doc["generation_config_ignored_keys"] = settings_plan.ignored_keys();
  std::vector<size_t> lengths;
  for (const auto& p : in.prompts) lengths.push_back(p.size());
  doc["inputs"] = {{"batch_size", in.prompts.size()}, {"prompt_lengths", lengths}};
  if (c.inputs.has_texts()) {
    if (!c.inputs.texts.empty()) doc["inputs"]["texts"] = c.inputs.texts;
    if (!c.inputs.messages.empty()) doc["inputs"]["messages"] = c.inputs.messages;
    doc["inputs"]["tokenizer"] = in.codec->description();
    if (c.inputs.chat) doc["inputs"]["chat_prompts"] = in.chat_prompts;  // the template's output
    doc["inputs"]["prompts"] = in.prompts;  // as the tokenizer encoded them
  }
  doc["run"] = {
      {"warmup", c.run.warmup},
      {"repeats", c.run.repeats},
      {"seed", c.run.seed},
      {"order", "interleaved: each repeat runs every backend once, the starting backend rotating"},
      {"peer_order", c.run.peer_order == "interleaved"
                         ? "interleaved: each repeat runs every peer once too (a process each, "
                           "with its own warm-up), in the same rotation"
                         : "after: each peer in one process after gengraph's rows"}};
  return doc;
}

// Ratios to the baseline row (the first when the baseline is not a measured row).
void add_ratios(const ExperimentConfig& c, nlohmann::json& runs) {
  if (runs.empty()) return;
  nlohmann::json base = runs[0];
  for (const auto& r : runs) {
    if (r["label"] == c.baseline && !r.contains("error")) base = r;
  }
  for (auto& r : runs) {
    if (!r.contains("error") && !base.contains("error"))
      r["vs_baseline"] = ratio_to_baseline(r, base);
  }
}

// run_point for a configuration check_runnable has passed: inputs, the model's forms, every row
// prepared and timed, then the results document.
nlohmann::json run_checked_point(const ExperimentConfig& c, std::ostream& log,
                                 const TokenStream& stream = {}) {
  register_builtin_backends();
  install_aoti_export_tool();  // backend aoti builds its package on first use
  if (c.run.threads > 0) at::set_num_threads(static_cast<int>(c.run.threads));
  const c10::Device device = parse_device(c.model.device);

  Inputs in = encode_texts(c, log);
  // The model, loaded once as the public Model; every row is an Engine on it (or on the form of
  // it the row asks for, loaded once per form).
  Forms forms(c, log);
  complete_inputs(c, forms.main().vocab_size(), in);

  // Build and warm up every backend first, then interleave the timed repeats.
  std::vector<Row> rows = prepare_rows(c, forms, in.prompts, device, log);

  // The experiment's own settings as resolved: a row without settings of its own runs exactly
  // them (its plan says so); otherwise they are planned once more, for the record and the peers.
  const Row* plain = nullptr;
  for (const auto& row : rows) {
    if (row.spec.generation.empty()) {
      plain = &row;
      break;
    }
  }
  std::unique_ptr<Engine> planner;  // only for an experiment of peers alone
  if (!plain && rows.empty()) planner = std::make_unique<Engine>(forms.main());
  const Plan settings_plan =
      plain ? plain->plan
            : (rows.empty() ? *planner : *rows.front().engine).plan(in.prompts, c.generation);

  const bool interleaved = c.run.peer_order == "interleaved" && !c.peers.empty();
  std::unique_ptr<PeerModelFolder> peer_folder;
  std::vector<PeerTurns> turns;
  ExperimentConfig one_repeat = c;
  one_repeat.run.repeats = 1;
  if (interleaved) {
    peer_folder = std::make_unique<PeerModelFolder>(c, forms.main());
    for (const auto& peer : c.peers) turns.push_back(PeerTurns{&peer, {}, {}});
  }
  time_rows(c, rows, in.prompts, stream, log, turns, [&](PeerTurns& t) {
    if (!t.error.empty()) return;
    try {
      throw_if_interrupted();
      t.repeats.push_back(run_peer(*t.peer, one_repeat, peer_folder->path(),
                                   settings_plan.settings(), in.prompts, log));
    } catch (const Interrupted&) {
      throw;
    } catch (const Error& e) {
      t.error = e.what();
    }
  });

  nlohmann::json doc = results_document(c, forms.main(), settings_plan, in, device, log);
  const Bandwidth bandwidth = c.run.bandwidth ? measure_bandwidth(device) : Bandwidth{};
  if (c.run.bandwidth) {
    doc["bandwidth"] = {{"read_bytes_per_second", bandwidth.read},
                        {"copy_bytes_per_second", bandwidth.copy},
                        {"method", bandwidth.method}};
  }
  doc["runs"] = nlohmann::json::array();
  for (const auto& row : rows)
    doc["runs"].push_back(row_json(c, row, rows.front(), in.prompts, bandwidth));
  for (const auto& t : turns) {
    add_peer_row(
        t.error.empty() ? merge_peer_repeats(t.repeats) : failed_peer(*t.peer, t.error, log), doc);
  }
  if (!c.peers.empty() && !interleaved)
    add_peer_rows(c, forms.main(), settings_plan.settings(), in.prompts, doc, log);
  if (in.codec) decode_outputs(doc["runs"], *in.codec, c.inputs.skip_special());
  add_ratios(c, doc["runs"]);
  return doc;
}

// A `serve:` file is a server, not an experiment: it runs with `gengraph serve`. An experiment
// runs its prompts as one batch under its generation: block, so a prompt file (inputs.file) whose
// lines hold settings of their own, conversations, or texts beside token ids is for gengraph
// generate --prompts.
void refuse_server(const ExperimentConfig& c) {
  if (c.serve) {
    throw Error(c.file + ": serve: this file configures a server; start it with gengraph serve " +
                c.file);
  }
  if (!c.inputs.prompt_file) return;
  const PromptFile& f = *c.inputs.prompt_file;
  const PromptLine* text = nullptr;
  const PromptLine* ids = nullptr;
  for (const auto& p : f.lines) {
    const std::string at =
        c.file + ": inputs.file: '" + f.path + "' line " + std::to_string(p.line) + ": ";
    if (p.has_settings()) {
      throw Error(at + "settings of its own; an experiment's prompts share its generation: block " +
                  "(gengraph generate --prompts takes settings per line)");
    }
    if (!p.messages.is_null()) {
      throw Error(at + "messages; an experiment takes texts or token ids (gengraph generate " +
                  "--prompts takes conversations)");
    }
    if (p.is_text() && text == nullptr) text = &p;
    if (!p.is_text() && ids == nullptr) ids = &p;
  }
  if (text != nullptr && ids != nullptr) {
    throw Error(c.file + ": inputs.file: '" + f.path + "': texts (line " +
                std::to_string(text->line) + ") beside token ids (line " +
                std::to_string(ids->line) + "); an experiment's prompts are all of one kind");
  }
}

}  // namespace

nlohmann::json run_point(const ExperimentConfig& c, std::ostream& log) {
  // Backends, their options and the model's configuration are checked before the (possibly slow)
  // model load, so a typo fails fast.
  check_runnable(c);
  refuse_server(c);
  if (c.load) return run_load_experiment(c, log);
  return run_checked_point(c, log);
}

nlohmann::json run_experiment(const ExperimentConfig& c, std::ostream& log,
                              const TokenStream& stream) {
  refuse_server(c);
  const auto points = check_experiment(c);         // every point checked before anything runs
  if (c.load) return run_load_experiment(c, log);  // requests under load (load_runner.h)
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
  const auto start = Clock::now();
  for (size_t i = 0; i < points.size(); ++i) {
    log << "sweep point " << i + 1 << "/" << points.size() << ": " << join(points[i].first, ", ");
    if (i > 0) {  // the points so far, and an estimate of the rest at their pace
      const double elapsed = since(start);
      log << " (" << progress_duration(elapsed) << " so far, about "
          << progress_duration(elapsed / i * (points.size() - i)) << " left)";
    }
    log << "\n";
    nlohmann::json point = run_checked_point(points[i].second, log, stream);
    point["point"] = points[i].first;
    doc["points"].push_back(point);
  }
  return doc;
}

}  // namespace gengraph

#include "experiments/experiment/experiment_config.h"

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "experiments/experiment/yaml_input.h"
#include "experiments/tools/peers.h"
#include "framework/decoding/resolved_settings.h"
#include "framework/model/gguf.h"
#include "framework/model/known_models.h"
#include "framework/quant/weight_format.h"
#include "framework/util/error.h"
#include "framework/util/files.h"
#include "framework/util/strings.h"

namespace gengraph {

WeightFormatKeys weight_keys(const ModelSpec& m) {
  WeightFormatKeys keys;
  keys.weights = m.weights;
  keys.group_size = m.group_size;
  keys.quantize_head = m.quantize_head;
  keys.int8_head = m.int8_head;
  keys.int8_activation_rows = m.int8_activation_rows;
  keys.int8_activation_block = m.int8_activation_block;
  keys.fused = m.fused;
  return keys;
}

namespace {

// The weight-format keys (model.weights, group_size, quantize_head, int8_head,
// int8_activation_rows, int8_activation_block), read over `m`'s values, then checked together by
// the one weight-format parser (framework/quant/weight_format.h). A row's `model:` reads them over
// the experiment's; `inherited` names where a key the mapping does not hold came from ("the
// default" or "the experiment's model:"), for the combination's errors.
void read_weight_format(MapReader& r, ModelSpec& m, const std::string& inherited) {
  m.weights = r.scalar<std::string>("weights", m.weights, "float, int8, int4 or bfloat16");
  m.group_size = r.scalar<int64_t>("group_size", m.group_size, kGroupSizes);
  m.quantize_head = r.scalar<bool>("quantize_head", m.quantize_head, "true or false");
  if (r.has("int8_head")) m.int8_head = r.scalar<bool>("int8_head", false, "true or false");
  m.int8_activation_rows = r.integer("int8_activation_rows", m.int8_activation_rows, 0, 1 << 20);
  m.int8_activation_block = r.integer("int8_activation_block", m.int8_activation_block, 0, 1 << 20);
  const WeightFormatKeys keys = weight_keys(m);
  // An error names the key where the file sets it; one the mapping does not hold shows its
  // inherited value and where it came from.
  WeightKeyNames names;
  names.name = [&](std::string_view key) { return r.located(std::string(key)); };
  names.found = [&](std::string_view key, const std::string& value) {
    const std::string k(key);
    return r.has(k) ? describe(r.child(k)) : value + " (" + inherited + ")";
  };
  parse_weight_format(keys, names);
}

ModelSpec read_model(MapReader r, const std::string& file) {
  ModelSpec m;
  m.preset = r.scalar<std::string>("preset", "", "a preset name");
  m.path = r.scalar<std::string>("path", "", "a model folder path");
  m.name = r.scalar<std::string>("name", "", "a known model name (see gengraph models)");
  const std::string gguf = r.scalar<std::string>("gguf", "", "a GGUF file's path");
  const int given = !m.preset.empty() + !m.path.empty() + !m.name.empty() + !gguf.empty();
  if (given != 1) {
    const char* key = given == 0        ? "preset"
                      : !gguf.empty()   ? "gguf"
                      : !m.name.empty() ? "name"
                      : !m.path.empty() ? "path"
                                        : "preset";
    r.fail(key,
           "exactly one of model.preset, model.path or model.name (model.gguf is a model.path "
           "that must be a GGUF file)");
  }
  if (!gguf.empty()) {
    // model.path takes a GGUF file too; model.gguf says that it must be one.
    if (!is_gguf_file(gguf)) {
      r.fail("gguf", "a GGUF file (one that begins with the bytes 'GGUF')");
    }
    m.path = gguf;
  }
  if (r.has("config")) {
    const YAML::Node c = r.child("config");
    if (!c.IsMap()) r.fail("config", "a mapping of config.json keys");
    if (!m.path.empty()) {
      r.fail("config", "no config overrides with model.path or model.gguf (edit config.json)");
    }
    if (!m.name.empty())
      r.fail("config", "no config overrides with model.name (a real model's shape is its own)");
    m.config_overrides = to_json(c);
  }
  if (!m.name.empty()) {
    // The folder the set-up made for it: what the run loads and records as the model's source.
    const YAML::Node n = r.child("name");
    try {
      m.path = resolve_known_model(m.name).string();
    } catch (const Error& e) {
      throw Error(where(file, n) + "model.name: " + e.what());
    }
  }
  m.seed = r.seed("seed", 0);
  m.dtype = r.choice("dtype", "float32", {"float32", "bfloat16", "float16"});
  m.device = r.scalar<std::string>("device", "cpu", "cpu, cuda or cuda:N");
  m.fused = r.scalar<bool>("fused", true, "true or false");
  m.check_weights = r.scalar<bool>("check_weights", true, "true or false");
  read_weight_format(r, m, "the default");
  const bool ok = m.device == "cpu" || m.device == "cuda" ||
                  (m.device.rfind("cuda:", 0) == 0 && m.device.size() > 5 &&
                   m.device.find_first_not_of("0123456789", 5) == std::string::npos);
  if (!ok) r.fail("device", "cpu, cuda or cuda:N");
  r.finish();
  return m;
}

nlohmann::json read_generation(MapReader r, const YAML::Node& node, const std::string& file);

BackendSpec read_backend(const YAML::Node& n, const std::string& path, const std::string& file,
                         const ModelSpec& model) {
  BackendSpec b;
  if (n.IsScalar()) {
    b.name = n.Scalar();
  } else {
    MapReader r(n, path, file);
    b.name = r.scalar<std::string>("name", "", "a backend name");
    if (b.name.empty()) r.fail("name", "a backend name");
    b.label = r.scalar<std::string>("label", "", "a label");
    if (r.has("fused")) b.fused = r.scalar<bool>("fused", true, "true or false");
    if (r.has("loop")) {
      const YAML::Node l = r.child("loop");
      if (!l.IsMap()) r.fail("loop", "a mapping with whole_step, capture and sync_every");
      MapReader lr(l, path + ".loop", file);
      b.loop.whole_step =
          parse_whole_step(lr.choice("whole_step", "on", {"off", "auto", "on"}), path + ".loop");
      b.loop.capture = lr.scalar<bool>("capture", true, "true or false");
      b.loop.sync_every = lr.integer("sync_every", 4, 1, 1 << 20);
      lr.finish();
    }
    if (r.has("generation")) {
      const YAML::Node g = r.child("generation");
      if (!g.IsMap()) r.fail("generation", "a mapping of generation keys (over the experiment's)");
      b.generation = read_generation(MapReader(g, path + ".generation", file), g, file);
    }
    if (r.has("model")) {
      // The model's weight format for this row, over the experiment's: its rows beside others'
      // in one run (the runner loads each format once).
      const YAML::Node m = r.child("model");
      if (!m.IsMap())
        r.fail("model", "a mapping of weight-format keys (over the experiment's model:)");
      MapReader mr(m, path + ".model", file);
      ModelSpec row = model;
      row.fused = b.fused.value_or(model.fused);  // checked against the row's form
      read_weight_format(mr, row, "the experiment's model:");
      mr.finish();
      row.fused = model.fused;  // the runner applies the row's own `fused` key
      b.model = row;
    }
    if (r.has("options")) {
      const YAML::Node o = r.child("options");
      if (!o.IsMap()) r.fail("options", "a mapping of backend options");
      for (auto it = o.begin(); it != o.end(); ++it) {
        if (!it->second.IsScalar()) {
          throw Error(where(file, it->second) + path + ".options." + it->first.as<std::string>() +
                      ": expected a scalar value, found " + describe(it->second));
        }
        b.options[it->first.as<std::string>()] = it->second.Scalar();
      }
    }
    r.finish();
  }
  if (b.label.empty()) b.label = b.name;
  return b;
}

InputsSpec read_inputs(MapReader r, const std::string& file) {
  InputsSpec in;
  const int given =
      r.has("prompts") + r.has("synthetic") + r.has("texts") + r.has("file") + r.has("messages");
  if (given != 1) {
    r.fail(r.has("texts")       ? "texts"
           : r.has("synthetic") ? "synthetic"
           : r.has("file")      ? "file"
           : r.has("messages")  ? "messages"
                                : "prompts",
           "exactly one of inputs.prompts (token-id lists), inputs.texts, inputs.messages, "
           "inputs.file or inputs.synthetic");
  }
  if (r.has("file")) {
    // The prompts of a file (prompt_file.h): a path as model.path is, from the current folder.
    in.file = r.scalar<std::string>("file", "", "a file path");
    if (in.file.empty()) r.fail("file", "a file path (one prompt per line, or JSON Lines)");
    try {
      in.prompt_file = std::make_shared<const PromptFile>(read_prompt_file(in.file));
    } catch (const Error& e) {
      throw Error(r.located("file") + ": " + e.what());
    }
    bool any_text = false, any_ids = false, plain = true;
    for (const auto& p : in.prompt_file->lines) {
      any_text = any_text || p.is_text();
      any_ids = any_ids || !p.ids.empty();
      plain = plain && p.messages.is_null() && !p.has_settings();
    }
    for (const auto& p : in.prompt_file->lines) {
      if (!plain || (any_text && any_ids)) break;
      if (p.is_text()) in.texts.push_back(p.text);
      if (!p.ids.empty()) in.prompts.push_back(p.ids);
    }
  }
  if (r.has("texts") || r.has("file") || r.has("messages")) {
    in.skip_special_tokens =
        r.has("skip_special_tokens")
            ? std::optional<bool>(r.scalar<bool>("skip_special_tokens", false, "true or false"))
            : std::nullopt;
  }
  if (r.has("file")) {
    in.tokenizer = r.choice("tokenizer", "auto", {"auto", "native", "python"});
    in.chat = r.scalar<bool>("chat", false, "true or false");
  } else if (r.has("texts")) {
    const YAML::Node t = r.child("texts");
    if (!t.IsSequence() || t.size() == 0) r.fail("texts", "a non-empty list of strings");
    for (size_t i = 0; i < t.size(); ++i) {
      const std::string path = "inputs.texts[" + std::to_string(i) + "]";
      if (!t[i].IsScalar() || t[i].Scalar().empty()) {
        throw Error(where(file, t[i]) + path + ": expected a non-empty string, found " +
                    describe(t[i]));
      }
      in.texts.push_back(t[i].Scalar());
    }
    in.tokenizer = r.choice("tokenizer", "auto", {"auto", "native", "python"});
    in.chat = r.scalar<bool>("chat", false, "true or false");
  } else if (r.has("messages")) {
    // Conversations in the model's chat template, with its generation prompt.
    in.messages = chat_conversations(r.child("messages"), "inputs.messages", file);
    in.tokenizer = r.choice("tokenizer", "auto", {"auto", "native", "python"});
    in.chat = true;
  } else if (r.has("prompts")) {
    const YAML::Node p = r.child("prompts");
    if (!p.IsSequence() || p.size() == 0) r.fail("prompts", "a non-empty list of token-id lists");
    for (size_t i = 0; i < p.size(); ++i) {
      const std::string path = "inputs.prompts[" + std::to_string(i) + "]";
      in.prompts.push_back(token_list(p[i], path, file));
      if (in.prompts.back().empty()) {
        throw Error(where(file, p[i]) + path +
                    ": expected at least one token, found an empty list");
      }
    }
  } else {
    in.synthetic = true;
    MapReader s(r.child("synthetic"), "inputs.synthetic", file);
    in.batch_size = s.integer("batch_size", 1, 1, 4096);
    in.prompt_length = s.integer("prompt_length", 0, 1, 1 << 20);
    if (!s.has("prompt_length")) s.fail("prompt_length", "a prompt length (tokens)");
    in.seed = s.seed("seed", 0);
    s.finish();
  }
  r.finish();
  return in;
}

nlohmann::json read_generation(MapReader r, const YAML::Node& node, const std::string& file) {
  nlohmann::json out = nlohmann::json::object();
  if (!node.IsMap()) return out;
  ResolvedSettings probe;
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string key = it->first.as<std::string>();
    const nlohmann::json value = to_json(it->second);
    try {
      apply_generation_key(probe, key, value, "generation");
    } catch (const Error& e) {
      throw Error(where(file, it->second.IsNull() ? it->first : it->second) + e.what());
    }
    out[key] = value;
  }
  (void)r;
  return out;
}

}  // namespace

bool sbatch_option_name(const std::string& k) {
  return !k.empty() && k[0] != '-' &&
         k.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") == std::string::npos;
}

bool sbatch_option_value(const std::string& v) {
  for (const char ch : v) {
    if (static_cast<unsigned char>(ch) < 0x20 || ch == '"' || ch == '\'' || ch == '\\' ||
        ch == '`' || ch == '$')
      return false;
  }
  return true;
}

bool sbatch_option_set_by_gengraph(const std::string& k) {
  for (const char* own : {"array", "output", "error", "chdir", "job-name", "parsable"})
    if (k == own) return true;
  return false;
}

namespace {

ClusterSpec read_cluster(MapReader r, const YAML::Node& node, const std::string& file) {
  ClusterSpec c;
  auto text = [&](const std::string& key, const std::string& expected) {
    const std::string v = r.scalar<std::string>(key, "", expected);
    if (!sbatch_option_value(v))
      r.fail(key, expected + " (no quotes, '$', '`' or control characters)");
    return v;
  };
  c.partition = text("partition", "a partition name");
  c.time = text("time", "a time limit as Slurm writes it (MM, HH:MM:SS or D-HH:MM:SS)");
  if (!c.time.empty() && c.time.find_first_not_of("0123456789:-") != std::string::npos)
    r.fail("time", "a time limit as Slurm writes it (MM, HH:MM:SS or D-HH:MM:SS)");
  c.gpus = r.integer("gpus", 0, 0, 1024);
  c.cpus = r.integer("cpus", 0, 0, 100000);
  c.memory = text("memory", "a memory size as Slurm writes it, e.g. 64G");
  if (!c.memory.empty() && (c.memory.find_first_not_of("0123456789KMGTkmgt") != std::string::npos ||
                            !std::isdigit(static_cast<unsigned char>(c.memory[0])))) {
    r.fail("memory", "a memory size as Slurm writes it, e.g. 64G");
  }
  if (r.has("options")) {
    const YAML::Node o = r.child("options");
    if (!o.IsMap()) r.fail("options", "a mapping of sbatch options (without --) to values");
    for (auto it = o.begin(); it != o.end(); ++it) {
      const std::string k = it->first.as<std::string>();
      if (!sbatch_option_name(k) || !it->second.IsScalar() ||
          !sbatch_option_value(it->second.Scalar())) {
        throw Error(where(file, it->first) + "cluster.options." + k +
                    ": expected an sbatch long option name (letters, digits, '-') with a plain "
                    "value");
      }
      if (sbatch_option_set_by_gengraph(k)) {
        throw Error(where(file, it->first) + "cluster.options." + k + ": gengraph submit sets --" +
                    k + " itself");
      }
      c.options[k] = it->second.Scalar();
    }
  }
  (void)node;
  r.finish();
  return c;
}

// `load:` and `serving:`: the requests come from the load's seed, so `inputs:` has no place,
// and one run replays them through one backend; a sweep or peers are refused by name.
void read_load_sections(MapReader& r, ExperimentConfig& c, const std::string& file) {
  const SchedulerOptions serving =
      read_serving(MapReader(r.child("serving"), "serving", file), SchedulerOptions{}, file);
  c.load = read_load(MapReader(r.child("load"), "load", file), serving, file);
  const std::string why = " with load: (";
  if (r.has("inputs")) r.fail("inputs", "no inputs:" + why + "the load makes its own prompts)");
  if (r.has("peers")) r.fail("peers", "no peers:" + why + "its systems are the rows)");
  if (r.has("sweep")) r.fail("sweep", "no sweep:" + why + "run one file per setting)");
  if (r.has("backends") && r.child("backends").IsSequence() && r.child("backends").size() != 1)
    r.fail("backends", "one backend" + why + "every system runs on it)");
}

ExperimentConfig parse_root(YAML::Node root, const std::string& file, const std::string& stem) {
  if (!root.IsMap()) {
    throw Error(file + ": expected a mapping at the top level (model:, backends:, inputs:, ...)");
  }
  MapReader r(root, "", file);
  ExperimentConfig c;
  c.file = file;
  c.name = r.scalar<std::string>("name", stem, "a name");
  if (!r.has("model")) r.fail("model", "a model: mapping (preset, path or name)");
  c.model = read_model(MapReader(r.child("model"), "model", file), file);
  if (r.has("backend") && r.has("backends"))
    r.fail("backend", "either backend or backends, not both");
  if (r.has("backends")) {
    const YAML::Node list = r.child("backends");
    if (!list.IsSequence() || list.size() == 0) r.fail("backends", "a non-empty list of backends");
    for (size_t i = 0; i < list.size(); ++i) {
      c.backends.push_back(
          read_backend(list[i], "backends[" + std::to_string(i) + "]", file, c.model));
    }
  } else if (r.has("backend")) {
    c.backends.push_back(read_backend(r.child("backend"), "backend", file, c.model));
  } else {
    BackendSpec eager;
    eager.name = eager.label = "eager";
    c.backends.push_back(eager);
  }
  std::set<std::string> labels;
  for (const auto& b : c.backends) {
    if (!labels.insert(b.label).second) {
      throw Error(file + ": backends: the label '" + b.label +
                  "' is used twice; give each entry a distinct label:");
    }
  }
  if (r.has("load")) {
    // Requests made from the load: section's seed, replayed through its systems.
    read_load_sections(r, c, file);
  } else if (r.has("serve")) {
    // A server (gengraph serve): requests bring their prompts and settings.
    c.serve = read_serve(r, file);
  } else if (r.has("serving")) {
    r.fail("serving",
           "no serving: without a load: or serve: section (it configures their scheduler)");
  } else {
    if (!r.has("inputs")) r.fail("inputs", "an inputs: mapping (prompts, texts or synthetic)");
    c.inputs = read_inputs(MapReader(r.child("inputs"), "inputs", file), file);
  }
  bool file_texts = false;  // a prompt file's texts or conversations need the tokenizer too
  if (c.inputs.prompt_file) {
    for (const auto& p : c.inputs.prompt_file->lines) file_texts = file_texts || p.ids.empty();
  }
  if (c.inputs.has_texts() || file_texts) {
    const std::string what = !c.inputs.file.empty()       ? "inputs.file (texts)"
                             : !c.inputs.messages.empty() ? "inputs.messages"
                                                          : "inputs.texts";
    // Texts are encoded with the model folder's own tokenizer; a preset has none.
    if (c.model.path.empty()) {
      throw Error(file + ": " + what +
                  ": needs model.path, a folder with a Hugging Face tokenizer; "
                  "model.preset '" +
                  c.model.preset +
                  "' has none (give inputs.prompts as token ids instead, or a real model as "
                  "model.name: see gengraph models)");
    }
    const std::filesystem::path folder(c.model.path);
    if (std::filesystem::is_directory(folder) &&
        !std::filesystem::exists(folder / "tokenizer.json") &&
        !std::filesystem::exists(folder / "tokenizer_config.json")) {
      throw Error(file + ": " + what + ": the model folder '" + c.model.path +
                  "' has no tokenizer (expected tokenizer.json or tokenizer_config.json)");
    }
  }
  c.generation = read_generation(MapReader(r.child("generation"), "generation", file),
                                 r.child("generation"), file);
  MapReader run(r.child("run"), "run", file);
  c.run.warmup = run.integer("warmup", 1, 0, 1000);
  c.run.repeats = run.integer("repeats", 3, 1, 100000);
  c.run.seed = run.seed("seed", 0);
  c.run.threads = run.integer("threads", 0, 0, 1024);
  c.run.bandwidth = run.scalar<bool>("bandwidth", false, "true or false");
  c.run.peer_timeout_s = run.integer("peer_timeout_s", 0, 0, 1000000);
  c.run.peer_order = run.choice("peer_order", "after", {"after", "interleaved"});
  run.finish();
  if (r.has("peers")) {
    const YAML::Node list = r.child("peers");
    const std::vector<std::string>& known = peer_names();
    if (!list.IsSequence()) r.fail("peers", "a list of peers (" + join(known, ", ") + ")");
    for (size_t i = 0; i < list.size(); ++i) {
      PeerSpec p;
      const std::string path = "peers[" + std::to_string(i) + "]";
      if (list[i].IsScalar()) {
        p.name = list[i].Scalar();
      } else {
        MapReader pr(list[i], path, file);
        p.name = pr.scalar<std::string>("name", "", "a peer name");
        p.label = pr.scalar<std::string>("label", "", "a label");
        pr.finish();
      }
      if (std::find(known.begin(), known.end(), p.name) == known.end()) {
        throw Error(where(file, list[i]) + path + ": unknown peer '" + p.name + "'" +
                    did_you_mean(p.name, known) + "; peers: " + join(known, ", "));
      }
      if (p.label.empty()) p.label = p.name;
      if (!labels.insert(p.label).second) {
        throw Error(where(file, list[i]) + path + ": the label '" + p.label + "' is already used");
      }
      c.peers.push_back(p);
    }
  }
  if (r.has("sweep")) {
    const YAML::Node sw = r.child("sweep");
    if (!sw.IsMap() || sw.size() == 0)
      r.fail("sweep", "a mapping of dotted keys to lists of values");
    for (auto it = sw.begin(); it != sw.end(); ++it) {
      const std::string key = it->first.as<std::string>();
      if (!it->second.IsSequence() || it->second.size() == 0) {
        throw Error(where(file, it->second) + "sweep." + key +
                    ": expected a non-empty list of values, found " + describe(it->second));
      }
      std::vector<std::string> values;
      // A named copy: `it->second` lives in a proxy that dies before a range-for over it ends
      // (AddressSanitizer: stack-use-after-scope).
      const YAML::Node listed = it->second;
      for (const auto& v : listed) {
        YAML::Emitter e;
        e << YAML::Flow << v;
        values.push_back(e.c_str());
      }
      c.sweep.emplace_back(key, values);
    }
  }
  c.baseline = r.scalar<std::string>("baseline", "", "a backend or peer label");
  if (!c.baseline.empty() && !labels.count(c.baseline)) {
    std::vector<std::string> all(labels.begin(), labels.end());
    r.fail("baseline", "one of the row labels: " + join(all, ", "));
  }
  c.plot = r.scalar<std::string>("plot", "", "a PNG file path");
  if (!c.plot.empty() && std::filesystem::path(c.plot).extension() != ".png") {
    r.fail("plot", "a PNG file path ending in .png");
  }
  c.output = r.scalar<std::string>("output", "", "a file path");
  c.cluster =
      read_cluster(MapReader(r.child("cluster"), "cluster", file), r.child("cluster"), file);
  r.finish();
  return c;
}

}  // namespace

ExperimentConfig parse_experiment(const std::string& text, const std::string& source,
                                  const std::vector<std::string>& overrides) {
  YAML::Node root = load_yaml(text, source);
  if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  // Before any override indexes into it (yaml-cpp throws its own error for a scalar root; found by
  // fuzzing).
  if (!root.IsMap()) {
    throw Error(where(source, root) +
                "expected a mapping of sections (model, backends, inputs, "
                "...), found " +
                describe(root));
  }
  const OverrideScope scope;  // errors in override values name the override, not the file
  for (const auto& o : overrides) apply_override(root, o);
  std::string stem = std::filesystem::path(source).stem().string();
  ExperimentConfig c = parse_root(root, source, stem.empty() ? "experiment" : stem);
  c.source_text = text;
  c.overrides = overrides;
  return c;
}

std::vector<std::pair<std::vector<std::string>, ExperimentConfig>> expand_sweep(
    const ExperimentConfig& c) {
  std::vector<std::pair<std::vector<std::string>, ExperimentConfig>> out;
  if (c.sweep.empty()) {
    out.emplace_back(std::vector<std::string>{}, c);
    return out;
  }
  std::vector<size_t> index(c.sweep.size(), 0);
  while (true) {
    std::vector<std::string> point;
    for (size_t k = 0; k < c.sweep.size(); ++k)
      point.push_back(c.sweep[k].first + "=" + c.sweep[k].second[index[k]]);
    std::vector<std::string> all = c.overrides;
    all.insert(all.end(), point.begin(), point.end());
    try {
      out.emplace_back(point, parse_experiment(c.source_text, c.file, all));
    } catch (const Error& e) {
      throw Error("sweep point " + join(point, ", ") + ": " + e.what());
    }
    size_t k = c.sweep.size();
    while (k > 0) {
      --k;
      if (++index[k] < c.sweep[k].second.size()) break;
      index[k] = 0;
      if (k == 0) return out;
    }
  }
}

ExperimentConfig load_experiment(const std::filesystem::path& path,
                                 const std::vector<std::string>& overrides) {
  const std::string text = read_regular_file(path, "experiment file '" + path.string() + "'",
                                             "a YAML file", kMaxDocumentBytes);
  return parse_experiment(text, path.string(), overrides);
}

}  // namespace gengraph

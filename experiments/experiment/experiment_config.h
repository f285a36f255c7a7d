// Experiment YAML -> plain structs, validated. The only place in gengraph that reads YAML.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "experiments/experiment/load_config.h"
#include "experiments/experiment/prompt_file.h"
#include "experiments/experiment/serve_config.h"
#include "framework/decoding/loop_options.h"
#include "framework/model/model_config.h"
#include "framework/quant/weight_format.h"

namespace gengraph {

struct ModelSpec {
  std::string preset;                 // built-in preset name, or
  std::string path;                   // a Hugging Face model folder, or
  std::string name;                   // a known real model (known_models.h); `path` is then its
                                      // folder, resolved when the experiment is read
  nlohmann::json config_overrides;    // config.json keys over the preset's (object or null)
  uint64_t seed = 0;                  // random-weight seed (presets)
  std::string dtype = "float32";      // float32 | bfloat16 | float16
  std::string device = "cpu";         // cpu | cuda | cuda:N
  bool fused = true;                  // fused projections (ModelConfig::fused); false: op by op
  bool check_weights = true;          // refuse NaN/Inf in checkpoint tensors (LoadOptions)
  std::string weights = "float";      // float | int8 | int4 | bfloat16 (LoadOptions::weights)
  int64_t group_size = 0;             // input channels per scale (0: int4 32, int8 per channel)
  bool quantize_head = true;          // the output head quantized too
  std::optional<bool> int8_head;      // int4: the output head in int8 (not given: true)
  int64_t int8_activation_rows = 0;   // int8, int4: products of this many rows or more quantize
                                      // their activations to int8 too
  int64_t int8_activation_block = 0;  // their activation scales per block of channels (0: per row)
};

// The weight-format keys of `m` as given, for the one parser (framework/quant/weight_format.h).
WeightFormatKeys weight_keys(const ModelSpec& m);

// The weight-format keys above are checked together by parse_weight_format
// (framework/quant/weight_format.h), as every other entry point checks them.

struct BackendSpec {
  std::string name;                            // registry name
  std::string label;                           // row label in tables (defaults to name)
  std::map<std::string, std::string> options;  // backend options, values as written
  // The model's form for this row (ModelConfig::fused) when it differs from model.fused: the
  // runner then loads the model a second time in that form, for this row (and others like it).
  std::optional<bool> fused;
  // The model's weight format for this row (`model:`: weights, group_size, quantize_head,
  // int8_head, int8_activation_rows, int8_activation_block over the experiment's), when given: the
  // runner loads the model once per format its rows ask for, so quantized rows run beside float
  // ones in one run. Holds the whole ModelSpec (the experiment's other keys as they are).
  std::optional<ModelSpec> model;
  // The decoding loop that drives this row (`loop:` whole_step, capture, sync_every); the host
  // loop when absent.
  LoopOptions loop;
  // Generation keys over the experiment's for this row only (`generation:`), e.g. speculative
  // decoding beside plain decoding on the same backend; empty: the experiment's settings.
  nlohmann::json generation = nlohmann::json::object();
};

struct InputsSpec {
  std::vector<std::vector<int64_t>> prompts;  // explicit token ids (ragged allowed), or
  std::vector<std::string> texts;             // texts, encoded by the model folder's tokenizer, or
  std::vector<nlohmann::json> messages;       // conversations in its chat template, or
  bool synthetic = false;                     // random ids from a seed:
  int64_t batch_size = 1;
  int64_t prompt_length = 0;
  uint64_t seed = 0;
  // Texts only: which tokenizer (auto: native, Python where the native one refuses the file's
  // kind; native; python), and whether each text is a user message in the model's chat template.
  std::string tokenizer = "auto";
  bool chat = false;
  // Texts only: whether special tokens are left out of the decoded text (transformers'
  // skip_special_tokens); not given: true with chat, false otherwise.
  std::optional<bool> skip_special_tokens;
  // inputs.file: the prompts of a file (prompt_file.h), read when the experiment is. Its texts or
  // token ids are also in `texts` or `prompts` when the file holds only one kind and no line has
  // settings of its own (what gengraph run takes; gengraph generate --prompts takes any file).
  std::string file;
  std::shared_ptr<const PromptFile> prompt_file;
  bool skip_special() const { return skip_special_tokens.value_or(chat); }
  // Texts or conversations: prompts the tokenizer makes.
  bool has_texts() const { return !texts.empty() || !messages.empty(); }
};

struct RunSpec {
  int64_t warmup = 1;      // untimed runs first
  int64_t repeats = 3;     // timed runs, interleaved across backends
  uint64_t seed = 0;       // torch's default generator is seeded with this before every run
  int64_t threads = 0;     // intra-op threads; 0 keeps LibTorch's default
  bool bandwidth = false;  // measure the device's copy bandwidth and report decode's fraction of it
  int64_t peer_timeout_s =
      0;  // a peer running longer is stopped and recorded as failed; 0 = no limit
  // When the peers are timed: "after" gengraph's rows (one process a peer, every repeat in it), or
  // "interleaved" with them (one process a peer and repeat, each with its own warm-up, in turn with
  // gengraph's rows in every repeat, so that a peer's repeat i pairs with the baseline's).
  std::string peer_order = "after";
};

// A peer on the same model, inputs and settings: transformers' generate() (tools/hf_peer.py) or
// another engine (tools/engine_peer.py); experiments/tools/peers.h lists them.
struct PeerSpec {
  std::string name;   // hf_eager | hf_jit_trace | hf_static_compile | ct2 | ct2_int8 | llama_cpp |
                      // llama_cpp_q8_0 | llama_cpp_q4_0
  std::string label;  // row label (defaults to name)
};

// How `gengraph submit` asks a Slurm cluster for each sweep point's resources (one array task per
// point); `--slurm-option KEY=VALUE` adds or overrides sbatch options. Empty means Slurm's default.
struct ClusterSpec {
  std::string partition;                       // --partition
  std::string time;                            // --time, e.g. "00:30:00" or "2-00:00:00"
  int64_t gpus = 0;                            // --gres=gpu:N (0: none asked for)
  int64_t cpus = 0;                            // --cpus-per-task (0: Slurm's default)
  std::string memory;                          // --mem, e.g. "64G"
  std::map<std::string, std::string> options;  // other sbatch long options, without "--"
};

// sbatch options as the job script may hold them: a long option's name (letters, digits, '-'),
// a value without quotes, '$', '`' or control characters, and not one gengraph submit sets itself
// (array, output, error, chdir, job-name, parsable). Shared by the cluster: block and
// --slurm-option.
bool sbatch_option_name(const std::string& name);
bool sbatch_option_value(const std::string& value);
bool sbatch_option_set_by_gengraph(const std::string& name);

struct ExperimentConfig {
  std::string name;  // from `name:` or the file stem
  std::string
      file;  // where it was read from ("gengraph generate (flags as YAML)" for `gengraph generate`)
  ModelSpec model;
  std::vector<BackendSpec> backends;
  InputsSpec inputs;
  nlohmann::json generation = nlohmann::json::object();  // ResolvedSettings keys -> values
  RunSpec run;
  std::vector<PeerSpec> peers;
  // Sweep: dotted keys (as for --set) -> values (YAML text); every combination is one point.
  std::vector<std::pair<std::string, std::vector<std::string>>> sweep;
  std::string baseline;  // row label the table's ratios divide by ("" = the first row)
  std::string plot;      // PNG path for a chart of the results ("" = none)
  std::string output;    // results JSON path ("" = results/<name>.json)
  ClusterSpec cluster;   // for gengraph submit
  // An experiment under load (`load:`, with `serving:`): requests replayed as an arrival process
  // through the systems it names instead of timed repeats of `inputs` (load_config.h).
  std::optional<LoadSpec> load;
  // A server (`serve:`, with `serving:`): `gengraph serve FILE` runs it (serve_config.h).
  std::optional<ServeSpec> serve;

  // What the file said, so that sweep points can be parsed as the file plus overrides.
  std::string source_text;
  std::vector<std::string> overrides;
};

// The configuration of every sweep point (the config itself when it has no sweep), each parsed
// and validated before anything runs. Pairs: (the point's key=value overrides, its config).
std::vector<std::pair<std::vector<std::string>, ExperimentConfig>> expand_sweep(
    const ExperimentConfig& config);

// Reads and validates an experiment file; `overrides` are "dotted.key=yaml-value" strings applied
// before validation (the CLI's --set). Errors name the file, line and column, and the key.
ExperimentConfig load_experiment(const std::filesystem::path& path,
                                 const std::vector<std::string>& overrides = {});

// The same from YAML text (for `gengraph generate` and tests); `source` names it in errors.
ExperimentConfig parse_experiment(const std::string& yaml_text, const std::string& source,
                                  const std::vector<std::string>& overrides = {});

}  // namespace gengraph

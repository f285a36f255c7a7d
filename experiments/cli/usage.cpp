#include "experiments/cli/usage.h"

namespace gengraph::cli {
namespace {

// The overview around its list of commands (each "  NAME" padded to 12, then the summary).
const char* const kOverviewHead = R"(usage: gengraph [--plugin LIB.so]... COMMAND [ARGUMENTS]...
  --plugin LIB.so (repeatable, anywhere on the line; also GENGRAPH_PLUGINS=A.so:B.so) loads a
      plug-in library first: its backends and decoding parts are then known by name, as the
      built-ins are (docs/extending.md#plug-ins).
commands:
)";

const char* const kOverviewTail =
    R"(gengraph COMMAND --help (or -h) prints a command's usage and options (all of them: docs/cli.md).
Exit status: 0 done; 1 an error (nothing written); 2 a usage error; 3 results written, but some
runs (peers) failed: the results and the table say which and why.
)";

}  // namespace

const std::vector<CommandHelp>& command_helps() {
  static const std::vector<CommandHelp> helps = {
      {"run", "Run an experiment: write its results JSON and print a table",
       R"(usage: gengraph run CONFIG.yaml [--set KEY=VALUE]... [--output FILE] [--quiet]
  Run an experiment (docs/experiments.md): every sweep point, backend and peer, as often as its
  run: block says; write the results JSON and print a table.
  --set KEY=VALUE   set a dotted key of the file before it is checked (repeatable), e.g.
                    --set generation.max_new_tokens=32, --set backends=[eager]
  --output FILE     the results JSON (default: the file's output:, else results/<name>.json)
  --quiet           no progress on standard error
)"},
      {"generate", "One-off generation from token ids or text",
       R"(usage: gengraph generate --model PRESET|FOLDER|NAME (--prompt IDS | --text TEXT)...
                         [--backend NAME] [--max-new-tokens N] [--device cpu|cuda]
                         [--dtype float32|bfloat16|float16] [--set KEY=VALUE]... [--output FILE]
                         [--stream] [--chat] [--tokenizer auto|native|python] [--quiet]
                         [--skip-special-tokens true|false]
       gengraph generate --model PRESET|FOLDER|NAME --prompts FILE [--output FILE [--resume]]
                         [options above but --stream]
  One-off generation. Prints the table and the tokens (with --text, the text too); writes the
  results JSON only with --output FILE.
  --model PRESET|FOLDER|NAME  a preset (random weights), a folder holding config.json, or a
                    known real model (gengraph models), e.g. smollm2-135m; preset:NAME always
                    means the preset, even beside a file of that name
  --prompt IDS      comma-separated token ids, e.g. --prompt 1,2,3 (repeatable: one input each)
  --text TEXT       a text, encoded by the model's tokenizer (repeatable); needs a model FOLDER
                    or NAME with a Hugging Face tokenizer; the output is decoded to text too
  --prompts FILE    the prompts of a file: one text per line, or JSON Lines (.jsonl, or a first
                    line that is a JSON object) with "prompt" (a text or token ids) or "messages"
                    (a conversation, rendered by the chat template), and optionally "id", "seed",
                    "skip_special_tokens" and generation settings of its own (max_new_tokens,
                    temperature, ...). Every line is checked before anything runs; a bad one is
                    refused by its line number. Writes JSON Lines, one line per prompt in file
                    order ({"index", "id", "prompt", "prompt_tokens", "text", "tokens",
                    "finish_reason"}), to --output FILE (else standard output), each batch's as it
                    ends
  --resume          with --prompts and --output: keep the lines FILE holds (a run stopped by
                    Ctrl-C) and generate the rest; the file ends as an uninterrupted run writes it
  --backend NAME    the backend (default eager; gengraph backends lists them)
  --max-new-tokens N  how many tokens to generate
  --device cpu|cuda (or cuda:N; default cpu)
  --dtype float32|bfloat16|float16  (default float32)
  --set KEY=VALUE   any key of an experiment (repeatable), e.g. generation.do_sample=true
  --output FILE     also write the results JSON (with --prompts: the JSON Lines)
  --stream          print each token as it is chosen, one line per step (greedy search and
                    sampling); with --text, the text as it becomes final
  --chat            send each text as a user message through the model's chat template
  --tokenizer auto|native|python  the native C++ tokenizer (auto, the default, falls back to
                    the Python one for a tokenizer.json it does not read; native refuses
                    instead) or python (transformers, in a Python process)
  --skip-special-tokens true|false  leave special tokens (<|im_end|>, ...) out of the decoded
                    text (default: true with --chat or messages, else false)
  --quiet           no progress on standard error
)"},
      {"quality", "What weight-only quantization costs, per format, against the float model",
       R"(usage: gengraph quality --model FOLDER|NAME [--weights LIST] [--group-size N]
                        [--text-file FILE] [--windows N] [--window TOKENS] [--text PROMPT]...
                        [--new-tokens N] [--output FILE] [--quiet]
  What weight-only quantization costs: per format against the float model, perplexity on
  windows of a text, KL divergence and top-1 agreement of the next-token distributions, and
  greedy generations from the prompts compared. Prints the table and writes the results JSON.
  --model FOLDER|NAME  a model folder or a known real model (gengraph models)
  --weights LIST    comma-separated formats (default int8,int4,bfloat16): int8; w8a8, int8
                    weights with every product's activations quantized to int8 too (a scale per
                    row); w8a8/B the same with a scale per block of B channels (a multiple of
                    32); int4; w4a8, int4 weights (groups of --group-size) with activations in
                    blocks of 32; bfloat16. int4's output head is int8 (model.int8_head's
                    default): int4+h4 and w4a8+h4 keep it int4 (int4+h8, w4a8+h8 the default).
                    int8gB: int8 weights with a float16 scale per block of B (model.group_size;
                    int8g32 is Q8_0's layout); w8a8gB the same by activations in blocks of B
  --group-size N    int4's group size: 32, 64, 128 or 256
  --text-file FILE  the text of the perplexity windows (default the GPL-3 text Debian ships)
  --windows N       how many windows (default 8, at most 256)
  --window TOKENS   tokens per window (default 256, at most 8192)
  --text PROMPT     a prompt for the generations (repeatable; default five built-in ones)
  --new-tokens N    tokens generated per prompt (default 32, at most 4096)
  --output FILE     the results JSON (default results/quality.json)
  --quiet           no progress on standard error
)"},
      {"serve", "An OpenAI-compatible HTTP server over the continuous-batching scheduler",
       R"(usage: gengraph serve [CONFIG.yaml] [--model PRESET|FOLDER|NAME] [--backend NAME]
                      [--weights float|int8|int4|bfloat16] [--dtype float32|bfloat16|float16]
                      [--device cpu|cuda] [--host 127.0.0.1] [--port 8000] [--api-key KEY]
                      [--max-queue N] [--threads N] [--model-id ID] [--log-prompts]
                      [--set KEY=VALUE]...
  An OpenAI-compatible HTTP server over the continuous-batching scheduler (docs/serving.md):
  POST /v1/completions, /v1/chat/completions (stream: true as server-sent events), GET /v1/models,
  /health, /metrics. CONFIG.yaml holds model:, backend:, serving: (the scheduler) and serve: (the
  server); without it --model is required. --threads N: the CPU threads (run.threads; 0, the
  default, LibTorch's own choice). --set KEY=VALUE sets any of their keys (serve.port=0,
  serving.max_running=16, model.int8_activation_rows=64). The API key: --api-key, or the
  environment variable GENGRAPH_API_KEY, or the one serve.api_key_env names. Binds 127.0.0.1 unless
  --host says otherwise; prints "listening on http://HOST:PORT" once ready. SIGINT or SIGTERM:
  stops accepting, drains the requests in flight (serve.drain_timeout_s), exits 0; a second one
  exits at once (status 1).
)"},
      {"validate", "Check an experiment without running it",
       R"(usage: gengraph validate CONFIG.yaml [--set KEY=VALUE]...
  Parse and check an experiment (every sweep point, backend names and options, each point's
  model configuration) without running it; prints how many points, backends and peers it has.
  --set KEY=VALUE   set a dotted key of the file before it is checked (repeatable)
)"},
      {"show", "Print the table of a results file",
       R"(usage: gengraph show RESULTS.json
  Print the table of a results file (for example one written on another machine).
)"},
      {"compare", "The speed-up of one results file over another, row by row",
       R"(usage: gengraph compare BEFORE.json AFTER.json [--metric METRIC] [--output FILE]
  Row by row (same label, same sweep point): the speed-up of AFTER over BEFORE with a
  distribution-free interval from both files' repeats, and the settings that differ. Two
  results under load (load:) compare row by row (same system label, same rate) as after /
  before of each throughput and latency column.
  --metric METRIC   total_ms (the default), decode_ms_per_token, time_to_first_token_ms or
                    tokens_per_second
  --output FILE     also write the comparison as JSON
)"},
      {"submit", "Run an experiment's sweep points on Slurm as one job array",
       R"(usage: gengraph submit CONFIG.yaml [--set KEY=VALUE]... [--slurm-option KEY=VALUE]...
                       [--job-dir DIR] [--gengraph PATH]
       gengraph submit --rerun DIR [--slurm-option KEY=VALUE]... [--gengraph PATH]
  Check every sweep point, then run them on Slurm as one job array (one task per point), with
  the resources of the experiment's cluster: block (docs/distributed.md).
  --set KEY=VALUE   set a dotted key of the file before it is checked (repeatable)
  --slurm-option KEY=VALUE  an sbatch option (or KEY alone) for the job (repeatable), e.g.
                    partition=gpu
  --job-dir DIR     where the parts land (default results/<name>.slurm/)
  --gengraph PATH   the gengraph binary the tasks run (default this one)
  --rerun DIR       submit the points of DIR without a result again
)"},
      {"collect", "Merge a submitted job's parts into one results file",
       R"(usage: gengraph collect DIR|JOB_ID [--output FILE]
  Merge a submitted job's parts into one results file, as gengraph run writes it; exit 3
  naming the points that failed or have no result yet.
  --output FILE     the results JSON (default: the experiment's output, else
                    results/<name>.json)
)"},
      {"task", "Run one point of a submitted job (what each array task runs)",
       R"(usage: gengraph task DIR [INDEX] [--quiet]
  Run one point of a submitted job: what each Slurm array task runs. INDEX: the point's number
  (default $SLURM_ARRAY_TASK_ID).
  --quiet           accepted for the job script's sake; a task's progress goes to its log
)"},
      {"backends", "List the backends, whether each is usable here, and the model steps",
       R"(usage: gengraph backends
  List the registered backends and whether each is usable here, and the model steps
  cuda_graph can wrap.
)"},
      {"models", "List the presets and the known real models",
       R"(usage: gengraph models
  List the models: presets (random weights) and known real models, with whether each real one
  is set up here and its folder.
)"},
      {"presets", "List the built-in model presets and their config.json",
       R"(usage: gengraph presets
  List the built-in model presets, each with its config.json.
)"},
      {"plugin", "Try a plug-in library in a child process",
       R"(usage: gengraph plugin check LIB.so [--timeout SECONDS]
  Load a plug-in in a child process first and say what it registers, or how it failed:
  refused (the reason), a crash, exit() or abort() in its own code, or a registration that does
  not return. Plug-ins are trusted code: this is how to try one.
  --timeout SECONDS  how long the loading may take (whole seconds, 1 to 999999; default 60)
)"},
      {"paths", "Where the Python tools and their Python were found",
       R"(usage: gengraph paths
  Where the Python tools and their Python were found, and why there (GENGRAPH_ROOT,
  GENGRAPH_PYTHON, the install's own, the source tree).
)"},
  };
  return helps;
}

std::string overview() {
  std::string text = kOverviewHead;
  for (const auto& c : command_helps()) {
    std::string name = c.name;
    name.resize(10, ' ');
    text += "  " + name + c.summary + "\n";
  }
  return text + kOverviewTail;
}

std::string command_help(const std::string& name) {
  for (const auto& c : command_helps()) {
    if (name == c.name) return c.text;
  }
  return "";
}

std::string usage_hint(const std::string& command) {
  if (command_help(command).empty()) return "gengraph --help lists the commands\n";
  return "gengraph " + command + " --help shows its usage\n";
}

}  // namespace gengraph::cli

#include "experiments/cli/usage.h"

namespace gengraph::cli {

const char* const kUsage = R"(usage: gengraph [--plugin LIB.so]... COMMAND ...
  --plugin LIB.so (repeatable, anywhere on the line; also GENGRAPH_PLUGINS=A.so:B.so) loads a
      plug-in library first: its backends and decoding parts are then known by name, as the
      built-ins are (docs/extending.md#plug-ins).
  gengraph run CONFIG.yaml [--set KEY=VALUE]... [--output FILE] [--quiet]
      Run an experiment; write results JSON (default results/<name>.json) and print a table.
  gengraph generate --model PRESET|FOLDER|NAME (--prompt IDS | --text TEXT)... [--backend NAME]
                    [--max-new-tokens N] [--device cpu|cuda] [--dtype float32|bfloat16|float16]
                    [--set KEY=VALUE]... [--output FILE] [--stream]
                    [--chat] [--tokenizer auto|native|python]
      One-off generation; IDS are comma-separated token ids, e.g. --prompt 1,2,3. A FOLDER holds
      config.json; NAME is a known real model (gengraph models), e.g. smollm2-135m; preset:NAME
      always means the preset, even beside a file of that name. --text needs a model FOLDER or NAME
      with a Hugging Face tokenizer; the output is then decoded to text too. --chat sends each text
      as a user message through the model's chat template. --tokenizer: the native C++ tokenizer
      (auto, the default, falls back to the Python one for a tokenizer.json it does not read;
      native refuses instead) or python (transformers, in a Python process). Prints the table and
      the tokens; writes the results JSON only with --output FILE.
      --stream prints each token as it is chosen, one line per step (greedy search and sampling);
      with --text, the text as it becomes final.
  gengraph quality --model FOLDER|NAME [--weights int8,w8a8,w8a8/32,int4,w4a8,bfloat16] [--group-size N]
                   [--text-file FILE] [--windows N] [--window TOKENS] [--text PROMPT]...
                   [--new-tokens N] [--output FILE]
      What weight-only quantization costs: per format against the float model, perplexity on
      windows of a text (default the GPL-3 text Debian ships), KL divergence and top-1 agreement
      of the next-token distributions, and greedy generations from the prompts compared. w8a8
      is int8 weights with every product's activations quantized to int8 too (a scale per row);
      w8a8/B the same with a scale per block of B channels (a multiple of 32); w4a8 int4 weights
      (groups of --group-size) with activations in blocks of 32. int4's output head is int8
      (model.int8_head's default): int4+h4 and w4a8+h4 keep it int4 (int4+h8, w4a8+h8 the default).
  gengraph serve [CONFIG.yaml] [--model PRESET|FOLDER|NAME] [--port 8000] [--api-key KEY] ...
      An OpenAI-compatible HTTP server (completions, chat, streaming) over the continuous-batching
      scheduler; gengraph serve --help lists its options (docs/serving.md#the-server).
  gengraph validate CONFIG.yaml [--set KEY=VALUE]...
      Parse and check an experiment (every sweep point, backend names and options) without running it.
  gengraph show RESULTS.json
      Print the table of a results file (for example one written on another machine).
  gengraph compare BEFORE.json AFTER.json [--metric total_ms|decode_ms_per_token|time_to_first_token_ms|tokens_per_second]
                   [--output FILE]
      Row by row (same label, same sweep point): the speed-up of AFTER over BEFORE with a
      distribution-free interval from both files' repeats, and the settings that differ; --output
      writes the comparison as JSON too. Two results under load (load:) compare row by row (same
      system label, same rate) as after / before of each throughput and latency column.
  gengraph submit CONFIG.yaml [--set KEY=VALUE]... [--slurm-option KEY=VALUE]... [--job-dir DIR]
                  [--gengraph PATH]
  gengraph submit --rerun DIR [--slurm-option KEY=VALUE]... [--gengraph PATH]
      Check every sweep point, then run them on Slurm as one job array (one task per point), with
      the resources of the experiment's cluster: block; --rerun submits the points without a
      result again. Parts land in DIR (default results/<name>.slurm/). The tasks run this
      gengraph binary, or the one --gengraph names.
  gengraph collect DIR|JOB_ID [--output FILE]
      Merge a submitted job's parts into one results file, as `gengraph run` writes it; exit 3
      naming the points that failed or have no result yet.
  gengraph task DIR [INDEX]
      Run one point of a submitted job (what each array task runs; INDEX: $SLURM_ARRAY_TASK_ID).
  gengraph backends      List the registered backends and whether each is usable here, and the
                         model steps cuda_graph can wrap.
  gengraph models        List the models: presets (random weights) and known real models, with
                         whether each real one is set up here and its folder.
  gengraph presets       List the built-in model presets.
  gengraph plugin check LIB.so [--timeout SECONDS]
      Load a plug-in in a child process first (default limit 60 s) and say what it registers,
      or how it failed: refused (the reason), a crash, exit() or abort() in its own code, or a
      registration that does not return. Plug-ins are trusted code: this is how to try one.
  gengraph paths         Where the Python tools and their Python were found, and why there
                         (GENGRAPH_ROOT, GENGRAPH_PYTHON, the install's own, the source tree).
Exit status: 0 done; 1 an error (nothing written); 2 a usage error; 3 results written, but some
runs (peers) failed: the results and the table say which and why.
)";

}  // namespace gengraph::cli

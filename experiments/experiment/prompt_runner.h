// gengraph generate --prompts FILE: every prompt of a prompt file (prompt_file.h) generated on the
// experiment's model and backend, with its settings under each line's own, and written as JSON
// Lines, one line per prompt in file order:
//   {"index": I, "id": ..., "prompt": ..., "text": ..., "tokens": [...], "finish_reason": ...}
// ("id" when the line has one; "text" when the prompts are texts; "sequences" with every sequence
// when a prompt has several). Everything is checked before the first line is written: the file,
// each line's settings and prompt planned on the loaded model, an output to resume. Prompts run in
// blocks of `batch` by position, those of a block with equal settings and seed as one generation,
// seeded before it; a block's lines are written and flushed when it ends. A run stopped by SIGINT
// or SIGTERM keeps what it wrote; resume skips the prompts already there and gives the same file
// an uninterrupted run gives.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "experiments/experiment/experiment_config.h"

namespace gengraph {

struct PromptRunOptions {
  std::string output;   // the JSON Lines file; "" writes the lines to `out` instead
  bool resume = false;  // keep the lines `output` holds (a partial last line is redone)
  int64_t batch = 32;   // prompts per block
};

struct PromptRunReport {
  int64_t written = 0;  // lines written by this run
  int64_t kept = 0;     // lines an earlier run wrote (resume)
};

// `c` is an experiment whose inputs are a prompt file (inputs.file), with one backend. Progress
// and notes go to `log`.
PromptRunReport run_prompt_file(const ExperimentConfig& c, const PromptRunOptions& o,
                                std::ostream& out, std::ostream& log);

}  // namespace gengraph

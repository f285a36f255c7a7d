// gengraph generate's flags as an experiment (experiments/cli/cli.cpp): the YAML they make, and the
// run of a prompt file (--prompts FILE).
#pragma once

#include <string>

#include "experiments/cli/arguments.h"

namespace gengraph::cli {

// Builds the experiment YAML for `gengraph generate` so it goes through the same validation. Flag
// values are checked here and written as quoted YAML scalars, so no value can change the YAML's
// structure.
std::string generate_yaml(const Args& a);

// gengraph generate --prompts FILE: the lines written as each block of prompts ends
// (experiments/experiment/prompt_runner.h), to --output FILE or standard output.
int run_prompts(const Args& a);

}  // namespace gengraph::cli

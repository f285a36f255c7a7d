// The `gengraph` command line. A separate program (for example one that registers its own
// backend first) can call cli_main to offer the same commands.
#pragma once

namespace gengraph {

int cli_main(int argc, char** argv);

// Installs the aoti backend's package builder (set_aoti_package_builder in
// backends/aoti/aoti_step.h): the model written to a temporary Hugging Face folder, then
// tools/export_aoti.py in the tools' Python, its reason named in the Error when it fails. The
// experiment runner installs it; a program embedding gengraph::core with gengraph::experiments
// calls it to let `aoti` build packages on first use. Idempotent.
void install_aoti_export_tool();

}  // namespace gengraph

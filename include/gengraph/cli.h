// The `gengraph` command line as a library (link gengraph::experiments). A separate program, for
// example one that registers its own backend or decoding parts first (<gengraph/extension.h>),
// can call cli_main to offer the same commands; the stock CLI loads such parts as plug-ins
// instead (<gengraph/plugin.h>). cli_main registers the built-in backends itself.
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

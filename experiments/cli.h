// The `gengraph` command line. A separate program (for example one that registers its own
// backend first) can call cli_main to offer the same commands.
#pragma once

namespace gengraph {

int cli_main(int argc, char** argv);

}  // namespace gengraph

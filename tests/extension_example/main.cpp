// `my_gengraph`: gengraph's CLI with the example's backend and decoding parts registered.
#include <gengraph/cli.h>

#include "decoding_parts.h"
#include "recompute_backend.h"

int main(int argc, char** argv) {
  example::register_recompute_backend();
  example::register_decoding_parts();
  return gengraph::cli_main(argc, argv);
}

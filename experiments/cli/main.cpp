#include <gengraph/cli.h>

int main(int argc, char** argv) { return gengraph::cli_main(argc, argv); }

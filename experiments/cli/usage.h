// The CLI's usage: the overview (gengraph --help) and each command's own (gengraph CMD --help),
// word for word the texts of docs/cli.md (tools/check_api_doc.py checks that they agree).
#pragma once

#include <string>
#include <vector>

namespace gengraph::cli {

struct CommandHelp {
  const char* name;
  const char* summary;  // its line of the overview
  const char* text;     // gengraph NAME --help
};

// Every command, in the overview's order.
const std::vector<CommandHelp>& command_helps();

// gengraph --help: what gengraph is called with, and one line per command.
std::string overview();

// gengraph NAME --help; empty for a name that is no command.
std::string command_help(const std::string& name);

// The line a usage error ends with: where the usage is (the command's, or the overview).
std::string usage_hint(const std::string& command);

}  // namespace gengraph::cli

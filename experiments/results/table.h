// The readable table of a results document: what `gengraph run` prints and `gengraph show`
// prints again from the file.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

#include "experiments/results/terminal_text.h"
#include "framework/util/json_at.h"

namespace gengraph {

// The table. `file` names the results file in errors ("" for a document gengraph just made): every
// field is read through JsonAt, so a field missing or of the wrong type, or a timing no
// measurement gives (read_timing), is an Error naming the file and the key path.
std::string format_table(const nlohmann::json& doc, const std::string& file = "");
// The same of a document inside another (a Slurm part's 'result'): errors name its key path there.
std::string format_table(const JsonAt& doc);

}  // namespace gengraph

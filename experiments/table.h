// The readable table of a results document: what `gengraph run` prints and `gengraph show`
// prints again from the file.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace gengraph {

std::string format_table(const nlohmann::json& doc);

}  // namespace gengraph

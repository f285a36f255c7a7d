// Errors: the one exception type (Error, public in <gengraph/error.h>) and the helpers that word
// error messages: the closest valid name as a suggestion, and how a part from a plug-in is loaded.
// Strings, files, locks and processes have headers of their own beside this one.
#pragma once

#include <gengraph/error.h>  // Error, the one exception type (public)

#include <string>
#include <vector>

namespace gengraph {

// "unknown key 'foo'" + " (did you mean 'bar'?)" when a close candidate exists.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

// Ends the registries' "unknown ..." errors: how a part from a plug-in library is loaded
// (gengraph --plugin, GENGRAPH_PLUGINS, load_plugin; <gengraph/plugin.h>).
std::string plugin_hint();

}  // namespace gengraph

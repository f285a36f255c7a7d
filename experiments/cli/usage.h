// The CLI's usage text (gengraph --help; printed after a usage error).
#pragma once

namespace gengraph::cli {

extern const char* const kUsage;

}  // namespace gengraph::cli

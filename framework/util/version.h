#pragma once

namespace gengraph {

// The git commit the library was built from ("unknown" outside a git checkout); "+dirty" when the
// work tree had uncommitted changes at build time.
const char* gengraph_commit();
// The LibTorch version compiled against.
const char* torch_version();

}  // namespace gengraph

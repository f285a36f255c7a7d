// LogitsProcessor and ProcessorChain are public: <gengraph/ext/decoding.h>, where a processor
// built outside gengraph finds them. Framework code includes them by this path.
#pragma once

#include <gengraph/ext/decoding.h>

// SearchStrategy and StepDecision are public: <gengraph/ext/decoding.h>, where a strategy built
// outside gengraph finds them. Framework code includes them by this path.
#pragma once

#include <gengraph/ext/decoding.h>

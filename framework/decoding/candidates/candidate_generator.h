// CandidateGenerator, speculative decoding's proposer, is public: <gengraph/ext/decoding.h>, where
// one built outside gengraph finds it (the loop that verifies its candidates is
// Generator::run_speculative). Framework code includes it by this path.
#pragma once

#include <gengraph/ext/decoding.h>

// The backend contract checked against the eager reference, for any registered backend: what the
// test suite's conformance tests check for the built-ins (tests/backends/test_backend_conformance),
// offered to a backend's author (<gengraph/extension.h> includes it; gengraph.check_backend in
// Python, docs/python.md#backends). It registers the built-in backends, eager among them. This
// header does not pull in LibTorch's.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace gengraph {

struct ConformanceOptions {
  // Presets (random weights from `seed`), or model folders; each is loaded once.
  std::vector<std::string> models = {"gpt2-tiny", "llama-tiny"};
  uint64_t seed = 11;
  int64_t max_new_tokens = 12;
  double rtol = 1e-4, atol = 1e-5;  // logits against eager's
  double score_tolerance = 1e-4;    // sequence scores against eager's
};

// Runs `backend` with `options` beside the eager backend (growing cache) on each model and checks:
//   tokens     greedy search, seeded sampling, beam search, beam sampling and diverse beam
//              search give eager's tokens and scores, on three ragged prompts;
//   logits     prefill logits of a left-padded batch, then one decode step with a beam reorder
//              (both rows continue row 1), within rtol/atol of eager's;
//   speculative  verify() of three positions equals three decode steps, rewind() then decode
//              equals a fresh history, and greedy search with prompt lookup gives the plain
//              tokens; a backend that refuses rewind is reported as skipping this check.
// Returns {"backend", "options", "passed": bool, "checks": [{"model", "check", "passed",
// "skipped", "detail"}]}: a failed check's detail says what differed. Errors the backend throws
// are failures of that check, recorded with their message.
nlohmann::json check_backend_conformance(const std::string& backend,
                                         const std::map<std::string, std::string>& options,
                                         const ConformanceOptions& how = {});

}  // namespace gengraph

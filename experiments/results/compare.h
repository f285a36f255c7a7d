// Compares two results files (docs/results-schema.md) row by row: how much faster or slower each
// row of AFTER is than the same row (same label, same sweep point) of BEFORE, with a
// distribution-free interval from the repeats of both, and which settings differ between them.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "experiments/results/statistics.h"

namespace gengraph {

// The comparison as a document ("schema": "gengraph-compare-1"; docs/experiments.md): both files,
// the settings that differ, and per sweep point per row its status, the values of both sides,
// and for compared rows speedup, low, high, confidence and verdict.
nlohmann::json compare_documents(const nlohmann::json& before, const std::string& before_name,
                                 const nlohmann::json& after, const std::string& after_name,
                                 const std::string& metric);
// The readable table of such a document.
std::string format_comparison(const nlohmann::json& comparison);

// The comparison table (format_comparison of compare_documents). `metric` is one of total_ms
// (default), decode_ms_per_token, time_to_first_token_ms, tokens_per_second; for tokens_per_second
// higher is better, and the speed-up is after / before. Throws Error (naming the file) for what is
// not a results file.
std::string compare_results(const nlohmann::json& before, const std::string& before_name,
                            const nlohmann::json& after, const std::string& after_name,
                            const std::string& metric);

extern const std::vector<std::string> kCompareMetrics;

}  // namespace gengraph

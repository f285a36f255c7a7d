// The results of an experiment under load (`kind: load`, experiments/experiment/load_runner.h)
// read back: their readable table (one row per system and rate) and the comparison of two such
// files (rows matched by label and rate; ratios of the throughput and latency columns).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "framework/util/json_at.h"

namespace gengraph {

// Whether the document is a load experiment's results.
bool is_load_document(const nlohmann::json& doc);

// The table; every field read through JsonAt, so a field missing or of the wrong type is an Error
// naming the file and the key path.
std::string format_load_table(const JsonAt& doc);

// The comparison as a document ("schema": "gengraph-load-compare-1"): both files, the settings
// that differ, and per row (label and rate) each column's before, after and after / before.
nlohmann::json compare_load_documents(const nlohmann::json& before, const std::string& before_name,
                                      const nlohmann::json& after, const std::string& after_name);
// Its readable table.
std::string format_load_comparison(const nlohmann::json& comparison);

}  // namespace gengraph

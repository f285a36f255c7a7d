// Conversions the Python module shares: JSON documents to and from Python objects (through
// Python's own json module, so that every JSON value maps as json.loads maps it).
#pragma once

#include <gengraph/stream.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace gengraph::python {

namespace py = pybind11;

// A Python value (dict, list, str, int, float, bool, None) as JSON; anything json.dumps refuses
// is a gengraph::Error naming `what` and the Python type found.
nlohmann::json to_json(const py::handle& value, const std::string& what);
py::object from_json(const nlohmann::json& value);

// The setting top_logprobs' alternatives as (token, logprob) pairs, best first (Python tuples).
using TopPairs = std::vector<std::pair<int64_t, double>>;
TopPairs top_pairs(const std::vector<TopLogprob>& top);
std::vector<TopPairs> top_pairs(const std::vector<std::vector<TopLogprob>>& per_token);

// An error message as a Python str: bytes that are not UTF-8 (a file name) as \xNN.
py::str message(const char* text);

}  // namespace gengraph::python

// The filters, tests, functions and methods a chat template may use natively
// (framework/text/jinja.h): the parser refuses others by name, the renderer implements these.
#pragma once

#include <set>
#include <string>

namespace gengraph::jinja {

inline bool is_filter(const std::string& n) {
  static const std::set<std::string> k = {
      "trim",    "length",     "count",      "lower", "upper", "title", "capitalize",
      "tojson",  "string",     "default",    "d",     "first", "last",  "join",
      "replace", "list",       "items",      "int",   "float", "abs",   "reverse",
      "safe",    "selectattr", "rejectattr", "map"};
  return k.count(n) != 0;
}

inline bool is_test(const std::string& n) {
  static const std::set<std::string> k = {
      "defined", "undefined",   "none",     "string",  "number", "integer", "float",
      "mapping", "iterable",    "sequence", "boolean", "true",   "false",   "even",
      "odd",     "divisibleby", "eq",       "equalto", "ne",     "lt",      "gt",
      "le",      "ge",          "in",       "sameas",  "lower",  "upper",   "callable"};
  return k.count(n) != 0;
}

inline bool is_function(const std::string& n) {
  static const std::set<std::string> k = {"range", "namespace", "raise_exception", "strftime_now",
                                          "dict"};
  return k.count(n) != 0;
}

inline bool is_method(const std::string& n) {
  static const std::set<std::string> k = {"strip",   "lstrip", "rstrip", "startswith", "endswith",
                                          "split",   "lower",  "upper",  "title",      "capitalize",
                                          "replace", "items",  "keys",   "values",     "get",
                                          "rsplit",  "count",  "find"};
  return k.count(n) != 0;
}

}  // namespace gengraph::jinja

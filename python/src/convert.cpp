// The conversions the module's files share (convert.h): JSON documents to and from Python objects
// through Python's own json module, and error messages as Python str.
#include "python/src/convert.h"

#include <gengraph/error.h>

#include <cstring>

namespace gengraph::python {

nlohmann::json to_json(const py::handle& value, const std::string& what) {
  // The package checks every value on its way in (python/gengraph/_check.py, naming the key
  // path); this is the module's own guard for a caller that went around it.
  std::string text;
  try {
    text = py::module_::import("json")
               .attr("dumps")(value, py::arg("allow_nan") = false)
               .cast<std::string>();
  } catch (py::error_already_set& e) {
    throw Error(what +
                ": expected a JSON value (dict, list, str, int, float, bool or None; numbers "
                "finite), found " +
                std::string(py::str(py::type::handle_of(value).attr("__name__"))) + " (" +
                std::string(py::str(e.value())) + ")");
  }
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {
    throw Error(what +
                ": expected a JSON value, found one JSON cannot hold (an integer past "
                "64 bits?)");
  }
}

py::str message(const char* text) {
  // A message may quote a file name that is not UTF-8: its bytes shown as \xNN rather than the
  // error lost to a UnicodeDecodeError.
  PyObject* s =
      PyUnicode_DecodeUTF8(text, static_cast<Py_ssize_t>(std::strlen(text)), "backslashreplace");
  if (!s) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(s);
}

py::object from_json(const nlohmann::json& value) {
  return py::module_::import("json").attr("loads")(value.dump());
}

TopPairs top_pairs(const std::vector<TopLogprob>& top) {
  TopPairs out;
  out.reserve(top.size());
  for (const TopLogprob& t : top) out.emplace_back(t.token, t.logprob);
  return out;
}

std::vector<TopPairs> top_pairs(const std::vector<std::vector<TopLogprob>>& per_token) {
  std::vector<TopPairs> out;
  out.reserve(per_token.size());
  for (const auto& top : per_token) out.push_back(top_pairs(top));
  return out;
}

}  // namespace gengraph::python

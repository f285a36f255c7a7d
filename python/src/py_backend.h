// Backends defined in Python (python/src/py_backend.cpp): registered by name in the one backend
// registry, usable from the Engine and from experiments like a built-in.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

namespace gengraph::python {

// gengraph._gengraph's register_backend, unregister_backend, ModelInfo and check_backend.
void bind_backends(pybind11::module_& m);

// Whether `name` was registered from Python.
bool is_python_backend(const std::string& name);

}  // namespace gengraph::python

// Many requests at once from Python (python/src/serving.cpp): gengraph::Scheduler
// (<gengraph/serving.h>) as the module's _Scheduler, _Request and RequestResult.
#pragma once

#include <pybind11/pybind11.h>

namespace gengraph::python {

// Registers the classes; StreamedToken and Sequence must be registered first.
void bind_serving(pybind11::module_& m);

}  // namespace gengraph::python

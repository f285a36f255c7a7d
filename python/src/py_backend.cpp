// Backends defined in Python. A Python object with prefill and decode methods (docs/python.md's
// contract) is wrapped as a ForwardBackend and registered by name, so that the Engine and the
// experiment runner drive it as they drive a built-in. Tensors cross without a copy (LibTorch's
// own Python bindings); each call takes the GIL, which gengraph releases while it generates.
#include "python/src/py_backend.h"

#include <ATen/ATen.h>
#include <frameobject.h>                          // PyTracebackObject, PyFrame_GetCode
#include <torch/csrc/autograd/python_variable.h>  // THPVariable_Check
#include <torch/csrc/utils/pybind.h>  // at::Tensor <-> torch.Tensor, at::ScalarType, at::Device

#include <filesystem>
#include <mutex>
#include <set>

#include "engine/conformance.h"
#include "framework/backend/backend_registry.h"
#include "framework/model/causal_lm.h"
#include "framework/util/error.h"
#include "python/src/convert.h"

namespace gengraph::python {
namespace {

std::mutex& names_mutex() {
  static std::mutex m;
  return m;
}
std::set<std::string>& python_names() {
  static std::set<std::string> names;
  return names;
}

// A Python reference that C++ may outlive: dropped under the GIL while the interpreter runs, and
// left alone once it has finalised (the registry's statics are destroyed after it).
std::shared_ptr<py::object> hold(py::object o) {
  return std::shared_ptr<py::object>(new py::object(std::move(o)), [](py::object* p) {
    if (Py_IsInitialized()) {
      py::gil_scoped_acquire gil;
      delete p;
    } else {
      p->release();
      delete p;
    }
  });
}

std::string type_name(const py::handle& o) {
  return py::str(py::type::handle_of(o).attr("__name__"));
}

// What a backend's Python code raised, in one line: "ValueError: no logits today (at
// backend.py:12 in prefill)", the place being the deepest frame, where it was raised. Not
// pybind's what(), which appends the whole stack ("At: ...") and the package's own frames.
std::string raised(py::error_already_set& e) {
  std::string out = type_name(e.value());
  const std::string message = py::str(e.value());
  if (!message.empty()) out += ": " + message;
  if (e.trace()) {
    py::object tb = e.trace();
    while (!tb.attr("tb_next").is_none()) tb = tb.attr("tb_next");
    const py::object code = tb.attr("tb_frame").attr("f_code");
    const std::string file = py::str(code.attr("co_filename"));
    out += " (at " + std::filesystem::path(file).filename().string() + ":" +
           std::string(py::str(tb.attr("tb_lineno"))) + " in " +
           std::string(py::str(code.attr("co_name"))) + ")";
  }
  return out;
}

// The package's own refusals (gengraph.backend.Refusal: a call past its time limit) carry
// their whole message: shown after the backend's name as they are.
bool is_complete(py::error_already_set& e) { return py::hasattr(e.value(), "_gengraph_complete"); }

// The model a Python backend is created for: its configuration, and its weights as tensors (the
// loaded ones, not copies).
struct ModelInfo {
  std::shared_ptr<const CausalLM> model;
  std::string source() const {
    // ModelConfig::source names a folder's config.json in quotes; presets as "preset:NAME".
    std::string s = model->config().source;
    if (s.size() >= 2 && s.front() == '\'' && s.back() == '\'') s = s.substr(1, s.size() - 2);
    const std::filesystem::path p(s);
    return p.filename() == "config.json" ? p.parent_path().string() : s;
  }
};

class PyBackend final : public ForwardBackend {
 public:
  PyBackend(std::shared_ptr<const CausalLM> model, std::string name,
            std::shared_ptr<py::object> impl)
      : ForwardBackend(std::move(model)), name_(std::move(name)), impl_(std::move(impl)) {}
  std::string name() const override { return name_; }

  BackendReport report() const override {
    py::gil_scoped_acquire gil;
    if (!py::hasattr(*impl_, "report")) return {};
    const py::object r = call("report");
    BackendReport out;
    try {
      for (const auto& [k, v] : r.cast<py::dict>()) out[py::str(k)] = v.cast<double>();
    } catch (const py::cast_error&) {
      throw Error("backend '" + name_ + "': report() returned " + type_name(r) +
                  ", expected a dict of str -> float");
    }
    return out;
  }

 protected:
  void do_prepare(int64_t rows, int64_t max_length) override {
    py::gil_scoped_acquire gil;
    if (py::hasattr(*impl_, "prepare")) call("prepare", rows, max_length);
  }
  at::Tensor do_prefill(const StepInputs& in, const at::Tensor& slots) override {
    py::gil_scoped_acquire gil;
    return logits(call("prefill", in.input_ids, in.positions, in.token_valid), "prefill");
  }
  at::Tensor do_decode(const StepInputs& in, const at::Tensor& slots) override {
    py::gil_scoped_acquire gil;
    const py::object parents = in.parent_rows.defined() ? py::cast(in.parent_rows) : py::none();
    return logits(call("decode", in.input_ids, in.positions, in.token_valid, parents), "decode");
  }
  void do_rewind(int64_t length) override {
    {
      py::gil_scoped_acquire gil;
      if (py::hasattr(*impl_, "rewind")) {
        call("rewind", length);
        return;
      }
    }
    ForwardBackend::do_rewind(length);  // the refusal naming this backend
  }

 private:
  template <typename... A>
  py::object call(const char* method, A&&... args) const {
    try {
      return impl_->attr(method)(std::forward<A>(args)...);
    } catch (py::error_already_set& e) {
      if (is_complete(e))
        throw Error("backend '" + name_ + "': " + std::string(py::str(e.value())));
      throw Error("backend '" + name_ + "': " + method + "() raised " + raised(e));
    }
  }
  // What prefill and decode must return: logits [rows, vocab], floating point, on the model's
  // device.
  at::Tensor logits(const py::object& r, const char* method) const {
    const int64_t vocab = model().config().vocab_size;
    const std::string expected = "expected a floating-point torch.Tensor [rows, vocab] = [" +
                                 std::to_string(rows()) + ", " + std::to_string(vocab) + "] on " +
                                 model().device().str();
    if (!THPVariable_Check(r.ptr())) {
      throw Error("backend '" + name_ + "': " + method + "() returned " + type_name(r) + ", " +
                  expected);
    }
    at::Tensor t = r.cast<at::Tensor>();
    std::ostringstream found;
    found << t.scalar_type() << " " << t.sizes() << " on " << t.device();
    if (t.dim() != 2 || t.size(0) != rows() || t.size(1) != vocab ||
        !at::isFloatingType(t.scalar_type()) || t.device() != model().device()) {
      throw Error("backend '" + name_ + "': " + method + "() returned a tensor " + found.str() +
                  ", " + expected);
    }
    return t;
  }

  std::string name_;
  std::shared_ptr<py::object> impl_;
};

// A backend that runs no model: every call returns the same logits (token 1 the most likely). The
// Python layer's benchmark (bench/bench_python.py) sets it beside the same backend written in
// Python, so that their difference per step is what a Python backend's call costs.
class FixedLogitsBackend final : public ForwardBackend {
 public:
  using ForwardBackend::ForwardBackend;
  std::string name() const override { return "fixed_logits"; }

 protected:
  void do_prepare(int64_t rows, int64_t) override {
    logits_ = at::zeros({rows, model().config().vocab_size}, at::kFloat);
    logits_.select(1, 1).fill_(1.0);
  }
  at::Tensor do_prefill(const StepInputs&, const at::Tensor&) override { return logits_; }
  at::Tensor do_decode(const StepInputs&, const at::Tensor&) override { return logits_; }
  void do_rewind(int64_t) override {}

 private:
  at::Tensor logits_;
};

void register_fixed_logits_backend() {
  auto& registry = BackendRegistry::instance();
  if (registry.contains("fixed_logits")) return;
  BackendInfo info;
  info.name = "fixed_logits";
  info.description =
      "no model: the same logits every call (the Python benchmark's baseline for a backend "
      "call's cost)";
  info.create = [](std::shared_ptr<const CausalLM> model, const BackendOptions&) {
    return std::make_unique<FixedLogitsBackend>(std::move(model));
  };
  registry.add(std::move(info));
}

void check_name(const std::string& name) {
  if (name.empty() ||
      name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") !=
          std::string::npos) {
    throw Error("register_backend: name '" + name +
                "': expected letters, digits, '_', '.' or '-' (it is used in YAML and on the "
                "command line)");
  }
}

void register_backend(const std::string& name, const py::object& factory,
                      const std::string& description, const py::object& available, bool replace) {
  check_name(name);
  if (!PyCallable_Check(factory.ptr())) {
    throw Error("register_backend('" + name + "'): the factory is " + type_name(factory) +
                ", expected a class or callable taking (model, options)");
  }
  if (!available.is_none() && !PyCallable_Check(available.ptr())) {
    throw Error("register_backend('" + name + "'): available is " + type_name(available) +
                ", expected a callable taking the options and returning why not (or None)");
  }
  auto& registry = BackendRegistry::instance();
  const std::lock_guard<std::mutex> lock(names_mutex());
  if (registry.contains(name)) {
    if (!python_names().count(name)) {
      throw Error("register_backend: '" + name +
                  "' is a backend gengraph or a plug-in registered; choose another name");
    }
    if (!replace) {
      throw Error("register_backend: '" + name +
                  "' is already registered from Python (replace=True replaces it)");
    }
    registry.remove(name);
    python_names().erase(name);
  }
  BackendInfo info;
  info.name = name;
  info.description = description.empty() ? "defined in Python" : description + " (Python)";
  const auto f = hold(factory);
  info.create = [f, name](std::shared_ptr<const CausalLM> model,
                          const BackendOptions& options) -> std::unique_ptr<ForwardBackend> {
    py::gil_scoped_acquire gil;
    py::dict opts;
    for (const auto& [k, v] : options.values()) {
      options.get_string(k, "");  // the Python side reads every option it is given
      opts[py::str(k)] = v;
    }
    py::object impl;
    try {
      impl = (*f)(ModelInfo{model}, opts);
    } catch (py::error_already_set& e) {
      if (is_complete(e)) throw Error("backend '" + name + "': " + std::string(py::str(e.value())));
      throw Error("backend '" + name + "': creating it raised " + raised(e));
    }
    for (const char* method : {"prefill", "decode"}) {
      if (!py::hasattr(impl, method)) {
        throw Error("backend '" + name + "': its factory returned " + type_name(impl) +
                    ", which has no " + method +
                    "() (a Python backend needs prefill and decode; docs/python.md#backends)");
      }
    }
    return std::make_unique<PyBackend>(std::move(model), name, hold(std::move(impl)));
  };
  if (!available.is_none()) {
    const auto a = hold(available);
    info.unavailable_reason = [a, name](const BackendOptions& options) -> std::string {
      py::gil_scoped_acquire gil;
      py::dict opts;
      for (const auto& [k, v] : options.values()) opts[py::str(k)] = v;
      try {
        const py::object why = (*a)(opts);
        return why.is_none() ? std::string() : std::string(py::str(why));
      } catch (py::error_already_set& e) {
        return "its available() raised " + raised(e);
      }
    };
  }
  registry.add(std::move(info));
  python_names().insert(name);
}

void unregister_backend(const std::string& name) {
  const std::lock_guard<std::mutex> lock(names_mutex());
  if (!python_names().count(name)) {
    throw Error("unregister_backend: '" + name + "' was not registered from Python");
  }
  BackendRegistry::instance().remove(name);
  python_names().erase(name);
}

}  // namespace

bool is_python_backend(const std::string& name) {
  const std::lock_guard<std::mutex> lock(names_mutex());
  return python_names().count(name) != 0;
}

void bind_backends(py::module_& m) {
  py::class_<ModelInfo>(m, "ModelInfo",
                        "The model a Python backend is created for (its weights as loaded).")
      .def_property_readonly("source", &ModelInfo::source, "the model folder, or 'preset:NAME'")
      .def_property_readonly("model_type",
                             [](const ModelInfo& i) { return i.model->config().model_type; })
      .def_property_readonly(
          "config",
          [](const ModelInfo& i) -> py::object {
            const auto& doc = i.model->config().document;
            return doc ? from_json(*doc) : py::object(py::dict());
          },
          "the config.json document (a preset's with its overrides)")
      .def_property_readonly("vocab_size",
                             [](const ModelInfo& i) { return i.model->config().vocab_size; })
      .def_property_readonly("num_layers",
                             [](const ModelInfo& i) { return i.model->config().num_layers; })
      .def_property_readonly("dtype", [](const ModelInfo& i) { return i.model->dtype(); })
      .def_property_readonly("device", [](const ModelInfo& i) { return i.model->device(); })
      .def_property_readonly("fused", [](const ModelInfo& i) { return i.model->config().fused; })
      .def(
          "weights",
          [](const ModelInfo& i) {
            py::dict out;
            for (const auto& [k, v] : i.model->weights()) out[py::str(k)] = v;
            return out;
          },
          "checkpoint name -> tensor: the loaded weights themselves (no copies)");

  m.def("register_backend", &register_backend, py::arg("name"), py::arg("factory"),
        py::arg("description") = "", py::arg("available") = py::none(), py::arg("replace") = false);
  m.def("unregister_backend", &unregister_backend, py::arg("name"));
  m.def("_register_fixed_logits_backend", &register_fixed_logits_backend);
  m.def("_python_backends", [] {
    const std::lock_guard<std::mutex> lock(names_mutex());
    return std::vector<std::string>(python_names().begin(), python_names().end());
  });
  m.def(
      "check_backend",
      [](const std::string& name, const std::map<std::string, std::string>& options,
         const std::vector<std::string>& models, uint64_t seed, int64_t max_new_tokens) {
        ConformanceOptions how;
        how.models = models;
        how.seed = seed;
        how.max_new_tokens = max_new_tokens;
        nlohmann::json report;
        {
          py::gil_scoped_release nogil;
          report = check_backend_conformance(name, options, how);
        }
        return from_json(report);
      },
      py::arg("name"), py::arg("options"), py::arg("models"), py::arg("seed"),
      py::arg("max_new_tokens"));
}

}  // namespace gengraph::python

// Backends by name. Built-ins are registered by register_builtin_backends()
// (backends/register_builtin.h); a backend from another library registers itself with
// BackendRegistry::instance().add(...).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "framework/backend/forward_backend.h"
#include "framework/backend/options.h"

namespace gengraph {

struct BackendInfo {
  std::string name;
  std::string description;
  // Empty when usable here with these options; otherwise why not (e.g. "needs a CUDA device; none
  // is visible"). Listings ask with empty options, i.e. the defaults.
  std::function<std::string(const BackendOptions& options)> unavailable_reason;
  // Optional: reads every option (throwing on bad values) without a model, so that an experiment
  // can be checked before anything is loaded. Without it, options are checked at creation.
  // `device` is where the model will run (a backend may need a particular one).
  std::function<void(const BackendOptions& options, const c10::Device& device)> check_options;
  // Reads its options (throwing on bad values) and builds the backend for `model`.
  std::function<std::unique_ptr<ForwardBackend>(std::shared_ptr<const CausalLM> model,
                                                const BackendOptions& options)>
      create;
};

class BackendRegistry {
 public:
  static BackendRegistry& instance();
  void add(BackendInfo info);  // throws on a duplicate name
  // Takes a backend out (a Python-defined one replaced or unregistered: python/src/py_backend.cpp);
  // backends already created from it keep working. Throws for a name not registered.
  void remove(const std::string& name);
  const BackendInfo& get(const std::string& name) const;  // throws listing the known names
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return backends_.count(name) != 0; }
  // Checks the name and, where the backend can without a model (check_options), the options:
  // their values and that none is unknown.
  void validate(const std::string& name, const BackendOptions& options,
                const c10::Device& device) const;
  // get(name).create(...) after validate(), checking availability, and that every option was read.
  std::unique_ptr<ForwardBackend> create(const std::string& name,
                                         std::shared_ptr<const CausalLM> model,
                                         const BackendOptions& options) const;

 private:
  std::map<std::string, BackendInfo> backends_;
};

}  // namespace gengraph

#include "framework/backend/backend_registry.h"

#include <algorithm>

#include "framework/backend/model_step.h"
#include "framework/model/causal_lm.h"
#include "framework/util/error.h"
#include "framework/util/strings.h"

namespace gengraph {

BackendRegistry& BackendRegistry::instance() {
  static BackendRegistry registry;
  return registry;
}

void BackendRegistry::add(BackendInfo info) {
  if (info.name.empty() || !info.create)
    throw Error("a backend needs a name and a create function");
  if (backends_.count(info.name)) throw Error("backend '" + info.name + "' is already registered");
  backends_.emplace(info.name, std::move(info));
}

void BackendRegistry::remove(const std::string& name) {
  get(name);  // the unknown-name error
  backends_.erase(name);
}

const BackendInfo& BackendRegistry::get(const std::string& name) const {
  auto it = backends_.find(name);
  if (it == backends_.end()) {
    throw Error("unknown backend '" + name + "'" + did_you_mean(name, names()) +
                "; known backends: " + join(names(), ", ") + plugin_hint());
  }
  return it->second;
}

std::vector<std::string> BackendRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : backends_) out.push_back(k);
  return out;
}

void BackendRegistry::validate(const std::string& name, const BackendOptions& options,
                               const c10::Device& device) const {
  const BackendInfo& info = get(name);
  if (!info.check_options) return;
  const BackendOptions fresh(name, options.values());  // its own record of which keys were read
  info.check_options(fresh, device);
  fresh.check_all_used();
}

std::unique_ptr<ForwardBackend> BackendRegistry::create(const std::string& name,
                                                        std::shared_ptr<const CausalLM> model,
                                                        const BackendOptions& options) const {
  const BackendInfo& info = get(name);
  if (info.unavailable_reason) {  // what this machine lacks first: the root cause
    const std::string why = info.unavailable_reason(options);
    if (!why.empty()) throw Error("backend '" + name + "' is unavailable here: " + why);
  }
  validate(name, options, model->device());
  auto backend = info.create(std::move(model), options);
  options.check_all_used();
  return backend;
}

ModelStepRegistry& ModelStepRegistry::instance() {
  static ModelStepRegistry registry;
  return registry;
}

void ModelStepRegistry::add(ModelStepInfo info) {
  if (info.name.empty() || !info.create)
    throw Error("a model step kind needs a name and a create function");
  if (kinds_.count(info.name))
    throw Error("model step kind '" + info.name + "' is already registered");
  kinds_.emplace(info.name, std::move(info));
}

const ModelStepInfo& ModelStepRegistry::get(const std::string& name,
                                            const std::string& where) const {
  auto it = kinds_.find(name);
  if (it == kinds_.end()) {
    throw Error(where + ": unknown model step '" + name + "'" + did_you_mean(name, names()) +
                "; known steps: " + join(names(), ", "));
  }
  return it->second;
}

std::vector<std::string> ModelStepRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : kinds_) out.push_back(k);
  return out;
}

std::string ModelStepRegistry::owner_of(const std::string& key) const {
  for (const auto& [name, info] : kinds_) {
    if (std::find(info.option_keys.begin(), info.option_keys.end(), key) != info.option_keys.end())
      return name;
  }
  return "";
}

}  // namespace gengraph

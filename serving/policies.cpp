// The scheduling policies gengraph registers (<gengraph/ext/scheduling.h>), and their registry.
#include <gengraph/ext/scheduling.h>

#include "framework/util/error.h"
#include "framework/util/strings.h"

namespace gengraph {
namespace {

// First come, first served: submission order (vLLM's default).
class Fcfs final : public SchedulingPolicy {
 public:
  std::string name() const override { return "fcfs"; }
  bool before(const RequestView& a, const RequestView& b) const override { return a.id < b.id; }
};

// The shortest prompt still to run first: short requests are not stuck behind long prefills
// (shortest-job-first on the part the scheduler knows; long prompts may wait under load).
class ShortestPromptFirst final : public SchedulingPolicy {
 public:
  std::string name() const override { return "shortest_prompt_first"; }
  bool before(const RequestView& a, const RequestView& b) const override {
    return a.to_compute < b.to_compute;
  }
};

// Request::priority, higher first; equal priorities in submission order.
class Priority final : public SchedulingPolicy {
 public:
  std::string name() const override { return "priority"; }
  bool before(const RequestView& a, const RequestView& b) const override {
    return a.priority > b.priority;
  }
};

// The request whose prompt the prefix index holds most of first (SGLang's longest-prefix-match
// scheduling): requests sharing a cached system prompt run together, while its blocks are still
// cached, instead of being evicted by unrelated prompts in between.
class LongestPrefixFirst final : public SchedulingPolicy {
 public:
  std::string name() const override { return "longest_prefix_first"; }
  bool before(const RequestView& a, const RequestView& b) const override {
    return a.cached_prefix > b.cached_prefix;
  }
  bool wants_cached_prefix() const override { return true; }
};

template <typename T>
PolicyInfo info(const std::string& description) {
  return PolicyInfo{T().name(), description, [] { return std::make_unique<T>(); }};
}

}  // namespace

PolicyRegistry& PolicyRegistry::instance() {
  static PolicyRegistry* registry = [] {
    auto* r = new PolicyRegistry();
    r->add(info<Fcfs>("first come, first served (submission order)"));
    r->add(info<ShortestPromptFirst>(
        "the fewest positions still to compute first (short prompts overtake long prefills)"));
    r->add(info<Priority>("Request::priority, higher first; ties in submission order"));
    r->add(info<LongestPrefixFirst>(
        "the most positions already in the prefix index first (requests sharing a cached "
        "prefix run together)"));
    return r;
  }();
  return *registry;
}

void PolicyRegistry::add(PolicyInfo info) {
  if (info.name.empty() || !info.create) {
    throw Error("PolicyRegistry::add: a policy needs a name and a create function");
  }
  if (policies_.count(info.name)) {
    throw Error("scheduling policy '" + info.name + "' is registered already");
  }
  const std::string name = info.name;
  policies_.emplace(name, std::move(info));
}

const PolicyInfo& PolicyRegistry::get(const std::string& name) const {
  auto it = policies_.find(name);
  if (it == policies_.end()) {
    throw Error("unknown scheduling policy '" + name + "'" + did_you_mean(name, names()) +
                "; known: " + join(names(), ", "));
  }
  return it->second;
}

std::vector<std::string> PolicyRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& [name, info] : policies_) out.push_back(name);
  return out;
}

}  // namespace gengraph

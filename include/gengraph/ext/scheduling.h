// Scheduling policies, a public header (<gengraph/extension.h> includes it): the order in which
// the scheduler (docs/serving.md) admits waiting requests into the running batch and, when KV
// blocks run out, which running request it preempts first (the one the order puts last).
// gengraph's own: fcfs, shortest_prompt_first, priority, longest_prefix_first. A policy from
// another library registers itself with PolicyRegistry::instance().add(...) and is then chosen by
// name like these (SchedulerOptions::policy, YAML `serving: {policy: NAME}`).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace gengraph {

// What a policy sees of a request.
struct RequestView {
  int64_t id = 0;             // submission order, from 0
  int64_t prompt_tokens = 0;  // the prompt's length
  int64_t to_compute = 0;     // positions it still has to run through the model before a token
  int64_t generated = 0;      // tokens chosen so far
  int64_t max_new_tokens = 0;
  int64_t priority = 0;       // Request::priority (higher first under `priority`)
  int64_t cached_prefix = 0;  // positions the prefix index already holds (asked for only when
                              // the policy's wants_cached_prefix() is true; 0 otherwise)
  bool running = false;       // admitted and not preempted since
};

class SchedulingPolicy {
 public:
  virtual ~SchedulingPolicy() = default;
  virtual std::string name() const = 0;
  // Whether `a` goes before `b`: admitted first, preempted last. A strict weak order; ties are
  // broken by the scheduler in submission order.
  virtual bool before(const RequestView& a, const RequestView& b) const = 0;
  // Whether before() reads RequestView::cached_prefix (a lookup in the prefix index per waiting
  // request and step).
  virtual bool wants_cached_prefix() const { return false; }
};

struct PolicyInfo {
  std::string name;
  std::string description;
  std::function<std::unique_ptr<SchedulingPolicy>()> create;
};

class PolicyRegistry {
 public:
  static PolicyRegistry& instance();
  void add(PolicyInfo info);  // throws on a duplicate name
  // Throws for an unknown name, listing the known ones.
  const PolicyInfo& get(const std::string& name) const;
  std::vector<std::string> names() const;

 private:
  std::map<std::string, PolicyInfo> policies_;
};

}  // namespace gengraph

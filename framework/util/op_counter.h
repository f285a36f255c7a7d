// Counts the ATen operators the calling thread dispatches while a counter lives, through a
// RecordFunction observer: what the host issues (top-level operators, not those an operator calls
// in turn) and all of them (nested included; closer to the kernels that run). Works on every
// device, so the operator count of a step shows on a CPU-only machine too. Observing costs time:
// count in untimed passes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace gengraph {

class AtenOpCounter {
 public:
  AtenOpCounter();
  ~AtenOpCounter();
  AtenOpCounter(const AtenOpCounter&) = delete;
  AtenOpCounter& operator=(const AtenOpCounter&) = delete;

  int64_t top_level() const;  // operators the host dispatched itself
  int64_t all() const;        // every operator, nested ones included
  // Operators whose result the host reads back, each a device-to-host wait on CUDA: a scalar read
  // (aten::_local_scalar_dense, what item() and scalar conversions call), aten::nonzero (its size
  // depends on the values), aten::equal and aten::is_nonzero. A tensor copied to the host with
  // to()/cpu() is not among them (its operator's name does not say the direction).
  int64_t host_reads() const;
  // Innermost operators that compute: those that call no other computing operator, views,
  // allocations and pure wrappers (to, reshape, contiguous, clone) not counted. A composite
  // operator counts as the kernels it calls; on CUDA each counted operator is about one kernel
  // launch, so this is the kernel count of a step as seen from any machine.
  int64_t kernels() const;
  // The top-level operators by name, with how often each was dispatched: where a step's operators
  // come from, for benchmarks and for finding what to trim.
  std::map<std::string, int64_t> top_level_by_name() const;

  struct State;

 private:
  std::unique_ptr<State> state_;
  uint64_t handle_ = 0;
};

}  // namespace gengraph

#include "framework/util/op_counter.h"

#include <ATen/record_function.h>

#include <cstring>

#include "framework/util/error.h"

namespace gengraph {

struct AtenOpCounter::State {
  int64_t depth = 0, top = 0, all = 0, reads = 0;
};

namespace {

// The counter of this thread (one at a time: nesting counters is refused).
thread_local AtenOpCounter::State* t_state = nullptr;

bool reads_back(const char* name) {
  for (const char* r :
       {"aten::_local_scalar_dense", "aten::nonzero", "aten::equal", "aten::is_nonzero"}) {
    if (std::strcmp(name, r) == 0) return true;
  }
  return false;
}

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
  if (t_state) {
    if (t_state->depth++ == 0) ++t_state->top;
    ++t_state->all;
    if (reads_back(fn.name())) ++t_state->reads;
  }
  return nullptr;
}

void on_exit(const at::RecordFunction&, at::ObserverContext*) {
  if (t_state) --t_state->depth;
}

}  // namespace

AtenOpCounter::AtenOpCounter() : state_(std::make_unique<State>()) {
  if (t_state) throw Error("AtenOpCounter: a counter is already active on this thread");
  t_state = state_.get();
  handle_ = at::addThreadLocalCallback(
      at::RecordFunctionCallback(on_enter, on_exit).scopes({at::RecordScope::FUNCTION}));
}

AtenOpCounter::~AtenOpCounter() {
  at::removeCallback(handle_);
  t_state = nullptr;
}

int64_t AtenOpCounter::top_level() const { return state_->top; }
int64_t AtenOpCounter::all() const { return state_->all; }
int64_t AtenOpCounter::host_reads() const { return state_->reads; }

}  // namespace gengraph

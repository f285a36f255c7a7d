#include "framework/util/op_counter.h"

#include <ATen/record_function.h>

#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "framework/util/error.h"

namespace gengraph {

struct AtenOpCounter::State {
  int64_t top = 0, all = 0, reads = 0, kernels = 0;
  std::map<std::string, int64_t> top_names;
  // Per open operator: whether it computes nothing itself (a view, an allocation, a wrapper), and
  // whether an operator it called counted as a kernel.
  struct Frame {
    bool no_kernel = false;
    bool kernel_below = false;
  };
  std::vector<Frame> open;
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

// Operators that launch no kernel of their own: views and other metadata changes, allocations,
// and wrappers that only ever compute through the operators they call (to, reshape, contiguous,
// clone: a copy among those shows as aten::copy_).
bool computes_nothing(const char* name) {
  static const std::unordered_set<std::string_view> kNames = {
      "aten::view",           "aten::_unsafe_view", "aten::view_as",       "aten::reshape",
      "aten::_reshape_alias", "aten::as_strided",   "aten::slice",         "aten::select",
      "aten::narrow",         "aten::transpose",    "aten::permute",       "aten::t",
      "aten::unsqueeze",      "aten::squeeze",      "aten::expand",        "aten::expand_as",
      "aten::flatten",        "aten::unflatten",    "aten::split",         "aten::split_with_sizes",
      "aten::chunk",          "aten::unbind",       "aten::alias",         "aten::detach",
      "aten::lift_fresh",     "aten::empty",        "aten::empty_strided", "aten::empty_like",
      "aten::resize_",        "aten::to",           "aten::contiguous",    "aten::clone",
      "aten::result_type",    "aten::size",         "aten::stride",        "aten::is_same_size",
      "aten::set_",           "aten::resolve_conj", "aten::resolve_neg",   "aten::_conj",
      "aten::conj",           "aten::_neg_view"};
  return kNames.count(name) != 0;
}

std::unique_ptr<at::ObserverContext> on_enter(const at::RecordFunction& fn) {
  if (t_state) {
    if (t_state->open.empty()) {
      ++t_state->top;
      ++t_state->top_names[fn.name()];
    }
    ++t_state->all;
    if (reads_back(fn.name())) ++t_state->reads;
    t_state->open.push_back({computes_nothing(fn.name()), false});
  }
  return nullptr;
}

// An operator counts as a kernel when it computes and none of the operators it called did: the
// innermost computing operators, one per kernel launch on CUDA (a close proxy for it). A chain
// such as zero_ -> fill_ counts once; addmm with a bias counts as its one copy_ of the bias into
// the output, which then stands for the GEMM.
void on_exit(const at::RecordFunction&, at::ObserverContext*) {
  if (!t_state || t_state->open.empty()) return;
  const AtenOpCounter::State::Frame f = t_state->open.back();
  t_state->open.pop_back();
  const bool kernel = !f.no_kernel && !f.kernel_below;
  if (kernel) ++t_state->kernels;
  if ((kernel || f.kernel_below) && !t_state->open.empty())
    t_state->open.back().kernel_below = true;
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
int64_t AtenOpCounter::kernels() const { return state_->kernels; }
std::map<std::string, int64_t> AtenOpCounter::top_level_by_name() const {
  return state_->top_names;
}

}  // namespace gengraph

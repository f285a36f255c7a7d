// The token history that processors, stopping criteria and strategies read: one shared state.
//
// Two forms. The growing form (the host loop): `tokens` holds exactly the tokens so far and grows
// by a column each step. The static form (the whole-step loop, framework/decoding/whole_step.h):
// `tokens` is a fixed [rows, max_length] buffer written in place, and `written`, a 0-dim int64
// tensor on the tokens' device, says how many columns hold tokens; nothing about it is known on
// the host, so a part that reads it never waits for the device and its shapes never change, which
// is what a CUDA graph needs. Parts that accept the static form say so (whole_step_blocker()
// returns "") and read the length through the helpers below.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <string>

namespace gengraph {

struct Sequences {
  at::Tensor tokens;          // [rows, prompt_length + generated] int64, prompts left-padded
  at::Tensor prompt_valid;    // [rows, prompt_length] bool, false on left padding
  int64_t prompt_length = 0;  // padded prompt length, the same for every row
  at::Tensor written;         // static form only: [] int64, the columns of `tokens` written
  bool is_static() const { return written.defined(); }
  int64_t rows() const { return tokens.size(0); }
  // Growing form only (the static form's length lives on the device: see static_length()).
  int64_t length() const;
  int64_t generated() const { return length() - prompt_length; }
};

// The first of `members`' whole_step_blocker() reasons, "" when none has one (chains of parts).
template <typename Members>
std::string first_whole_step_blocker(const Members& members) {
  for (const auto& m : members) {
    std::string why = m->whole_step_blocker();
    if (!why.empty()) return why;
  }
  return "";
}

// The static form's helpers, each a few device ops without a host read.
// [rows, n] int64: the last n written tokens of every row (columns before 0 clamp to column 0;
// callers check written >= n where it matters).
at::Tensor last_tokens(const Sequences& seqs, int64_t n);
// [cap] bool: which columns of the static buffer are written (prompt included).
at::Tensor written_columns(const Sequences& seqs);

}  // namespace gengraph

// The token history, a public header (<gengraph/extension.h> includes it): what logits
// processors, stopping criteria and search strategies read and write, in one form.
//
// `TokenHistory::buffer` is a fixed [rows, capacity] int64 tensor written in place, one column per
// step, and `length` says how many columns hold tokens (prompt included). The decoding loop runs
// every part the same way in both of its modes; only where the length lives differs:
//  - the host loop knows it on the host (`Length` holds an integer): a part's test of it costs
//    nothing and a slice of the written columns is a view;
//  - the whole step on the device, which may be captured as a CUDA graph, keeps it in a 0-dim
//    int64 tensor on the buffer's device: nothing waits for the device and no shape changes from
//    step to step, which is what a graph needs.
// Parts are written once, against the helpers below (`Length`, `Flag`, `Factor`, last_tokens,
// write_column, keep, ...), which do the least work the length's form allows. A part never asks
// which form it has.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace gengraph {

// A yes/no known on the host, or a [] bool tensor on the device.
class Flag {
 public:
  Flag(bool known) : known_(known) {}  // NOLINT(google-explicit-constructor)
  explicit Flag(at::Tensor on_device) : device_(std::move(on_device)) {}
  // The value when the host knows it.
  std::optional<bool> known() const;
  bool never() const { return !device_.defined() && !known_; }  // known to be false
  bool always() const { return !device_.defined() && known_; }  // known to be true
  const at::Tensor& tensor() const;                             // the device form's [] bool

 private:
  bool known_ = false;
  at::Tensor device_;
};

// `mask` where the flag holds, false elsewhere (`mask` itself when it is known to hold).
at::Tensor and_flag(const at::Tensor& mask, const Flag& flag);
// then() where the flag holds, `otherwise` elsewhere: at::where on the device, no work at all
// when the host knows the answer (then() is not even called when it is false).
at::Tensor pick(const Flag& flag, const std::function<at::Tensor()>& then,
                const at::Tensor& otherwise);
// [rows] bool filled with the flag (an expanded view on the device).
at::Tensor flag_rows(const Flag& flag, int64_t rows, const at::TensorOptions& options);

// A float factor known on the host, or a [] float64 tensor on the device. Applied to a tensor it
// acts as a scalar operand would: rounded to the tensor's dtype, then one elementwise op.
class Factor {
 public:
  Factor(double known) : known_(known) {}  // NOLINT(google-explicit-constructor)
  explicit Factor(at::Tensor on_device) : device_(std::move(on_device)) {}
  Factor minus(double x) const;
  // Rounded to `dtype` once, for a factor applied to several tensors of that dtype.
  Factor as(at::ScalarType dtype) const;
  at::Tensor multiply(const at::Tensor& x) const;
  at::Tensor divide(const at::Tensor& x) const;

 private:
  double known_ = 0;
  at::Tensor device_;  // [] float64
};

// A count of columns: on the host in the host loop, a [] int64 tensor in the whole step.
class Length {
 public:
  Length() = default;
  explicit Length(int64_t known) : known_(known) {}
  explicit Length(at::Tensor on_device) : device_(std::move(on_device)) {}
  bool on_host() const { return !device_.defined(); }
  // The host's value; an error in the whole step (a part that needs it cannot be captured).
  int64_t known() const;
  const at::Tensor& tensor() const;  // the whole step's [] int64
  const at::Tensor& index() const;   // ... viewed as [1], an index for index_select and the like
  // The value as a [] int64 tensor in either form (in the host loop one small allocation).
  at::Tensor as_tensor(const at::TensorOptions& options) const;

  Flag lt(int64_t n) const;
  Flag le(int64_t n) const;
  Flag gt(int64_t n) const;
  Flag ge(int64_t n) const;
  Flag eq(int64_t n) const;
  Length plus(int64_t n) const;  // a new length (one op on the device)
  void advance();                // += 1, in place (the loop calls it after every decision)
  // (length + offset) ** exponent and base ** (length + offset), in float64.
  Factor power(double exponent, int64_t offset = 0) const;
  Factor exponential(double base, int64_t offset = 0) const;
  // A tensor of `sizes` holding the length (an expanded view on the device).
  at::Tensor filled(at::IntArrayRef sizes, const at::TensorOptions& options) const;

 private:
  int64_t known_ = 0;
  at::Tensor device_;
  mutable at::Tensor index_;  // device_ as [1], made on first use
};

// Every row's tokens so far: the (left-padded) prompt, then one column per decoding step. Not the
// result (that is Sequence, <gengraph/generation.h>): the loop's working buffer, which parts read
// through the helpers below.
struct TokenHistory {
  at::Tensor buffer;          // [rows, capacity] int64, prompts left-padded, written in place
  at::Tensor prompt_valid;    // [rows, prompt_length] bool, false on left padding
  int64_t prompt_length = 0;  // padded prompt length, the same for every row
  Length length;              // columns of `buffer` written, the prompt included
  int64_t rows() const { return buffer.size(0); }
  int64_t capacity() const { return buffer.size(1); }
};

// [rows, n]: the last n written tokens of every row. Columns before 0 clamp to column 0: callers
// that need n tokens test length.ge(n).
at::Tensor last_tokens(const TokenHistory& seqs, int64_t n);
// [rows]: the last written token of every row.
at::Tensor last_token(const TokenHistory& seqs);
// The written tokens, [rows, length] in the host loop; in the whole step [rows, capacity] with
// every unwritten column holding column 0's token (a token of the history, so gathering and
// scattering it again changes nothing).
at::Tensor written_tokens(const TokenHistory& seqs);
// The tokens of columns from `first` on, with a weight per column: 1 where written, 0 elsewhere
// (in the host loop only the written columns, all weighing 1). {[rows, n] int64, [rows, n] dtype}.
std::pair<at::Tensor, at::Tensor> weighted_tokens(const TokenHistory& seqs, int64_t first,
                                                  at::ScalarType dtype);
// The sequences as far as they are written ([rows, length] in the host loop, the whole buffer in
// the whole step), for parts that slide windows over them; within_written() then keeps only the
// windows that lie in the written columns.
at::Tensor written_span(const TokenHistory& seqs);
// window_flags [rows, W] for windows of `extent` columns starting at 0..W-1 of written_span():
// false for the windows that reach unwritten columns.
at::Tensor within_written(const TokenHistory& seqs, const at::Tensor& window_flags, int64_t extent);
// [capacity] bool: which columns are written.
at::Tensor written_columns(const TokenHistory& seqs);

// x's column `at` along `dim` (the dimension dropped).
at::Tensor read_column(const at::Tensor& x, int64_t dim, const Length& at);
// Writes `values` (x's shape without `dim`) into x's column `at` along `dim`, in place.
void write_column(const at::Tensor& x, int64_t dim, const Length& at, const at::Tensor& values);
// Fills x's last-dimension columns from `from` on with `value`, in place.
void fill_from(const at::Tensor& x, const Length& from, const at::Scalar& value);

// Sets a piece of a strategy's state to `fresh`. The host loop rebinds it (no copy). The whole
// step writes it in place, because a graph replays those very buffers, and there, when `live`
// ([] bool) is given, only while it holds: a step run past the end changes nothing. `seqs` says
// which loop runs.
void keep(at::Tensor& state, const at::Tensor& fresh, const TokenHistory& seqs,
          const at::Tensor& live = {});

// Sets a piece of a strategy's state with an elementwise op that writes `out` (which may alias
// its inputs): into a new tensor in the host loop (the old one stays valid for whoever holds it),
// into the state itself in the whole step (one kernel, no copy).
void update(at::Tensor& state, const TokenHistory& seqs,
            const std::function<void(at::Tensor&)>& op);

// Makes `t` a tensor of `sizes` and `options` filled with `value`: in place when it already is one
// (so that a graph captured over it in an earlier generation stays valid), allocated otherwise.
// Strategies' begin() sets their state with it.
void refill(at::Tensor& t, at::IntArrayRef sizes, const at::TensorOptions& options,
            const at::Scalar& value);

// The first of `members`' whole_step_blocker() reasons, "" when none has one (chains of parts).
template <typename Members>
std::string first_whole_step_blocker(const Members& members) {
  for (const auto& m : members) {
    std::string why = m->whole_step_blocker();
    if (!why.empty()) return why;
  }
  return "";
}

}  // namespace gengraph

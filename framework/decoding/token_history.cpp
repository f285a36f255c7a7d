#include <ATen/ATen.h>
#include <gengraph/ext/token_history.h>

#include <cmath>

#include "framework/util/error.h"

namespace gengraph {

std::optional<bool> Flag::known() const {
  if (device_.defined()) return std::nullopt;
  return known_;
}

const at::Tensor& Flag::tensor() const {
  if (!device_.defined()) throw Error("internal: Flag::tensor() on a flag known on the host");
  return device_;
}

at::Tensor and_flag(const at::Tensor& mask, const Flag& flag) {
  if (flag.always()) return mask;
  if (flag.never()) return at::zeros_like(mask);
  return mask.logical_and(flag.tensor());
}

at::Tensor pick(const Flag& flag, const std::function<at::Tensor()>& then,
                const at::Tensor& otherwise) {
  if (flag.always()) return then();
  if (flag.never()) return otherwise;
  return at::where(flag.tensor(), then(), otherwise);
}

at::Tensor flag_rows(const Flag& flag, int64_t rows, const at::TensorOptions& options) {
  if (const auto known = flag.known()) return at::full({rows}, *known, options.dtype(at::kBool));
  return flag.tensor().expand({rows});
}

Factor Factor::minus(double x) const {
  if (!device_.defined()) return Factor(known_ - x);
  return Factor(device_ - x);
}

Factor Factor::as(at::ScalarType dtype) const {
  if (!device_.defined() || device_.scalar_type() == dtype) return *this;
  return Factor(device_.to(dtype));
}

at::Tensor Factor::multiply(const at::Tensor& x) const {
  if (!device_.defined()) return x * known_;
  return x * as(x.scalar_type()).device_;
}

at::Tensor Factor::divide(const at::Tensor& x) const {
  if (!device_.defined()) return x / known_;
  return x / as(x.scalar_type()).device_;
}

int64_t Length::known() const {
  if (device_.defined()) {
    throw Error(
        "internal: Length::known() in the whole step, where the length lives on the device "
        "(a part that reads it on the host cannot be captured: see "
        "<gengraph/ext/token_history.h>)");
  }
  return known_;
}

const at::Tensor& Length::tensor() const {
  if (!device_.defined()) throw Error("internal: Length::tensor() on a length known on the host");
  return device_;
}

const at::Tensor& Length::index() const {
  if (!device_.defined()) throw Error("internal: Length::index() on a length known on the host");
  if (!index_.defined()) index_ = device_.view({1});
  return index_;
}

at::Tensor Length::as_tensor(const at::TensorOptions& options) const {
  if (device_.defined()) return device_;
  return at::scalar_tensor(known_, options.dtype(at::kLong));
}

Flag Length::lt(int64_t n) const { return on_host() ? Flag(known_ < n) : Flag(device_.lt(n)); }
Flag Length::le(int64_t n) const { return on_host() ? Flag(known_ <= n) : Flag(device_.le(n)); }
Flag Length::gt(int64_t n) const { return on_host() ? Flag(known_ > n) : Flag(device_.gt(n)); }
Flag Length::ge(int64_t n) const { return on_host() ? Flag(known_ >= n) : Flag(device_.ge(n)); }
Flag Length::eq(int64_t n) const { return on_host() ? Flag(known_ == n) : Flag(device_.eq(n)); }

Length Length::plus(int64_t n) const {
  return on_host() ? Length(known_ + n) : Length(device_ + n);
}

void Length::advance() {
  if (on_host()) {
    ++known_;
  } else {
    device_.add_(1);
  }
}

Factor Length::power(double exponent, int64_t offset) const {
  if (on_host()) return Factor(std::pow(static_cast<double>(known_ + offset), exponent));
  return Factor(at::pow((offset == 0 ? device_ : device_ + offset).to(at::kDouble), exponent));
}

Factor Length::exponential(double base, int64_t offset) const {
  if (on_host()) return Factor(std::pow(base, static_cast<double>(known_ + offset)));
  return Factor(at::pow(base, (offset == 0 ? device_ : device_ + offset).to(at::kDouble)));
}

at::Tensor Length::filled(at::IntArrayRef sizes, const at::TensorOptions& options) const {
  if (on_host()) return at::full(sizes, known_, options.dtype(at::kLong));
  return device_.expand(sizes);
}

at::Tensor last_tokens(const TokenHistory& seqs, int64_t n) {
  const Length& len = seqs.length;
  if (len.on_host() && len.known() >= n) return seqs.buffer.narrow(1, len.known() - n, n);
  const at::Tensor end = len.as_tensor(seqs.buffer.options());
  if (n == 1) return seqs.buffer.index_select(1, (end - 1).clamp_min_(0).view({1}));
  const at::Tensor cols = (at::arange(n, seqs.buffer.options()) + (end - n)).clamp_min(0);
  return seqs.buffer.index_select(1, cols);
}

at::Tensor last_token(const TokenHistory& seqs) {
  const Length& len = seqs.length;
  if (len.on_host()) return seqs.buffer.select(1, std::max<int64_t>(len.known() - 1, 0));
  return last_tokens(seqs, 1).squeeze(1);
}

at::Tensor written_columns(const TokenHistory& seqs) {
  const at::Tensor cols = at::arange(seqs.capacity(), seqs.buffer.options());
  if (seqs.length.on_host()) return cols.lt(seqs.length.known());
  return cols.lt(seqs.length.tensor());
}

at::Tensor written_tokens(const TokenHistory& seqs) {
  if (seqs.length.on_host()) return seqs.buffer.narrow(1, 0, seqs.length.known());
  return at::where(written_columns(seqs), seqs.buffer, seqs.buffer.narrow(1, 0, 1));
}

std::pair<at::Tensor, at::Tensor> weighted_tokens(const TokenHistory& seqs, int64_t first,
                                                  at::ScalarType dtype) {
  const auto opts = seqs.buffer.options().dtype(dtype);
  if (seqs.length.on_host()) {
    const int64_t n = std::max<int64_t>(seqs.length.known() - first, 0);
    const at::Tensor ids = seqs.buffer.narrow(1, first, n);
    return {ids, at::ones(ids.sizes(), opts)};
  }
  const at::Tensor cols = at::arange(seqs.capacity(), seqs.buffer.options());
  const at::Tensor weight = written_columns(seqs).logical_and(cols.ge(first)).to(dtype);
  return {seqs.buffer, weight.expand(seqs.buffer.sizes())};
}

at::Tensor written_span(const TokenHistory& seqs) {
  if (seqs.length.on_host()) return seqs.buffer.narrow(1, 0, seqs.length.known());
  return seqs.buffer;
}

at::Tensor within_written(const TokenHistory& seqs, const at::Tensor& window_flags,
                          int64_t extent) {
  if (seqs.length.on_host()) return window_flags;  // written_span() holds only written columns
  const at::Tensor starts = at::arange(window_flags.size(-1), seqs.buffer.options());
  return window_flags.logical_and(starts.le(seqs.length.tensor() - extent));
}

at::Tensor read_column(const at::Tensor& x, int64_t dim, const Length& at) {
  if (at.on_host()) return x.select(dim, at.known());
  return x.index_select(dim, at.index()).squeeze(dim);
}

void write_column(const at::Tensor& x, int64_t dim, const Length& at, const at::Tensor& values) {
  if (at.on_host()) {
    x.select(dim, at.known()).copy_(values);
  } else {
    x.index_copy_(dim, at.index(), values.unsqueeze(dim));
  }
}

void fill_from(const at::Tensor& x, const Length& from, const at::Scalar& value) {
  const int64_t size = x.size(-1);
  if (from.on_host()) {
    if (from.known() < size) x.narrow(-1, from.known(), size - from.known()).fill_(value);
    return;
  }
  x.masked_fill_(at::arange(size, x.options().dtype(at::kLong)).ge(from.tensor()), value);
}

void keep(at::Tensor& state, const at::Tensor& fresh, const TokenHistory& seqs,
          const at::Tensor& live) {
  if (seqs.length.on_host()) {
    state = fresh;
  } else if (live.defined()) {
    at::where_out(state, live, fresh, state);  // one kernel: an elementwise full overlap
  } else {
    state.copy_(fresh);
  }
}

void update(at::Tensor& state, const TokenHistory& seqs,
            const std::function<void(at::Tensor&)>& op) {
  if (seqs.length.on_host()) {
    at::Tensor out = at::empty_like(state);
    op(out);
    state = out;
  } else {
    op(state);
  }
}

void refill(at::Tensor& t, at::IntArrayRef sizes, const at::TensorOptions& options,
            const at::Scalar& value) {
  if (t.defined() && t.sizes() == sizes && t.dtype() == options.dtype() &&
      t.device() == options.device() && t.is_contiguous()) {
    t.fill_(value);
  } else {
    t = at::full(sizes, value, options);
  }
}

}  // namespace gengraph

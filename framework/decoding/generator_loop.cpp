#include <ATen/ATen.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "framework/decoding/candidates/candidate_generator.h"
#include "framework/decoding/generator.h"
#include "framework/decoding/search/search_strategy.h"
#include "framework/model/causal_lm.h"
#include "framework/util/clock.h"
#include "framework/util/error.h"
#include "framework/util/progress.h"
#include "framework/util/step_graph.h"

namespace gengraph {
namespace {

// Hands the step's output tokens to `stream`, row r being sequence r % per_input of input
// r / per_input (rows are laid out input by input). False when the stream asked to stop.
bool emit(const TokenStream& stream, const StepDecision& d, int64_t per_input, int64_t step) {
  const auto on_host = [](const at::Tensor& t) { return t.to(at::kCPU).contiguous(); };
  const at::Tensor tokens = on_host(d.next_tokens);
  const int64_t rows = tokens.numel();
  // A streaming strategy that leaves `emitted` unset outputs every row's token; one that leaves
  // `continues` unset says nothing of which token is a row's last.
  const at::Tensor emitted = d.emitted.defined() ? on_host(d.emitted) : at::ones({rows}, at::kBool);
  const at::Tensor continues =
      d.continues.defined() ? on_host(d.continues) : at::ones({rows}, at::kBool);
  const at::Tensor scores =
      d.token_scores.defined() ? on_host(d.token_scores.to(at::kDouble)) : at::Tensor();
  auto top = top_logprobs_on_host(d);  // top_logprobs: each row's alternatives
  const int64_t* t = tokens.data_ptr<int64_t>();
  const bool* e = emitted.data_ptr<bool>();
  const bool* c = continues.data_ptr<bool>();
  bool go_on = true;
  for (int64_t r = 0; r < rows; ++r) {
    if (!e[r]) continue;
    StreamedToken token{r / per_input, r % per_input, t[r], step};
    if (scores.defined()) token.logprob = scores.data_ptr<double>()[r];
    if (!top.empty()) token.top = std::move(top[r]);
    token.last = !c[r];
    go_on = stream(token) && go_on;
  }
  return go_on;
}

// Whether every logit is finite, read at once: their sum (one reduction, the cheapest on the CPU)
// is finite only when every logit is (NaN and infinities carry through a sum, and nothing turns
// them finite again). A sum that is not finite may still be finite values overflowing float
// (3e38 twice), which the exact test then settles; that path is as rare as such logits.
bool all_finite(const at::Tensor& logits) {
  if (std::isfinite(logits.sum().item<double>())) return true;
  return at::isfinite(logits).all().item<bool>();
}

// The same as a value left on the device to read later ([] double): the sum accumulated in
// double, which no float logits can overflow (it would take some 10^270 of them), so it is
// finite exactly when every logit is. The logits themselves are gone or changed by the time it
// is read (processors edit their scores in place).
at::Tensor finite_sum(const at::Tensor& logits) { return at::sum(logits, at::kDouble); }

// What a non-finite sum says of the logits it summed.
std::string sum_says(double sum) {
  return std::isnan(sum) ? "NaN, or infinities of both signs"
                         : (sum > 0 ? "inf" : "-inf") + std::string(" among them");
}

// "NaN", "inf" or "-inf".
std::string nonfinite_name(double v) { return std::isnan(v) ? "NaN" : (v > 0 ? "inf" : "-inf"); }

// Where `logits` ([rows, vocab]) first holds a value that is not finite, and how many such values
// it holds: "row 0: NaN at token 123; 4 non-finite values in all". Read on the error path only.
std::string first_nonfinite(const at::Tensor& logits) {
  const at::Tensor l = logits.to(at::kCPU, at::kFloat).reshape({logits.size(0), -1});
  const at::Tensor bad = at::isfinite(l).logical_not();
  const int64_t count = bad.sum().item<int64_t>();
  if (count == 0) return "";
  const at::Tensor where = bad.nonzero()[0];  // [row, token], row-major first
  const int64_t row = where[0].item<int64_t>(), token = where[1].item<int64_t>();
  return "row " + std::to_string(row) + ": " + nonfinite_name(l[row][token].item<double>()) +
         " at token " + std::to_string(token) +
         (count > 1 ? "; " + std::to_string(count) + " non-finite values in all" : "");
}

// NaN or inf in a backend's logits: search over them gives garbage without a word (greedy picks
// token 0, scores are -nan). Finite weights whose forward overflows do this (a checkpoint from a
// diverged run, random weights drawn too wide), and so does a backend that computes wrong values
// (a Python or plug-in backend, a damaged graph). `step` 0 is the prompts' (the prefill), else
// the decode step; `detail` says where, when known.
[[noreturn]] void refuse_nonfinite(const ForwardBackend& backend, int64_t step,
                                   const std::string& detail) {
  const std::string where = detail.empty() ? "" : " (" + detail + ")";
  if (step == 0) {
    const bool nan = detail.find("NaN") != std::string::npos;
    throw Error("the model's logits for the prompts hold " + std::string(nan ? "NaN" : "infinite") +
                " values (backend '" + backend.name() + "'" +
                (detail.empty() ? "" : ", " + detail) +
                "): its weights are finite but its forward overflows (a checkpoint from a "
                "diverged run, or random weights drawn too wide: a large initializer_range), or "
                "the backend computes wrong values; the generated tokens would be garbage");
  }
  throw Error("backend '" + backend.name() + "' gave non-finite logits at decode step " +
              std::to_string(step) + where +
              ": the model's forward overflows, or the backend computes wrong values; the "
              "generated tokens would be garbage");
}

// Checks the logits of `step` at once (one reduction and one read).
void check_finite_now(const ForwardBackend& backend, const at::Tensor& logits, int64_t step) {
  if (!all_finite(logits)) refuse_nonfinite(backend, step, first_nonfinite(logits));
}

// The logits as the parts read them: float32 (no operator when they already are).
at::Tensor as_float(const at::Tensor& logits) {
  return logits.scalar_type() == at::kFloat ? logits : logits.to(at::kFloat);
}

// Speculative sampling's choice at a candidate's position (Leviathan et al. 2023, algorithm 1;
// transformers' _speculative_sampling). With p the target's distribution (the softmax of its
// processed scores, [1, vocab]) and q the draft's ([vocab]), the candidate stays with probability
// min(1, p(c) / q(c)); otherwise the token is drawn from max(p - q, 0), normalised. Kept or
// replaced, the token is distributed as p. One uniform draw, and on rejection one multinomial
// draw, from the default generator. Returns [1] int64.
at::Tensor speculative_choice(const at::Tensor& scores, const at::Tensor& q, int64_t candidate) {
  const at::Tensor p = at::softmax(scores.select(0, 0), -1);
  const at::Tensor draft = q.to(p.device(), at::kFloat);
  // In double, as transformers divides: p(c) / 0 keeps the candidate, 0 / 0 does not.
  const double ratio = p[candidate].item<double>() / draft[candidate].item<double>();
  if (at::rand({1}, p.options()).item<double>() <= ratio) {
    return at::full({1}, candidate, p.options().dtype(at::kLong));
  }
  at::Tensor residual = at::clamp_min(p - draft, 0);
  // A rejection needs q(c) > p(c), so some other token has p > q and the residual is positive.
  if (!(residual.sum().item<double>() > 0)) residual = p;
  return at::multinomial(residual, 1);
}

}  // namespace

LoopOptions::WholeStep parse_whole_step(const std::string& text, const std::string& where) {
  if (text == "off" || text == "false") return LoopOptions::WholeStep::kOff;
  if (text == "auto") return LoopOptions::WholeStep::kAuto;
  if (text == "on" || text == "true") return LoopOptions::WholeStep::kOn;
  throw Error(where + ": expected off, auto or on, found '" + text + "'");
}

std::string whole_step_name(LoopOptions::WholeStep w) {
  switch (w) {
    case LoopOptions::WholeStep::kOff:
      return "off";
    case LoopOptions::WholeStep::kAuto:
      return "auto";
    case LoopOptions::WholeStep::kOn:
      return "on";
  }
  return "?";
}

std::string whole_step_blocker(const Pipeline& pipe, ForwardBackend& backend, bool streaming,
                               const LoopOptions& options) {
  if (pipe.candidates) {
    return "speculative decoding runs in the host loop (each step keeps a varying number of "
           "tokens)";
  }
  if (streaming) {
    return "streaming hands every token to the host as it is chosen (a device-to-host wait per "
           "step)";
  }
  if (std::string why = pipe.strategy->whole_step_blocker(); !why.empty()) return why;
  if (std::string why = pipe.processors.whole_step_blocker(); !why.empty()) return why;
  if (std::string why = pipe.stopping.whole_step_blocker(); !why.empty()) return why;
  if (backend.static_decode() == nullptr) {
    return "backend '" + backend.name() +
           "' has no static decode step (ForwardBackend::static_decode; cuda_graph has one)";
  }
  if (options.capture && !backend.model().device().is_cuda()) {
    return "capturing the whole step needs the model on a CUDA device, found " +
           backend.model().device().str() + " (loop option capture: false runs it uncaptured)";
  }
  return "";
}

void Generator::set_up(ForwardBackend& backend, Pipeline pipe, int64_t rows, int64_t max_length,
                       int64_t prompt_length, bool whole_step) {
  forget();  // the previous graph and buffers first
  backend_ = &backend;
  static_decode_ = whole_step ? backend.static_decode() : nullptr;
  rows_ = rows;
  max_length_ = max_length;
  prompt_length_ = prompt_length;
  per_input_ = pipe.strategy->rows_per_input();
  pipe_ = std::move(pipe);
  const auto l = at::TensorOptions().dtype(at::kLong).device(backend.model().device());
  seqs_.prompt_length = prompt_length;
  if (whole_step && static_decode_ == nullptr) {
    throw Error("internal: the whole step on a backend without a static decode step");
  }
  if (static_decode_ != nullptr) {  // the buffers a graph may be captured over
    seqs_.buffer = at::empty({rows, max_length}, l);
    seqs_.prompt_valid = at::empty({rows, prompt_length}, l.dtype(at::kBool));
    written_ = at::zeros({}, l);
    running_ = at::zeros({}, l.dtype(at::kBool));
    live_steps_ = at::zeros({}, l);
    logit_sums_ = at::zeros({max_length}, l.dtype(at::kDouble));
  }
}

void Generator::forget() {
  replay_ = nullptr;
  captured_over_.clear();
  backend_ = nullptr;
  static_decode_ = nullptr;
  pipe_ = Pipeline{};
  seqs_ = TokenHistory{};
  written_ = running_ = live_steps_ = logit_sums_ = at::Tensor();
  reorder_ = false;
}

namespace {

// The storage of a static decode step's buffers (a graph captured over them reads these).
std::vector<const void*> storage_of(const StaticDecode& sd) {
  return {sd.ids.data_ptr(), sd.positions.data_ptr(), sd.slot.data_ptr(), sd.parents.data_ptr(),
          sd.logits.data_ptr()};
}

}  // namespace

bool Generator::serves(ForwardBackend& b, int64_t rows, int64_t max_length,
                       int64_t prompt_length) const {
  if (static_decode_ == nullptr || &b != backend_ || rows != rows_ || max_length != max_length_ ||
      prompt_length != prompt_length_) {
    return false;
  }
  StaticDecode* sd = b.static_decode();
  return sd == static_decode_ && (!replay_ || storage_of(*sd) == captured_over_);
}

void Generator::run_loop(const std::vector<std::vector<int64_t>>& prompts, int64_t pad,
                         const TokenStream& stream, Generation& out) {
  const bool whole = static_decode_ != nullptr;
  const int64_t batch = static_cast<int64_t>(prompts.size()), len = prompt_length_;
  const int64_t max_steps = max_length_ - len;
  // The sequences laid out on the CPU and moved once: each prompt left-padded, then padding up to
  // the capacity. The prefill reads the prompt columns, one row per input.
  at::Tensor laid = at::full({batch, max_length_}, pad, at::kLong);
  at::Tensor valid = at::zeros({batch, len}, at::kBool);
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t n = static_cast<int64_t>(prompts[i].size());
    laid[i].narrow(0, len - n, n).copy_(at::tensor(prompts[i], at::kLong));
    valid[i].narrow(0, len - n, n).fill_(true);
  }
  const auto device = backend_->model().device();
  laid = laid.to(device);
  const at::Tensor input_ids = laid.narrow(1, 0, len), input_valid = valid.to(device);
  // Position ids as transformers 5 computes them from the attention mask (padding gets 0).
  const at::Tensor input_positions =
      input_valid.to(at::kLong).cumsum(1).sub_(1).masked_fill_(input_valid.logical_not(), 0);

  // The whole step writes into the buffers a graph may have been captured over; the host loop
  // takes the laid-out tensor as it is.
  if (whole) {
    seqs_.buffer.copy_(laid.repeat_interleave(per_input_, 0));
    seqs_.prompt_valid.copy_(input_valid.repeat_interleave(per_input_, 0));
    written_.fill_(len);
    seqs_.length = Length(written_);
  } else {
    seqs_.buffer = per_input_ == 1 ? laid : laid.repeat_interleave(per_input_, 0);
    seqs_.prompt_valid =
        per_input_ == 1 ? input_valid : input_valid.repeat_interleave(per_input_, 0);
    seqs_.length = Length(len);
  }
  SearchStrategy& strategy = *pipe_.strategy;
  strategy.begin(seqs_);

  const auto t0 = Clock::now();
  const at::Tensor first = as_float(
      backend_->prefill(StepInputs{input_ids, input_positions, input_valid, {}, per_input_}));
  check_finite_now(*backend_, first, 0);
  at::Tensor last_pos = input_positions.narrow(1, len - 1, 1);  // [batch, 1]
  if (per_input_ > 1) last_pos = last_pos.repeat_interleave(per_input_, 0);

  // The forward's inputs: the backend's static buffers in the whole step (static_decode_'s
  // members), tensors handed to decode() in the host loop.
  at::Tensor next_ids, parents;
  const at::Tensor one_valid = at::ones({rows_, 1}, input_valid.options());
  if (whole) {
    static_decode_->start();
    static_decode_->positions.copy_(last_pos);
    running_.fill_(true);
    live_steps_.zero_();
  }
  // NaN or inf logits are refused at every decode step (refuse_nonfinite), one reduction a step.
  // On the CPU the host loop checks each step's logits before deciding over them (all_finite: a
  // read costs no wait there). On CUDA the host loop reads the step's finite_sum where it reads
  // the flag anyway; the whole step, on any device, keeps each step's finite_sum on the device
  // (logit_sums_, by cache slot, so that a captured graph records it) and reads those of the
  // steps since its last read at its own flag reads, the steps that decided while running only.
  const bool check_at_once = !whole && !device.is_cuda();
  at::Tensor pending;        // the host loop on CUDA: the last step's finite_sum, unread
  int64_t pending_step = 0;  // its decode step
  int64_t checked = 0;       // the whole step: decode steps 1 .. checked were read
  const auto check_pending = [&] {
    if (!pending.defined()) return;
    const double sum = pending.item<double>();
    pending = at::Tensor();
    if (!std::isfinite(sum)) refuse_nonfinite(*backend_, pending_step, sum_says(sum));
  };
  const auto check_steps = [&](int64_t through) {  // the whole step: decode steps up to `through`
    if (through <= checked) return;
    const at::Tensor sums = logit_sums_.narrow(0, len + checked, through - checked);
    if (!std::isfinite(sums.sum().item<double>())) {
      const at::Tensor host = sums.to(at::kCPU);
      for (int64_t i = 0; i < host.size(0); ++i) {
        const double sum = host[i].item<double>();
        if (!std::isfinite(sum)) refuse_nonfinite(*backend_, checked + 1 + i, sum_says(sum));
      }
    }
    checked = through;
  };
  int64_t run = 1;  // the decode step

  StepDecision last;
  const auto decide = [&](const at::Tensor& logits) {
    if (whole) live_steps_.add_(running_);
    last = strategy.step(logits, pipe_.processors, seqs_, pipe_.stopping);
    reorder_ = last.parent_rows.defined();
    if (whole) {
      static_decode_->ids.copy_(last.next_tokens.unsqueeze(1));
      if (reorder_) {
        static_decode_->parents.copy_(last.parent_rows);
        static_decode_->positions.copy_(
            static_decode_->positions.index_select(0, last.parent_rows) + 1);
      } else {
        static_decode_->positions.add_(1);
      }
      running_.copy_(last.running);
    } else {
      next_ids = last.next_tokens.unsqueeze(1);
      parents = last.parent_rows;
      last_pos = (reorder_ ? last_pos.index_select(0, parents) : last_pos) + 1;
      running_ = last.running;
    }
  };
  const auto step = [&] {
    if (whole) {
      static_decode_->run(reorder_);
      logit_sums_.index_copy_(0, static_decode_->slot,
                              finite_sum(static_decode_->logits).view({1}));
      static_decode_->slot.add_(1);
      decide(as_float(static_decode_->logits));
    } else {
      const at::Tensor logits =
          as_float(backend_->decode(StepInputs{next_ids, last_pos, one_valid, parents}));
      if (check_at_once) {
        check_finite_now(*backend_, logits, run);
      } else {
        pending = finite_sum(logits);
        pending_step = run;
      }
      decide(logits);
    }
  };
  // The host loop reads the flag before every step; the whole step before the first decode step
  // and every sync_every-th one.
  const int64_t sync_every = whole ? loop_.sync_every : 1;
  const bool capture = whole && loop_.capture;

  decide(first);
  // A stream that asks to stop ends the loop after the step it was handed.
  bool go_on = !stream || emit(stream, last, per_input_, 0);
  if (sync_) sync_();
  out.time_to_first_token_s = since(t0);
  out.whole_step = whole;
  for (; go_on && run < max_steps; ++run) {
    loop_position().step.store(run, std::memory_order_relaxed);  // for a progress display
    if (run == 1 || run % sync_every == 0) {
      ++out.flag_reads;
      const bool running = running_.item<bool>();
      check_pending();
      if (whole && running) check_steps(run - 1);
      if (!running) break;
    }
    // In the first generation of a shape the first decode step runs uncaptured (it creates what
    // the parts make on first use), the graph records the second and replays from then on; later
    // generations of the shape replay it from the first decode step.
    if (capture && (run >= 2 || replay_)) {
      if (!replay_) {
        const auto c0 = Clock::now();
        replay_ = capture_step(device, step);
        captured_over_ = storage_of(*static_decode_);
        out.capture_s = since(c0);
      }
      out.captured = true;
      replay_();
    } else {
      step();
      if (stream) {
        check_pending();
        go_on = emit(stream, last, per_input_, run);
      }
    }
  }
  check_pending();
  if (sync_) sync_();
  out.seconds = since(t0);
  out.steps_run = run;
  // Decisions made while the strategy ran: every one in the host loop, which stops at once.
  out.steps = whole ? live_steps_.item<int64_t>() : run;
  if (whole) check_steps(out.steps - 1);  // the prefill made the first decision
}

// Speculative decoding (candidates/candidate_generator.h), one prompt and one sequence, in the
// host loop: prefill and decide as above; then each step proposes candidates, runs the last chosen
// token and the candidates through ForwardBackend::verify (one forward over k + 1 positions) and
// lets the strategy decide position by position, each decision seeing the history up to its
// position as a plain step would (transformers applies the processors the same way). Position i's
// decision stands; the next position's logits are valid only while the decision equals the
// candidate that was fed there, so the first difference (or the strategy stopping) ends the step
// and the cache is rewound past the candidates that were not kept. Greedy search thus chooses
// exactly the tokens it chooses without candidates, and sampling from candidates without a
// distribution (prompt lookup, a draft with sampling: plain_draws) the draws it makes without
// them. When the draft samples its candidates and says from which distribution
// (CandidateGenerator::propose_sampled), each candidate is kept or replaced by speculative
// sampling's rule (speculative_choice), which leaves every token distributed as plain sampling's
// and keeps more candidates than equal draws would.
void Generator::run_speculative(const std::vector<int64_t>& prompt, int64_t pad,
                                const TokenStream& stream, Generation& out) {
  CandidateGenerator& candidates = *pipe_.candidates;
  SearchStrategy& strategy = *pipe_.strategy;
  const int64_t len = prompt_length_;
  const auto device = backend_->model().device();
  const auto l = at::TensorOptions().dtype(at::kLong).device(device);
  seqs_.buffer = at::full({1, max_length_}, pad, l);
  seqs_.buffer.narrow(1, 0, len).copy_(at::tensor(prompt, at::kLong));
  seqs_.prompt_valid = at::ones({1, len}, l.dtype(at::kBool));
  seqs_.length = Length(len);
  strategy.begin(seqs_);
  candidates.begin();
  std::vector<int64_t> history = prompt;  // the row's tokens on the host, for the candidates

  const auto t0 = Clock::now();
  const at::Tensor first = as_float(backend_->prefill(StepInputs{
      seqs_.buffer.narrow(1, 0, len), at::arange(len, l).unsqueeze(0), seqs_.prompt_valid, {}, 1}));
  check_finite_now(*backend_, first, 0);
  bool go_on = true, running = true;
  int64_t steps = 0;
  // One decision at the current length, by the strategy's own rule or by `choose` (speculative
  // sampling); its token joins the history.
  const auto decide = [&](const at::Tensor& logits,
                          const std::function<at::Tensor(const at::Tensor&)>& choose = {}) {
    // The prefill's logits were checked; each verified position's are before they are decided
    // over (this loop reads every decision on the host already).
    if (steps > 0) check_finite_now(*backend_, logits, steps);
    const StepDecision d =
        choose ? strategy.step_choosing(logits, pipe_.processors, seqs_, pipe_.stopping, choose)
               : strategy.step(logits, pipe_.processors, seqs_, pipe_.stopping);
    const int64_t token = d.next_tokens.item<int64_t>();
    history.push_back(token);
    if (stream) go_on = emit(stream, d, 1, steps) && go_on;
    ++steps;
    running = d.running.item<bool>();
    return token;
  };
  decide(first);
  if (sync_) sync_();
  out.time_to_first_token_s = since(t0);

  // How many leading candidates the processors allow: a candidate they ban (-inf, or the lowest
  // float, on logits of ones after the history and the candidates before it) ends the list.
  const int64_t vocab = first.size(-1);
  const auto allowed = [&](const std::vector<int64_t>& c) -> size_t {
    if (pipe_.processors.empty()) return c.size();
    const int64_t n = seqs_.length.known();
    at::Tensor scratch = seqs_.buffer.clone();
    const at::Tensor ones = at::ones({1, vocab}, l.dtype(at::kFloat));
    for (size_t i = 0; i < c.size(); ++i) {
      const int64_t at_len = n + static_cast<int64_t>(i);
      const float v =
          pipe_.processors
              .process(TokenHistory{scratch, seqs_.prompt_valid, len, Length(at_len)}, ones.clone())
              .select(0, 0)[c[i]]
              .item<float>();
      if (v == -std::numeric_limits<float>::infinity() || v == std::numeric_limits<float>::lowest())
        return i;
      if (at_len < max_length_) scratch.select(0, 0)[at_len].fill_(c[i]);
    }
    return c.size();
  };

  // The processed scores of a [1, vocab] row of logits that follows the history and `drafted`
  // (a draft's distribution for speculative sampling).
  const auto process = [&](const std::vector<int64_t>& drafted, const at::Tensor& logits) {
    const int64_t n = seqs_.length.known();
    at::Tensor scratch = seqs_.buffer.clone();
    const auto d = static_cast<int64_t>(drafted.size());
    const int64_t fits = std::min(d, max_length_ - n);
    if (fits > 0) {
      scratch.select(0, 0)
          .narrow(0, n, fits)
          .copy_(
              at::tensor(std::vector<int64_t>(drafted.begin(), drafted.begin() + fits), at::kLong));
    }
    return pipe_.processors.process(
        TokenHistory{scratch, seqs_.prompt_valid, len, Length(std::min(n + d, max_length_))},
        logits.to(at::kFloat));
  };
  // Speculative sampling when the strategy samples and the candidates come with the draft's
  // distribution (docs/decoding.md#speculative-sampling).
  const bool sampling = strategy.samples();

  while (go_on && running && seqs_.length.known() < max_length_) {
    const int64_t n = seqs_.length.known();  // the last chosen token, not yet in the cache, is n-1
    loop_position().step.store(n - prompt_length_, std::memory_order_relaxed);  // for a display
    const auto p0 = Clock::now();
    at::Tensor q;  // [m, vocab]: the draft's distribution of each candidate, when it has one
    const int64_t most = std::min(max_length_ - n - 1, backend_->max_verify_candidates());
    const std::vector<int64_t> c =
        sampling ? candidates.propose_sampled(history, most, allowed, process, q)
                 : candidates.propose(history, most, allowed);
    out.propose_s += since(p0);
    const auto m = static_cast<int64_t>(c.size());
    std::vector<int64_t> fed{history.back()};
    fed.insert(fed.end(), c.begin(), c.end());
    const auto v0 = Clock::now();
    const at::Tensor logits =
        as_float(backend_->verify(StepInputs{at::tensor(fed, at::kLong).to(device).unsqueeze(0),
                                             at::arange(n - 1, n + m, l).unsqueeze(0),
                                             at::ones({1, m + 1}, l.dtype(at::kBool)),
                                             {}}));  // [1, m + 1, vocab]
    if (sync_) sync_();
    out.verify_s += since(v0);
    if (q.defined() && (q.dim() != 2 || q.size(0) != m || q.size(1) != vocab)) {
      throw Error("candidate generator '" + candidates.name() + "': the draft's probabilities " +
                  "are " + c10::str(q.sizes()) + ", expected [" + std::to_string(m) + ", " +
                  std::to_string(vocab) + "] (a distribution per candidate)");
    }
    int64_t i = 0, matched = 0;
    for (;; ++i) {
      bool same = false;
      if (q.defined() && i < m) {
        same = decide(logits.select(1, i), [&](const at::Tensor& scores) {
                 return speculative_choice(scores, q.select(0, i), c[static_cast<size_t>(i)]);
               }) == c[static_cast<size_t>(i)];
      } else {
        const int64_t token = decide(logits.select(1, i));
        same = i < m && token == c[static_cast<size_t>(i)];
      }
      matched += same;
      if (!same || !running || !go_on) break;
    }
    // Kept in the cache: the token fed first and the candidates decided before position i.
    backend_->rewind(m - i);
    candidates.update(m, matched);
    ++out.verify_steps;
    out.candidates_proposed += m;
    out.candidates_accepted += matched;
  }
  if (sync_) sync_();
  out.seconds = since(t0);
  out.steps = out.steps_run = steps;
}

}  // namespace gengraph

#include "framework/decoding/search/beam_search.h"

#include <ATen/ATen.h>

#include <cmath>

namespace gengraph {
namespace {

constexpr double kBlocked = -1.0e9;  // transformers' score for impossible beams

// x[b, idx[b, j], ...] for 2-D or 3-D x.   idx: [B, J]
at::Tensor gather_beams(const at::Tensor& x, const at::Tensor& idx) {
  at::Tensor i = idx;
  while (i.dim() < x.dim()) i = i.unsqueeze(-1);
  return at::take_along_dim(x, i, 1);
}

// transformers' early-stop heuristic: with early_stopping never and a positive length penalty, the
// best a running beam can still reach is scored at max_length, a constant.
bool best_at_max_length(const BeamSearchOptions& o) {
  return o.early_stopping == EarlyStopping::kNever && o.length_penalty > 0;
}

}  // namespace

BeamSearch::BeamSearch(BeamSearchOptions options) : options_(options) {}

void BeamSearch::begin(const Sequences& seqs) {
  const int64_t nb = options_.num_beams;
  batch_ = seqs.rows() / nb;
  prompt_len_ = seqs.prompt_length;
  candidates_ = std::max<int64_t>(2, 1 + options_.n_eos) * nb;
  // In place where the shapes repeat (refill): a whole-step graph of an earlier generation reads
  // these very buffers.
  const auto f = seqs.tokens.options().dtype(at::kFloat), b = f.dtype(at::kBool);
  refill(running_scores_, {batch_, nb}, f, 0.0);
  running_scores_.narrow(1, 1, nb - 1).fill_(kBlocked);
  refill(fin_tokens_, {batch_, nb, options_.max_length}, seqs.tokens.options(),
         options_.fill_token);
  refill(fin_scores_, {batch_, nb}, f, kBlocked);
  refill(fin_lengths_, {batch_, nb}, seqs.tokens.options(), 0);
  refill(is_finished_, {batch_, nb}, b, false);
  refill(improvable_, {batch_, 1}, b, true);
  refill(top_mask_, {candidates_}, b, false);
  top_mask_.narrow(0, 0, nb).fill_(true);
  refill(done_, {}, b, false);
  // Constant for a batch size (num_beams is fixed): kept, so a graph may read it.
  if (!row_base_.defined() || row_base_.size(0) != batch_ ||
      row_base_.device() != seqs.tokens.device()) {
    row_base_ = (at::arange(batch_, seqs.tokens.options()) * nb).unsqueeze(1);
  }
}

// step() over the static form. The same operations in the same order, with the sequence length
// read from the device (seqs.written) instead of the host, the candidates' tokens kept at full
// capacity instead of cut to the length, and every piece of state updated in place and frozen
// once done_ is set.
DeviceDecision BeamSearch::device_step(const at::Tensor& logits, const LogitsProcessor& processors,
                                       Sequences& seqs, const StoppingCriteria& stop) {
  const int64_t nb = options_.num_beams, b = batch_, k = candidates_, vocab = logits.size(-1);
  const int64_t cap = seqs.tokens.size(1);
  const bool early_true = options_.early_stopping == EarlyStopping::kTrue;
  const at::Tensor& cur = seqs.written;  // [] int64, the length before this step (until the end)
  // (cur + 1 - prompt) ** length_penalty in double, then float32 as a scalar operand would be.
  const auto penalty = [&](const at::Tensor& len) {
    return at::pow(len.to(at::kDouble), options_.length_penalty).to(at::kFloat);
  };

  const at::Tensor log_probs = processors.process(seqs, at::log_softmax(logits, -1));
  const at::Tensor acc =
      (log_probs.view({b, nb, vocab}) + running_scores_.unsqueeze(-1)).view({b, nb * vocab});
  at::Tensor top_scores, top_idx;  // [B, K]
  if (options_.do_sample) {
    // at::multinomial without replacement, without its host-side checks (SampleSearch's note).
    const at::Tensor probs = at::softmax(acc, -1);
    top_idx = std::get<1>(at::topk(probs.div(at::empty_like(probs).exponential_(1)), k));
    top_scores = acc.gather(1, top_idx);
  } else {
    std::tie(top_scores, top_idx) = at::topk(acc, k);
  }
  const at::Tensor beam = top_idx.div(vocab, "floor");
  const at::Tensor token = top_idx.remainder(vocab);
  at::Tensor cand = gather_beams(seqs.tokens.view({b, nb, cap}), beam);  // [B, K, cap]
  cand.index_copy_(2, cur.view({1}), token.unsqueeze(-1));
  const at::Tensor new_len = cur + 1;
  const at::Tensor hits = stop.should_stop(Sequences{cand.view({b * k, cap}), seqs.prompt_valid,
                                                     seqs.prompt_length, new_len})
                              .view({b, k});

  const at::Tensor running_candidates = at::add(top_scores, hits, kBlocked);
  const at::Tensor next = std::get<1>(at::topk(running_candidates, nb));
  const at::Tensor next_running = gather_beams(cand, next);  // [B, nb, cap]
  const at::Tensor new_running_scores = gather_beams(running_candidates, next);
  const at::Tensor parent = gather_beams(beam, next);

  const at::Tensor generated = new_len - prompt_len_;  // [] int64
  const at::Tensor just_finished = hits.logical_and(top_mask_.unsqueeze(0));
  const at::Tensor generated_penalty = penalty(generated);
  at::Tensor fin = top_scores / generated_penalty;
  if (early_true) fin = at::add(fin, is_finished_.all(-1, /*keepdim=*/true), kBlocked);
  fin = at::add(fin, improvable_.logical_not(), kBlocked);
  fin = at::add(fin, just_finished.logical_not(), kBlocked);
  const at::Tensor merged_scores = at::cat({fin_scores_, fin}, 1);
  const at::Tensor keep = std::get<1>(at::topk(merged_scores, nb));
  const at::Tensor cand_padded =
      at::where(at::arange(cap, cand.options()).lt(new_len), cand, options_.fill_token);
  const at::Tensor new_fin_tokens = gather_beams(at::cat({fin_tokens_, cand_padded}, 1), keep);
  const at::Tensor new_fin_scores = gather_beams(merged_scores, keep);
  const at::Tensor new_fin_lengths =
      gather_beams(at::cat({fin_lengths_, generated.expand({b, k})}, 1), keep);
  const at::Tensor new_is_finished = gather_beams(at::cat({is_finished_, just_finished}, 1), keep);

  // At max_length the penalty is a host constant, divided as the host loop divides by it.
  const at::Tensor best_running = new_running_scores.narrow(1, 0, 1);
  const at::Tensor best_possible =
      best_at_max_length(options_)
          ? best_running / std::pow(static_cast<double>(options_.max_length - prompt_len_),
                                    options_.length_penalty)
          : best_running / generated_penalty;
  const at::Tensor worst_finished =
      at::where(new_is_finished, std::get<0>(new_fin_scores.min(1, /*keepdim=*/true)), kBlocked);
  const at::Tensor new_improvable =
      improvable_.logical_and(best_possible.gt(worst_finished).any(-1, /*keepdim=*/true));

  // The stop conditions of step(), on the device.
  at::Tensor stop_now = new_improvable.any().logical_not().logical_or(hits.all());
  if (early_true) stop_now = stop_now.logical_or(new_is_finished.all());

  // In place, and only while the search runs: a graph replays these very buffers.
  const at::Tensor live = done_.logical_not();
  // One kernel each: where() writing into the state it reads (an elementwise full overlap).
  const auto update = [&](at::Tensor& state, const at::Tensor& fresh) {
    at::where_out(state, live, fresh, state);
  };
  update(running_scores_, new_running_scores);
  update(fin_tokens_, new_fin_tokens);
  update(fin_scores_, new_fin_scores);
  update(fin_lengths_, new_fin_lengths);
  update(is_finished_, new_is_finished);
  update(improvable_, new_improvable);
  update(seqs.tokens, next_running.reshape({b * nb, cap}));
  DeviceDecision d;
  d.next_tokens = next_running.index_select(2, cur.view({1})).reshape({b * nb});
  d.parent_rows = (parent + row_base_).reshape({b * nb});
  d.done = done_;        // the loop copies it before the next step changes it
  seqs.written.add_(1);  // cur moves on: every read of it is above
  done_.logical_or_(stop_now);
  return d;
}

StepDecision BeamSearch::step(const at::Tensor& logits, const LogitsProcessor& processors,
                              Sequences& seqs, const StoppingCriteria& stop) {
  const int64_t nb = options_.num_beams, b = batch_, k = candidates_, vocab = logits.size(-1);
  const int64_t cur_len = seqs.length();
  const bool early_true = options_.early_stopping == EarlyStopping::kTrue;

  // Processors see log-probabilities of the running beams, as in transformers.
  const at::Tensor log_probs = processors.process(seqs, at::log_softmax(logits, -1));  // [B*nb, V]
  const at::Tensor acc =
      (log_probs.view({b, nb, vocab}) + running_scores_.unsqueeze(-1)).view({b, nb * vocab});
  at::Tensor top_scores, top_idx;  // [B, K]
  if (options_.do_sample) {
    top_idx = at::multinomial(at::softmax(acc, -1), k);
    top_scores = acc.gather(1, top_idx);
  } else {
    std::tie(top_scores, top_idx) = at::topk(acc, k);
  }
  const at::Tensor beam = top_idx.div(vocab, "floor");  // [B, K] source beam
  const at::Tensor token = top_idx.remainder(vocab);    // [B, K]
  const at::Tensor running = seqs.tokens.view({b, nb, cur_len});
  const at::Tensor cand =
      at::cat({gather_beams(running, beam), token.unsqueeze(-1)}, 2);  // [B, K, L+1]
  const at::Tensor hits =
      stop.should_stop(
              Sequences{cand.view({b * k, cur_len + 1}), seqs.prompt_valid, seqs.prompt_length, {}})
          .view({b, k});  // [B, K]

  // The best num_beams candidates that did not stop keep running.
  const at::Tensor running_candidates = at::add(top_scores, hits, kBlocked);
  const at::Tensor next = std::get<1>(at::topk(running_candidates, nb));  // [B, nb]
  const at::Tensor next_running = gather_beams(cand, next);               // [B, nb, L+1]
  running_scores_ = gather_beams(running_candidates, next);
  const at::Tensor parent = gather_beams(beam, next);  // [B, nb]

  // Candidates among the top num_beams that stopped join the finished pool.
  const at::Tensor just_finished = hits.logical_and(top_mask_.unsqueeze(0));
  at::Tensor fin = top_scores / std::pow(static_cast<double>(cur_len + 1 - prompt_len_),
                                         options_.length_penalty);
  if (early_true) fin = at::add(fin, is_finished_.all(-1, /*keepdim=*/true), kBlocked);
  fin = at::add(fin, improvable_.logical_not(), kBlocked);
  fin = at::add(fin, just_finished.logical_not(), kBlocked);
  const at::Tensor merged_scores = at::cat({fin_scores_, fin}, 1);  // [B, nb+K]
  const at::Tensor keep = std::get<1>(at::topk(merged_scores, nb));
  const at::Tensor cand_padded = at::cat({cand, at::full({b, k, options_.max_length - cur_len - 1},
                                                         options_.fill_token, cand.options())},
                                         2);
  fin_tokens_ = gather_beams(at::cat({fin_tokens_, cand_padded}, 1), keep);
  fin_scores_ = gather_beams(merged_scores, keep);
  fin_lengths_ = gather_beams(
      at::cat({fin_lengths_, at::full({b, k}, cur_len + 1 - prompt_len_, fin_lengths_.options())},
              1),
      keep);
  is_finished_ = gather_beams(at::cat({is_finished_, just_finished}, 1), keep);

  // Could a running beam still beat the worst finished one? (transformers' heuristic)
  const int64_t new_len = cur_len + 1;
  const double best_len = best_at_max_length(options_)
                              ? static_cast<double>(options_.max_length - prompt_len_)
                              : static_cast<double>(new_len - prompt_len_);
  const at::Tensor best_possible =
      running_scores_.narrow(1, 0, 1) / std::pow(best_len, options_.length_penalty);
  const at::Tensor worst_finished =
      at::where(is_finished_, std::get<0>(fin_scores_.min(1, /*keepdim=*/true)), kBlocked);
  improvable_ = improvable_.logical_and(best_possible.gt(worst_finished).any(-1, /*keepdim=*/true));

  seqs.tokens = next_running.reshape({b * nb, new_len});
  StepDecision d;
  d.next_tokens = next_running.select(2, cur_len).reshape({b * nb});
  d.parent_rows = (parent + at::arange(b, parent.options()).unsqueeze(1) * nb).reshape({b * nb});
  // The three stop conditions combined on the device and read in one scalar read: on CUDA each
  // read waits for the device.
  at::Tensor done = improvable_.any().logical_not().logical_or(hits.all());
  if (early_true) done = done.logical_or(is_finished_.all());
  d.done = done.item<bool>();
  return d;
}

std::vector<std::vector<Hypothesis>> BeamSearch::finalize(const Sequences&) {
  const at::Tensor tokens = fin_tokens_.to(at::kCPU).contiguous();
  const at::Tensor scores = fin_scores_.to(at::kCPU).to(at::kDouble);
  const at::Tensor lengths = fin_lengths_.to(at::kCPU);
  std::vector<std::vector<Hypothesis>> out(batch_);
  for (int64_t i = 0; i < batch_; ++i) {
    for (int64_t j = 0; j < options_.num_return_sequences; ++j) {
      const int64_t* row = tokens[i][j].data_ptr<int64_t>() + prompt_len_;
      const int64_t n = lengths[i][j].item<int64_t>();
      out[i].push_back(Hypothesis{std::vector<int64_t>(row, row + n), scores[i][j].item<double>()});
    }
  }
  return out;
}

}  // namespace gengraph

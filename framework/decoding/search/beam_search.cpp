#include "framework/decoding/search/beam_search.h"

#include <ATen/ATen.h>

#include <cmath>

#include "framework/decoding/sampling_generator.h"

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

void BeamSearch::begin(const TokenHistory& seqs) {
  const int64_t nb = options_.num_beams;
  batch_ = seqs.rows() / nb;
  prompt_len_ = seqs.prompt_length;
  candidates_ = std::max<int64_t>(2, 1 + options_.n_eos) * nb;
  // In place where the shapes repeat (refill): a whole-step graph of an earlier generation reads
  // these very buffers.
  const auto l = seqs.buffer.options(), f = l.dtype(at::kFloat), b = l.dtype(at::kBool);
  refill(running_scores_, {batch_, nb}, f, 0.0);
  running_scores_.narrow(1, 1, nb - 1).fill_(kBlocked);
  refill(fin_tokens_, {batch_, nb, options_.max_length}, l, options_.fill_token);
  refill(fin_scores_, {batch_, nb}, f, kBlocked);
  refill(fin_lengths_, {batch_, nb}, l, 0);
  refill(is_finished_, {batch_, nb}, b, false);
  refill(improvable_, {batch_, 1}, b, true);
  refill(top_mask_, {candidates_}, b, false);
  top_mask_.narrow(0, 0, nb).fill_(true);
  refill(running_, {}, b, true);
  if (options_.output_scores) {
    refill(running_token_scores_, {batch_, nb, seqs.capacity()}, f, 0.0);
    refill(fin_token_scores_, {batch_, nb, options_.max_length}, f, 0.0);
  }
  // Constant for a batch size (num_beams is fixed): kept, so a graph may read it.
  if (!row_base_.defined() || row_base_.size(0) != batch_ || row_base_.device() != l.device()) {
    row_base_ = (at::arange(batch_, l) * nb).unsqueeze(1);
  }
}

StepDecision BeamSearch::step(const at::Tensor& logits, const LogitsProcessor& processors,
                              TokenHistory& seqs, const StoppingCriteria& stop) {
  const int64_t nb = options_.num_beams, b = batch_, k = candidates_, vocab = logits.size(-1);
  const int64_t cap = seqs.capacity();
  const bool early_true = options_.early_stopping == EarlyStopping::kTrue;
  const Length cur = seqs.length;  // before this step
  const Length new_len = cur.plus(1);
  // The state is replaced only while the search runs (whole step: a step past the end changes
  // nothing; the host loop never runs one).
  const at::Tensor live = running_;

  // Processors see log-probabilities of the running beams, as in transformers.
  const at::Tensor log_probs = processors.process(seqs, at::log_softmax(logits, -1));  // [B*nb, V]
  const at::Tensor acc =
      (log_probs.view({b, nb, vocab}) + running_scores_.unsqueeze(-1)).view({b, nb * vocab});
  at::Tensor top_scores, top_idx;  // [B, K]
  if (options_.do_sample) {
    // at::multinomial without replacement, without its host-side checks (SampleSearch's note).
    const at::Tensor probs = at::softmax(acc, -1);
    top_idx = std::get<1>(
        at::topk(probs.div(at::empty_like(probs).exponential_(1, sampling_generator())), k));
    top_scores = acc.gather(1, top_idx);
  } else {
    std::tie(top_scores, top_idx) = at::topk(acc, k);
  }
  const at::Tensor beam = top_idx.div(vocab, "floor");  // [B, K] source beam
  const at::Tensor token = top_idx.remainder(vocab);    // [B, K]
  // The candidates' histories at full capacity: this step's token at column cur, the fill token
  // after it (what a finished hypothesis is padded with).
  const at::Tensor cand = gather_beams(seqs.buffer.view({b, nb, cap}), beam);  // [B, K, cap]
  write_column(cand, 2, cur, token);
  fill_from(cand, new_len, options_.fill_token);
  // output_scores: the candidates' token scores, this step's at column cur (transformers'
  // compute_transition_scores over its processed log-probabilities and beam indices).
  at::Tensor cand_scores;
  if (options_.output_scores) {
    cand_scores = gather_beams(running_token_scores_, beam);  // [B, K, cap]
    write_column(cand_scores, 2, cur, log_probs.view({b, nb * vocab}).gather(1, top_idx));
  }
  const at::Tensor hits = stop.should_stop(TokenHistory{cand.view({b * k, cap}), seqs.prompt_valid,
                                                        seqs.prompt_length, new_len})
                              .view({b, k});  // [B, K]

  // The best num_beams candidates that did not stop keep running.
  const at::Tensor running_candidates = at::add(top_scores, hits, kBlocked);
  const at::Tensor next = std::get<1>(at::topk(running_candidates, nb));  // [B, nb]
  const at::Tensor next_running = gather_beams(cand, next);               // [B, nb, cap]
  const at::Tensor new_running_scores = gather_beams(running_candidates, next);
  const at::Tensor parent = gather_beams(beam, next);  // [B, nb]

  // Candidates among the top num_beams that stopped join the finished pool, scored
  // sum_logprobs / generated ** length_penalty.
  const Length generated = new_len.plus(-prompt_len_);
  const Factor generated_penalty = generated.power(options_.length_penalty).as(at::kFloat);
  const at::Tensor just_finished = hits.logical_and(top_mask_.unsqueeze(0));
  at::Tensor fin = generated_penalty.divide(top_scores);
  if (early_true) fin = at::add(fin, is_finished_.all(-1, /*keepdim=*/true), kBlocked);
  fin = at::add(fin, improvable_.logical_not(), kBlocked);
  fin = at::add(fin, just_finished.logical_not(), kBlocked);
  const at::Tensor merged_scores = at::cat({fin_scores_, fin}, 1);  // [B, nb+K]
  const at::Tensor keep_idx = std::get<1>(at::topk(merged_scores, nb));
  const at::Tensor new_fin_tokens = gather_beams(at::cat({fin_tokens_, cand}, 1), keep_idx);
  const at::Tensor new_fin_scores = gather_beams(merged_scores, keep_idx);
  const at::Tensor new_fin_lengths = gather_beams(
      at::cat({fin_lengths_, generated.filled({b, k}, fin_lengths_.options())}, 1), keep_idx);
  const at::Tensor new_is_finished =
      gather_beams(at::cat({is_finished_, just_finished}, 1), keep_idx);

  // Could a running beam still beat the worst finished one? (transformers' heuristic; at
  // max_length the penalty is a host constant)
  const at::Tensor best_running = new_running_scores.narrow(1, 0, 1);
  const at::Tensor best_possible =
      best_at_max_length(options_)
          ? best_running / std::pow(static_cast<double>(options_.max_length - prompt_len_),
                                    options_.length_penalty)
          : generated_penalty.divide(best_running);
  const at::Tensor worst_finished =
      at::where(new_is_finished, std::get<0>(new_fin_scores.min(1, /*keepdim=*/true)), kBlocked);
  const at::Tensor new_improvable =
      improvable_.logical_and(best_possible.gt(worst_finished).any(-1, /*keepdim=*/true));

  // The three stop conditions, combined on the device and read in one scalar read.
  at::Tensor stopping = hits.all();
  if (early_true) stopping = stopping.logical_or(new_is_finished.all());
  const at::Tensor goes_on = new_improvable.any().logical_and(stopping.logical_not());

  keep(running_scores_, new_running_scores, seqs, live);
  keep(fin_tokens_, new_fin_tokens, seqs, live);
  keep(fin_scores_, new_fin_scores, seqs, live);
  keep(fin_lengths_, new_fin_lengths, seqs, live);
  keep(is_finished_, new_is_finished, seqs, live);
  keep(improvable_, new_improvable, seqs, live);
  keep(seqs.buffer, next_running.reshape({b * nb, cap}), seqs, live);
  if (options_.output_scores) {
    keep(running_token_scores_, gather_beams(cand_scores, next), seqs, live);
    keep(fin_token_scores_, gather_beams(at::cat({fin_token_scores_, cand_scores}, 1), keep_idx),
         seqs, live);
  }
  StepDecision d;
  d.next_tokens = read_column(next_running, 2, cur).reshape({b * nb});
  d.parent_rows = (parent + row_base_).reshape({b * nb});
  keep(running_, live.logical_and(goes_on), seqs);
  d.running = running_;
  seqs.length.advance();  // every read of cur is above
  return d;
}

std::vector<std::vector<Sequence>> BeamSearch::finalize(const TokenHistory&) {
  const at::Tensor tokens = fin_tokens_.to(at::kCPU).contiguous();
  const at::Tensor scores = fin_scores_.to(at::kCPU).to(at::kDouble);
  const at::Tensor lengths = fin_lengths_.to(at::kCPU);
  const at::Tensor token_scores =
      options_.output_scores ? fin_token_scores_.to(at::kCPU).contiguous() : at::Tensor();
  std::vector<std::vector<Sequence>> out(batch_);
  for (int64_t i = 0; i < batch_; ++i) {
    for (int64_t j = 0; j < options_.num_return_sequences; ++j) {
      const int64_t* row = tokens[i][j].data_ptr<int64_t>() + prompt_len_;
      const int64_t n = lengths[i][j].item<int64_t>();
      Sequence h{std::vector<int64_t>(row, row + n), scores[i][j].item<double>(), {}, {}};
      if (options_.output_scores) {
        const float* s = token_scores[i][j].data_ptr<float>() + prompt_len_;
        h.token_scores.assign(s, s + n);
      }
      out[i].push_back(std::move(h));
    }
  }
  return out;
}

}  // namespace gengraph

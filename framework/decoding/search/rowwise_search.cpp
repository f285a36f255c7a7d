#include "framework/decoding/search/rowwise_search.h"

#include <ATen/ATen.h>

#include "framework/decoding/sampling_generator.h"
#include "framework/kernels/layer_ops.h"

namespace gengraph {

void RowwiseSearch::begin(const TokenHistory& seqs) {
  const auto opts = seqs.buffer.options();
  refill(unfinished_, {seqs.rows()}, opts.dtype(at::kBool), true);
  refill(lengths_, {seqs.rows()}, opts.dtype(at::kLong), 0);
  if (score_tokens_)
    refill(token_scores_, {seqs.rows(), seqs.capacity()}, opts.dtype(at::kFloat), 0);
}

StepDecision RowwiseSearch::step(const at::Tensor& logits, const LogitsProcessor& processors,
                                 TokenHistory& seqs, const StoppingCriteria& stop) {
  const at::Tensor scores = processors.process(seqs, logits);
  return advance(scores, choose(scores), seqs, stop);
}

StepDecision RowwiseSearch::step_choosing(
    const at::Tensor& logits, const LogitsProcessor& processors, TokenHistory& seqs,
    const StoppingCriteria& stop, const std::function<at::Tensor(const at::Tensor&)>& choose) {
  const at::Tensor scores = processors.process(seqs, logits);
  return advance(scores, choose(scores), seqs, stop);
}

StepDecision RowwiseSearch::advance(const at::Tensor& scores, at::Tensor next, TokenHistory& seqs,
                                    const StoppingCriteria& stop) {
  at::Tensor token_scores;
  if (score_tokens_) {
    // The chosen token's log-probability under the processed distribution (transformers'
    // compute_transition_scores with normalize_logits=True).
    token_scores = at::log_softmax(scores, -1).gather(1, next.unsqueeze(1)).squeeze(1);
    write_column(token_scores_, 1, seqs.length, token_scores);
  }
  if (pad_token_id_) {
    // Rows that already finished keep receiving padding (transformers does the same); once every
    // row has, later steps of the whole step append padding that no length counts.
    next = at::where(unfinished_, next, *pad_token_id_);
  }
  write_column(seqs.buffer, 1, seqs.length, next);
  seqs.length.advance();
  lengths_.add_(unfinished_);
  StepDecision d;
  d.next_tokens = next;
  d.token_scores = token_scores;
  d.emitted = unfinished_;  // (the host loop rebinds unfinished_ below; only it streams)
  const at::Tensor stopping = stop.should_stop(seqs);
  update(unfinished_, seqs, [&](at::Tensor& out) {  // unfinished and not stopping
    at::gt_out(out, unfinished_, stopping);
  });
  d.continues = unfinished_;
  d.running = unfinished_.any();
  return d;
}

std::vector<std::vector<Sequence>> RowwiseSearch::finalize(const TokenHistory& seqs) {
  const at::Tensor tokens = seqs.buffer.to(at::kCPU).contiguous();
  const at::Tensor lengths = lengths_.to(at::kCPU);
  const at::Tensor scores = score_tokens_ ? token_scores_.to(at::kCPU).contiguous() : at::Tensor();
  std::vector<std::vector<Sequence>> out(seqs.rows());
  for (int64_t r = 0; r < seqs.rows(); ++r) {
    const int64_t n = lengths[r].item<int64_t>();
    const int64_t* row = tokens[r].data_ptr<int64_t>() + seqs.prompt_length;
    Sequence h{std::vector<int64_t>(row, row + n), {}, {}, {}};
    if (score_tokens_) {
      const float* s = scores[r].data_ptr<float>() + seqs.prompt_length;
      h.token_scores.assign(s, s + n);
      double sum = 0;  // the sequence's log-probability
      for (double x : h.token_scores) sum += x;
      h.score = sum;
    }
    out[r].push_back(std::move(h));
  }
  return out;
}

at::Tensor GreedySearch::choose(const at::Tensor& scores) { return kernels::argmax_rows(scores); }

at::Tensor SampleSearch::choose(const at::Tensor& scores) {
  const at::Tensor probs = at::softmax(scores, -1);
  const at::Tensor noise = at::empty_like(probs).exponential_(1, sampling_generator());
  return kernels::argmax_rows(probs.div(noise));
}

}  // namespace gengraph

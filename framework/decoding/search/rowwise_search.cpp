#include "framework/decoding/search/rowwise_search.h"

#include <ATen/ATen.h>

#include <tuple>
#include <vector>

#include "framework/decoding/sampling_generator.h"
#include "framework/decoding/search/search_strategy.h"
#include "framework/kernels/layer_ops.h"

namespace gengraph {

void RowwiseSearch::begin(const TokenHistory& seqs) {
  const auto opts = seqs.buffer.options();
  refill(unfinished_, {seqs.rows()}, opts.dtype(at::kBool), true);
  refill(lengths_, {seqs.rows()}, opts.dtype(at::kLong), 0);
  if (score_tokens_)
    refill(token_scores_, {seqs.rows(), seqs.capacity()}, opts.dtype(at::kFloat), 0);
  if (top_k_ > 0) {
    refill(top_tokens_, {seqs.rows(), seqs.capacity(), top_k_}, opts.dtype(at::kLong), 0);
    refill(top_logprobs_, {seqs.rows(), seqs.capacity(), top_k_}, opts.dtype(at::kFloat), 0);
  }
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
  at::Tensor token_scores, top_tokens, top_logprobs;
  if (score_tokens_) {
    // The chosen token's log-probability under the processed distribution (transformers'
    // compute_transition_scores with normalize_logits=True).
    const at::Tensor logprobs = at::log_softmax(scores, -1);
    token_scores = logprobs.gather(1, next.unsqueeze(1)).squeeze(1);
    write_column(token_scores_, 1, seqs.length, token_scores);
    if (top_k_ > 0) {
      // The k most likely tokens of the same distribution, best first; tied values in the order
      // at::topk gives them (not specified by index). A row's padding steps get some too, which
      // nothing reads: finalize() keeps a row's columns up to its length, the loops stream only
      // emitted tokens.
      std::tie(top_logprobs, top_tokens) = logprobs.topk(top_k_, -1, true, true);
      write_column(top_tokens_, 1, seqs.length, top_tokens);
      write_column(top_logprobs_, 1, seqs.length, top_logprobs);
    }
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
  d.top_tokens = top_tokens;
  d.top_logprobs = top_logprobs;
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
  const at::Tensor top_tokens = top_k_ > 0 ? top_tokens_.to(at::kCPU).contiguous() : at::Tensor();
  const at::Tensor top_logprobs =
      top_k_ > 0 ? top_logprobs_.to(at::kCPU).contiguous() : at::Tensor();
  std::vector<std::vector<Sequence>> out(seqs.rows());
  for (int64_t r = 0; r < seqs.rows(); ++r) {
    const int64_t n = lengths[r].item<int64_t>();
    const int64_t* row = tokens[r].data_ptr<int64_t>() + seqs.prompt_length;
    Sequence h;
    h.tokens.assign(row, row + n);
    if (score_tokens_) {
      const float* s = scores[r].data_ptr<float>() + seqs.prompt_length;
      h.token_scores.assign(s, s + n);
      double sum = 0;  // the sequence's log-probability
      for (double x : h.token_scores) sum += x;
      h.score = sum;
    }
    if (top_k_ > 0) {
      const int64_t first = (r * seqs.capacity() + seqs.prompt_length) * top_k_;
      const int64_t* ids = top_tokens.data_ptr<int64_t>() + first;
      const float* lp = top_logprobs.data_ptr<float>() + first;
      h.top_logprobs.resize(n);
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < top_k_; ++j) {
          h.top_logprobs[i].push_back({ids[i * top_k_ + j], lp[i * top_k_ + j]});
        }
      }
    }
    out[r].push_back(std::move(h));
  }
  return out;
}

std::vector<std::vector<TopLogprob>> top_logprobs_on_host(const StepDecision& d) {
  if (!d.top_tokens.defined() || !d.top_logprobs.defined()) return {};
  const at::Tensor ids = d.top_tokens.to(at::kCPU, at::kLong).contiguous();
  const at::Tensor lp = d.top_logprobs.to(at::kCPU, at::kDouble).contiguous();
  const int64_t rows = ids.size(0), k = ids.size(1);
  std::vector<std::vector<TopLogprob>> out(rows);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < k; ++j) {
      out[r].push_back({ids.data_ptr<int64_t>()[r * k + j], lp.data_ptr<double>()[r * k + j]});
    }
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

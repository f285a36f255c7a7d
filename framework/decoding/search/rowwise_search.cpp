#include "framework/decoding/search/rowwise_search.h"

#include <ATen/ATen.h>

namespace gengraph {

void RowwiseSearch::begin(const Sequences& seqs) {
  const auto opts = seqs.tokens.options();
  refill(unfinished_, {seqs.rows()}, opts.dtype(at::kBool), true);
  refill(lengths_, {seqs.rows()}, opts.dtype(at::kLong), 0);
}

StepDecision RowwiseSearch::step(const at::Tensor& logits, const LogitsProcessor& processors,
                                 Sequences& seqs, const StoppingCriteria& stop) {
  const at::Tensor scores = processors.process(seqs, logits);
  at::Tensor next = choose(scores);  // [rows]
  if (pad_token_id_) {
    // Rows that already finished keep receiving padding (transformers does the same).
    next = at::where(unfinished_, next, *pad_token_id_);
  }
  seqs.tokens = at::cat({seqs.tokens, next.unsqueeze(1)}, 1);
  lengths_.add_(unfinished_);
  const at::Tensor emitted = unfinished_.clone();
  unfinished_.gt_(stop.should_stop(seqs));  // unfinished and not stopping: one kernel
  StepDecision d;
  d.next_tokens = next;
  d.emitted = emitted;
  d.done = !unfinished_.any().item<bool>();
  return d;
}

DeviceDecision RowwiseSearch::device_step(const at::Tensor& logits,
                                          const LogitsProcessor& processors, Sequences& seqs,
                                          const StoppingCriteria& stop) {
  const at::Tensor scores = processors.process(seqs, logits);
  at::Tensor next = choose_on_device(scores);  // [rows]
  if (pad_token_id_) next = at::where(unfinished_, next, *pad_token_id_);
  // Once every row has finished, later steps append padding that no length counts.
  seqs.tokens.index_copy_(1, seqs.written.view({1}), next.unsqueeze(1));
  seqs.written.add_(1);
  lengths_.add_(unfinished_);
  unfinished_.gt_(stop.should_stop(seqs));  // unfinished and not stopping: one kernel
  return DeviceDecision{next, {}, unfinished_.logical_not().all()};
}

std::vector<std::vector<Hypothesis>> RowwiseSearch::finalize(const Sequences& seqs) {
  const at::Tensor tokens = seqs.tokens.to(at::kCPU).contiguous();
  const at::Tensor lengths = lengths_.to(at::kCPU);
  std::vector<std::vector<Hypothesis>> out(seqs.rows());
  for (int64_t r = 0; r < seqs.rows(); ++r) {
    const int64_t* row = tokens[r].data_ptr<int64_t>() + seqs.prompt_length;
    out[r].push_back(Hypothesis{std::vector<int64_t>(row, row + lengths[r].item<int64_t>()), {}});
  }
  return out;
}

at::Tensor GreedySearch::choose(const at::Tensor& scores) { return scores.argmax(-1); }

at::Tensor SampleSearch::choose(const at::Tensor& scores) {
  return at::multinomial(at::softmax(scores, -1), 1).squeeze(1);
}

at::Tensor SampleSearch::choose_on_device(const at::Tensor& scores) {
  const at::Tensor probs = at::softmax(scores, -1);
  const at::Tensor noise = at::empty_like(probs).exponential_(1);
  return probs.div(noise).argmax(-1);
}

}  // namespace gengraph

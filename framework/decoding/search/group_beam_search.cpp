#include "framework/decoding/search/group_beam_search.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

namespace gengraph {

at::Tensor HammingDiversity::process(const Sequences&, at::Tensor scores) const {
  const DiverseBeamState& s = *state_;
  const int64_t start = s.group * s.group_size;
  if (start == 0) return scores;
  const int64_t batch = s.current_tokens.size(0) / s.num_beams, vocab = scores.size(-1);
  at::Tensor out = scores.clone();
  for (int64_t b = 0; b < batch; ++b) {
    const at::Tensor previous = s.current_tokens.narrow(0, b * s.num_beams, start);
    const at::Tensor frequency = at::bincount(previous, {}, vocab);  // [vocab] int64
    out.narrow(0, b * s.group_size, s.group_size).sub_(frequency * penalty_);
  }
  return out;
}

GroupBeamSearch::GroupBeamSearch(GroupBeamSearchOptions options,
                                 std::shared_ptr<DiverseBeamState> state)
    : options_(std::move(options)), state_(std::move(state)) {
  group_size_ = options_.num_beams / options_.num_beam_groups;
  state_->num_beams = options_.num_beams;
  state_->group_size = group_size_;
}

void GroupBeamSearch::begin(const Sequences& seqs) {
  batch_ = seqs.rows() / options_.num_beams;
  prompt_len_ = seqs.prompt_length;
  // The first beam of every group starts at 0, the others at -1e9.
  beam_scores_ =
      at::full({batch_, options_.num_beams}, -1e9, seqs.tokens.options().dtype(at::kFloat));
  beam_scores_.slice(1, 0, options_.num_beams, group_size_).fill_(0.0);
  beam_scores_ = beam_scores_.view({-1});
  pools_.assign(batch_ * options_.num_beam_groups, Pool{});
}

void GroupBeamSearch::add(Pool& pool, double sum_logprobs, std::vector<int64_t> tokens,
                          int64_t generated_len) const {
  const double score =
      sum_logprobs / std::pow(static_cast<double>(generated_len), options_.length_penalty);
  const auto cap = static_cast<size_t>(group_size_);
  if (pool.beams.size() < cap || score > pool.worst) {
    pool.beams.push_back(Finished{score, std::move(tokens)});
    if (pool.beams.size() > cap) {
      // Evict the lowest (score, position); the new worst is the second lowest.
      std::vector<std::pair<double, size_t>> order;
      for (size_t i = 0; i < pool.beams.size(); ++i) order.emplace_back(pool.beams[i].score, i);
      std::sort(order.begin(), order.end());
      pool.beams.erase(pool.beams.begin() + static_cast<std::ptrdiff_t>(order[0].second));
      pool.worst = order[1].first;
    } else {
      pool.worst = std::min(score, pool.worst);
    }
  }
}

bool GroupBeamSearch::is_done(const Pool& pool, double best, int64_t cur_len) const {
  if (static_cast<int64_t>(pool.beams.size()) < group_size_) return false;
  if (options_.early_stopping == EarlyStopping::kTrue) return true;
  int64_t len = cur_len - prompt_len_;
  if (options_.early_stopping == EarlyStopping::kNever && options_.length_penalty > 0) {
    len = options_.max_length - prompt_len_;
  }
  return pool.worst >= best / std::pow(static_cast<double>(len), options_.length_penalty);
}

void GroupBeamSearch::select_group(int64_t g, const at::Tensor& top_scores,
                                   const at::Tensor& top_tokens, const at::Tensor& top_beams,
                                   const at::Tensor& group_tokens, int64_t cur_len,
                                   at::Tensor& next_scores, at::Tensor& next_tokens,
                                   at::Tensor& next_rows) {
  const auto s = top_scores.accessor<float, 2>();
  const auto t = top_tokens.accessor<int64_t, 2>();
  const auto src = top_beams.accessor<int64_t, 2>();
  auto ns = next_scores.accessor<float, 2>();
  auto nt = next_tokens.accessor<int64_t, 2>();
  auto nr = next_rows.accessor<int64_t, 2>();
  const auto& eos = options_.eos;
  for (int64_t b = 0; b < batch_; ++b) {
    Pool& pool = pools_[b * options_.num_beam_groups + g];
    if (pool.done) {  // finished groups keep running on padding, ignored from now on
      for (int64_t j = 0; j < group_size_; ++j) {
        ns[b][j] = 0;
        nt[b][j] = options_.pad_token;
        nr[b][j] = 0;
      }
      continue;
    }
    int64_t filled = 0;
    float best = -std::numeric_limits<float>::infinity();
    for (int64_t rank = 0; rank < top_scores.size(1); ++rank) best = std::max(best, s[b][rank]);
    for (int64_t rank = 0; rank < top_scores.size(1) && filled < group_size_; ++rank) {
      const int64_t row = b * group_size_ + src[b][rank];
      if (std::find(eos.begin(), eos.end(), t[b][rank]) != eos.end()) {
        if (rank >= group_size_) continue;
        const at::Tensor hyp = group_tokens[row].narrow(0, prompt_len_, cur_len - prompt_len_);
        std::vector<int64_t> tokens(hyp.data_ptr<int64_t>(), hyp.data_ptr<int64_t>() + hyp.numel());
        tokens.push_back(t[b][rank]);
        add(pool, s[b][rank], std::move(tokens), cur_len + 1 - prompt_len_);
      } else {
        ns[b][filled] = s[b][rank];
        nt[b][filled] = t[b][rank];
        nr[b][filled] = row;
        ++filled;
      }
    }
    pool.done = pool.done || is_done(pool, best, cur_len + 1);
  }
}

StepDecision GroupBeamSearch::step(const at::Tensor& logits, const LogitsProcessor& processors,
                                   Sequences& seqs, const StoppingCriteria& stop) {
  const int64_t nb = options_.num_beams, gs = group_size_, vocab = logits.size(-1);
  const int64_t cur_len = seqs.length();
  const int64_t k = std::max<int64_t>(2, 1 + static_cast<int64_t>(options_.eos.size())) * gs;
  const auto dev = logits.device();
  const auto long_opts = seqs.tokens.options();
  at::Tensor tokens = seqs.tokens.clone();  // [B*nb, L], reordered group by group
  at::Tensor current = at::zeros({batch_ * nb}, long_opts);
  at::Tensor reorder = at::zeros({batch_ * nb}, long_opts);
  state_->current_tokens = current;
  const at::Tensor cpu_tokens = seqs.tokens.to(at::kCPU);
  for (int64_t g = 0; g < options_.num_beam_groups; ++g) {
    std::vector<int64_t> idx;
    for (int64_t b = 0; b < batch_; ++b) {
      for (int64_t j = 0; j < gs; ++j) idx.push_back(b * nb + g * gs + j);
    }
    const at::Tensor rows = at::tensor(idx, at::kLong).to(dev);  // [B*gs]
    const at::Tensor group_tokens = seqs.tokens.index_select(0, rows);
    state_->group = g;
    const Sequences group_seqs{
        group_tokens, seqs.prompt_valid.index_select(0, rows), seqs.prompt_length, {}};
    const at::Tensor lp =
        processors.process(group_seqs, at::log_softmax(logits.index_select(0, rows), -1));
    const at::Tensor acc =
        (lp + beam_scores_.index_select(0, rows).unsqueeze(-1)).view({batch_, gs * vocab});
    auto [top_scores, top_idx] = at::topk(acc, k, 1, /*largest=*/true, /*sorted=*/true);
    const at::Tensor beams = top_idx.div(vocab, "floor").to(at::kCPU);
    const at::Tensor toks = top_idx.remainder(vocab).to(at::kCPU);
    at::Tensor ns = at::zeros({batch_, gs}, at::kFloat), nt = at::zeros({batch_, gs}, at::kLong),
               nr = at::zeros({batch_, gs}, at::kLong);
    select_group(g, top_scores.to(at::kCPU).contiguous(), toks, beams,
                 cpu_tokens.index_select(0, rows.to(at::kCPU)), cur_len, ns, nt, nr);
    const at::Tensor next_rows = nr.view({-1}).to(dev);
    beam_scores_.index_copy_(0, rows, ns.view({-1}).to(dev));
    tokens.index_copy_(0, rows, group_tokens.index_select(0, next_rows));
    current.index_copy_(0, rows, nt.view({-1}).to(dev));
    reorder.index_copy_(0, rows,
                        next_rows.div(gs, "floor") * nb + g * gs + next_rows.remainder(gs));
  }
  seqs.tokens = at::cat({tokens, current.unsqueeze(1)}, 1);
  bool all_done = true;
  for (const auto& p : pools_) all_done = all_done && p.done;
  StepDecision d;
  d.next_tokens = current;
  d.parent_rows = reorder;
  d.done = all_done || stop.should_stop(seqs).all().item<bool>();
  return d;
}

std::vector<std::vector<Hypothesis>> GroupBeamSearch::finalize(const Sequences& seqs) {
  const at::Tensor tokens = seqs.tokens.to(at::kCPU).contiguous();
  const at::Tensor scores = beam_scores_.to(at::kCPU);
  const int64_t total = seqs.length(), groups = options_.num_beam_groups;
  for (int64_t bg = 0; bg < static_cast<int64_t>(pools_.size()); ++bg) {
    if (pools_[bg].done) continue;
    for (int64_t j = 0; j < group_size_; ++j) {
      const int64_t row = bg * group_size_ + j;
      const int64_t* p = tokens[row].data_ptr<int64_t>();
      std::vector<int64_t> hyp(p + prompt_len_, p + total);
      // transformers appends eos_token_id[0] to any returned sequence shorter than max_length.
      if (total < options_.max_length && !options_.eos.empty()) hyp.push_back(options_.eos[0]);
      add(pools_[bg], scores[row].item<float>(), std::move(hyp), total - prompt_len_);
    }
  }
  std::vector<std::vector<Hypothesis>> out(batch_);
  for (int64_t b = 0; b < batch_; ++b) {
    std::vector<Finished> all;
    for (int64_t g = 0; g < groups; ++g) {
      const auto& beams = pools_[b * groups + g].beams;
      all.insert(all.end(), beams.begin(), beams.end());
    }
    std::stable_sort(all.begin(), all.end(),
                     [](const Finished& x, const Finished& y) { return x.score < y.score; });
    for (int64_t j = 0; j < options_.num_return_sequences && !all.empty(); ++j) {
      out[b].push_back(Hypothesis{all.back().tokens, all.back().score});
      all.pop_back();
    }
  }
  return out;
}

}  // namespace gengraph

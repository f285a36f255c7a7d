#include "framework/decoding/search/group_beam_search.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

namespace gengraph {

at::Tensor HammingDiversity::process(const TokenHistory&, at::Tensor scores) const {
  const DiverseBeamState& s = *state_;
  const int64_t start = s.group * s.group_size;
  if (start == 0) return scores;
  const int64_t batch = s.current_tokens.size(0) / s.num_beams, vocab = scores.size(-1);
  // How often each token was chosen by the earlier groups of each input: [B, vocab], counted on
  // the device (bincount would read its size back to the host).
  const at::Tensor previous = s.current_tokens.view({batch, s.num_beams}).narrow(1, 0, start);
  const at::Tensor frequency =
      at::zeros({batch, vocab}, scores.options())
          .scatter_add_(1, previous, at::ones(previous.sizes(), scores.options()));
  return (scores.view({batch, s.group_size, vocab}) - (frequency * penalty_).unsqueeze(1))
      .view(scores.sizes());
}

GroupBeamSearch::GroupBeamSearch(GroupBeamSearchOptions options,
                                 std::shared_ptr<DiverseBeamState> state)
    : options_(std::move(options)), state_(std::move(state)) {
  group_size_ = options_.num_beams / options_.num_beam_groups;
  state_->num_beams = options_.num_beams;
  state_->group_size = group_size_;
}

void GroupBeamSearch::begin(const TokenHistory& seqs) {
  batch_ = seqs.rows() / options_.num_beams;
  prompt_len_ = seqs.prompt_length;
  // In place where the shapes repeat (refill), as BeamSearch::begin.
  const int64_t g = options_.num_beam_groups, gs = group_size_, cap = seqs.capacity();
  const auto l = seqs.buffer.options();
  refill(pool_scores_, {batch_, g, gs}, l.dtype(at::kDouble), 0.0);
  refill(pool_keys_, {batch_, g, gs}, l, 0);
  refill(pool_tokens_, {batch_, g, gs, cap}, l, 0);
  refill(pool_lengths_, {batch_, g, gs}, l, 0);
  refill(pool_sizes_, {batch_, g}, l, 0);
  refill(pool_done_, {batch_, g}, l.dtype(at::kBool), false);
  refill(current_, {batch_ * options_.num_beams}, l, 0);
  if (options_.output_scores) {
    refill(running_token_scores_, {batch_ * options_.num_beams, cap}, l.dtype(at::kFloat), 0.0);
    refill(pool_token_scores_, {batch_, g, gs, cap}, l.dtype(at::kFloat), 0.0);
  }
  refill(done_, {}, l.dtype(at::kBool), false);
  refill(end_length_, {}, l, seqs.prompt_length);
  if (!eos_.defined() || eos_.device() != l.device())
    eos_ = at::tensor(options_.eos, at::kLong).to(l.device());
  // The first beam of every group starts at 0, the others at -1e9.
  refill(beam_scores_, {batch_ * options_.num_beams}, l.dtype(at::kFloat), -1e9);
  beam_scores_.view({batch_, options_.num_beams})
      .slice(1, 0, options_.num_beams, group_size_)
      .fill_(0.0);
}

void GroupBeamSearch::add(Pool& pool, double sum_logprobs, Finished hyp,
                          int64_t generated_len) const {
  const double score =
      sum_logprobs / std::pow(static_cast<double>(generated_len), options_.length_penalty);
  const auto cap = static_cast<size_t>(group_size_);
  if (pool.beams.size() < cap || score > pool.worst) {
    hyp.score = score;
    pool.beams.push_back(std::move(hyp));
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

void GroupBeamSearch::add_to_pools(int64_t g, const at::Tensor& valid, const at::Tensor& score,
                                   const at::Tensor& hyp, const at::Tensor& hyp_scores,
                                   const at::Tensor& length, const at::Tensor& key) {
  const int64_t gs = group_size_, cap = hyp.size(1);
  at::Tensor scores = pool_scores_.select(1, g), keys = pool_keys_.select(1, g);  // [B, gs]
  at::Tensor tokens = pool_tokens_.select(1, g), lengths = pool_lengths_.select(1, g);
  at::Tensor sizes = pool_sizes_.select(1, g);  // [B]
  const at::Tensor used = at::arange(gs, sizes.options()).unsqueeze(0).lt(sizes.unsqueeze(1));
  const at::Tensor lowest =
      std::get<0>(at::where(used, scores, std::numeric_limits<double>::infinity()).min(1));
  const at::Tensor worst = at::where(sizes.gt(0), lowest, 1e9);  // as Pool::worst
  const at::Tensor full = sizes.ge(gs);
  const at::Tensor accept = valid.logical_and(full.logical_not().logical_or(score.gt(worst)));
  // A full pool evicts its lowest score, the oldest among equals; one with room fills the next
  // slot.
  const at::Tensor evict = at::where(used.logical_and(scores.eq(lowest.unsqueeze(1))), keys,
                                     std::numeric_limits<int64_t>::max())
                               .argmin(1);
  const at::Tensor slot = at::where(full, evict, sizes.clamp_max(gs - 1)).unsqueeze(1);  // [B, 1]
  const at::Tensor take = accept.unsqueeze(1);
  scores.scatter_(1, slot, at::where(take, score.unsqueeze(1), scores.gather(1, slot)));
  keys.scatter_(1, slot, at::where(take, key.expand({score.size(0), 1}), keys.gather(1, slot)));
  lengths.scatter_(1, slot,
                   at::where(take, length.expand({score.size(0), 1}), lengths.gather(1, slot)));
  const at::Tensor row = slot.unsqueeze(2).expand({score.size(0), 1, cap});
  tokens.scatter_(1, row, at::where(take.unsqueeze(2), hyp.unsqueeze(1), tokens.gather(1, row)));
  if (options_.output_scores) {
    at::Tensor token_scores = pool_token_scores_.select(1, g);  // [B, gs, cap]
    token_scores.scatter_(
        1, row, at::where(take.unsqueeze(2), hyp_scores.unsqueeze(1), token_scores.gather(1, row)));
  }
  sizes.add_(accept.logical_and(full.logical_not()).to(at::kLong));
}

StepDecision GroupBeamSearch::step(const at::Tensor& logits, const LogitsProcessor& processors,
                                   TokenHistory& seqs, const StoppingCriteria& stop) {
  const int64_t nb = options_.num_beams, gs = group_size_, vocab = logits.size(-1);
  const int64_t cap = seqs.capacity(), groups = options_.num_beam_groups;
  const int64_t k = std::max<int64_t>(2, 1 + static_cast<int64_t>(options_.eos.size())) * gs;
  const auto long_opts = seqs.buffer.options();
  const at::Tensor cur = seqs.length.as_tensor(long_opts);  // [] the length before this step
  const at::Tensor generated = cur + 1 - prompt_len_;       // [] generated tokens after it
  const at::Tensor live = done_.logical_not();
  const auto penalty = [&](const at::Tensor& len) {
    return at::pow(len.to(at::kDouble), options_.length_penalty);
  };
  const at::Tensor done_len =
      (options_.early_stopping == EarlyStopping::kNever && options_.length_penalty > 0)
          ? at::scalar_tensor(options_.max_length - prompt_len_, long_opts)
          : generated;
  at::Tensor tokens = seqs.buffer.clone();  // [B*nb, cap], reordered group by group
  const bool scored = options_.output_scores;
  at::Tensor token_scores = scored ? running_token_scores_.clone() : at::Tensor();  // likewise
  at::Tensor reorder = at::zeros({batch_ * nb}, long_opts);
  state_->current_tokens = current_;
  const at::Tensor batch_rows = at::arange(batch_, long_opts).unsqueeze(1) * gs;  // [B, 1]
  for (int64_t g = 0; g < groups; ++g) {
    // Rows of group g, input by input: b * nb + g * gs + j.
    const at::Tensor rows =
        (at::arange(batch_, long_opts).unsqueeze(1) * nb + g * gs + at::arange(gs, long_opts))
            .view({-1});
    const at::Tensor group_tokens = seqs.buffer.index_select(0, rows);
    state_->group = g;
    const TokenHistory group_seqs{group_tokens, seqs.prompt_valid.index_select(0, rows),
                                  seqs.prompt_length, seqs.length};
    const at::Tensor lp =
        processors.process(group_seqs, at::log_softmax(logits.index_select(0, rows), -1));
    const at::Tensor acc =
        (lp + beam_scores_.index_select(0, rows).unsqueeze(-1)).view({batch_, gs * vocab});
    auto [top_scores, top_idx] = at::topk(acc, k, 1, /*largest=*/true, /*sorted=*/true);
    const at::Tensor src = top_idx.div(vocab, "floor");  // [B, k] beam within the group
    const at::Tensor tok = top_idx.remainder(vocab);
    const at::Tensor is_eos = at::isin(tok, eos_);
    // output_scores: each candidate's token score, the processed log-probability it was chosen
    // by (what transformers' compute_transition_scores reads through the beam indices).
    const at::Tensor group_scores =
        scored ? running_token_scores_.index_select(0, rows) : at::Tensor();  // [B*gs, cap]
    const at::Tensor cand_score =
        scored ? lp.view({batch_, gs * vocab}).gather(1, top_idx) : at::Tensor();  // [B, k]
    const at::Tensor was_done = pool_done_.select(1, g).clone();  // [B], before this step
    const at::Tensor open = was_done.logical_not().logical_and(live);
    // EOS among the first gs candidates joins the pool, in rank order.
    const at::Tensor by_beam = group_tokens.view({batch_, gs, cap});
    for (int64_t j = 0; j < gs; ++j) {
      at::Tensor hyp = by_beam.gather(1, src.narrow(1, j, 1).unsqueeze(2).expand({batch_, 1, cap}))
                           .squeeze(1);  // [B, cap]
      write_column(hyp, 1, seqs.length, tok.select(1, j));
      at::Tensor hyp_scores;
      if (scored) {
        hyp_scores = group_scores.view({batch_, gs, cap})
                         .gather(1, src.narrow(1, j, 1).unsqueeze(2).expand({batch_, 1, cap}))
                         .squeeze(1);
        write_column(hyp_scores, 1, seqs.length, cand_score.select(1, j));
      }
      add_to_pools(g, open.logical_and(is_eos.select(1, j)),
                   top_scores.select(1, j).to(at::kDouble) / penalty(generated), hyp, hyp_scores,
                   generated, cur * gs + j);
    }
    // Pool::is_done with the best score of this step.
    const at::Tensor best = top_scores.select(1, 0).to(at::kDouble);
    at::Tensor finished = pool_sizes_.select(1, g).ge(gs);
    if (options_.early_stopping != EarlyStopping::kTrue) {
      const at::Tensor lowest = std::get<0>(pool_scores_.select(1, g).min(1));
      finished = finished.logical_and(lowest.ge(best / penalty(done_len)));
    }
    pool_done_.select(1, g).logical_or_(finished.logical_and(open));
    // The first gs candidates that are not EOS continue; a group that was done runs on padding
    // from row 0, as transformers does.
    const at::Tensor rank = at::arange(k, long_opts).unsqueeze(0);
    const at::Tensor chosen =
        std::get<1>(at::sort(at::where(is_eos, rank + k, rank), 1)).narrow(1, 0, gs);  // [B, gs]
    const at::Tensor frozen = was_done.unsqueeze(1);
    const at::Tensor ns = at::where(frozen, 0.0, top_scores.gather(1, chosen));
    const at::Tensor nt = at::where(frozen, options_.pad_token, tok.gather(1, chosen));
    const at::Tensor next_rows = at::where(frozen, 0, src.gather(1, chosen) + batch_rows)
                                     .view({-1});  // [B*gs], rows of group_tokens
    beam_scores_.index_copy_(0, rows,
                             at::where(live, ns.view({-1}), beam_scores_.index_select(0, rows)));
    tokens.index_copy_(0, rows, group_tokens.index_select(0, next_rows));
    current_.index_copy_(0, rows, nt.view({-1}));
    if (scored) {
      // The continuing beams' scores, this step's at column cur (0 for a done group's padding).
      const at::Tensor next_scores = group_scores.index_select(0, next_rows);
      write_column(next_scores, 1, seqs.length,
                   at::where(frozen, 0.0, cand_score.gather(1, chosen)).view({-1}));
      token_scores.index_copy_(0, rows, next_scores);
    }
    reorder.index_copy_(0, rows,
                        next_rows.div(gs, "floor") * nb + g * gs + next_rows.remainder(gs));
  }
  write_column(tokens, 1, seqs.length, current_);
  const at::Tensor stop_all =
      stop.should_stop(
              TokenHistory{tokens, seqs.prompt_valid, seqs.prompt_length, seqs.length.plus(1)})
          .all();
  keep(seqs.buffer, tokens, seqs, live);
  if (scored) keep(running_token_scores_, token_scores, seqs, live);
  end_length_.add_(live);  // finalize() reads the length the search ended at
  done_.logical_or_(pool_done_.all().logical_or(stop_all));
  seqs.length.advance();
  StepDecision d;
  d.next_tokens = current_;
  d.parent_rows = reorder;
  d.running = done_.logical_not();
  return d;
}

std::vector<GroupBeamSearch::Pool> GroupBeamSearch::read_pools() const {
  std::vector<Pool> pools(batch_ * options_.num_beam_groups);
  const at::Tensor scores = pool_scores_.to(at::kCPU), keys = pool_keys_.to(at::kCPU);
  const at::Tensor tokens = pool_tokens_.to(at::kCPU).contiguous();
  const at::Tensor lengths = pool_lengths_.to(at::kCPU), sizes = pool_sizes_.to(at::kCPU);
  const at::Tensor done = pool_done_.to(at::kCPU);
  const at::Tensor token_scores =
      options_.output_scores ? pool_token_scores_.to(at::kCPU).contiguous() : at::Tensor();
  const int64_t groups = options_.num_beam_groups;
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t g = 0; g < groups; ++g) {
      Pool& pool = pools[b * groups + g];
      // Insertion order is the host pool's order (eviction keeps the others' order).
      std::vector<std::pair<int64_t, int64_t>> order;  // (key, slot)
      for (int64_t j = 0; j < sizes[b][g].item<int64_t>(); ++j)
        order.emplace_back(keys[b][g][j].item<int64_t>(), j);
      std::sort(order.begin(), order.end());
      for (const auto& [key, j] : order) {
        const int64_t* p = tokens[b][g][j].data_ptr<int64_t>() + prompt_len_;
        const double score = scores[b][g][j].item<double>();
        const int64_t n = lengths[b][g][j].item<int64_t>();
        Finished hyp{score, std::vector<int64_t>(p, p + n), {}};
        if (token_scores.defined()) {
          const float* s = token_scores[b][g][j].data_ptr<float>() + prompt_len_;
          hyp.token_scores.assign(s, s + n);
        }
        pool.beams.push_back(std::move(hyp));
        pool.worst = std::min(pool.worst, score);
      }
      pool.done = done[b][g].item<bool>();
    }
  }
  return pools;
}

std::vector<std::vector<Sequence>> GroupBeamSearch::finalize(const TokenHistory& seqs) {
  std::vector<Pool> pools = read_pools();
  const at::Tensor tokens = seqs.buffer.to(at::kCPU).contiguous();
  const at::Tensor scores = beam_scores_.to(at::kCPU);
  const at::Tensor token_scores =
      options_.output_scores ? running_token_scores_.to(at::kCPU).contiguous() : at::Tensor();
  const int64_t total = end_length_.item<int64_t>();
  const int64_t groups = options_.num_beam_groups;
  for (int64_t bg = 0; bg < static_cast<int64_t>(pools.size()); ++bg) {
    if (pools[bg].done) continue;
    for (int64_t j = 0; j < group_size_; ++j) {
      const int64_t row = bg * group_size_ + j;
      const int64_t* p = tokens[row].data_ptr<int64_t>();
      Finished hyp{0.0, std::vector<int64_t>(p + prompt_len_, p + total), {}};
      if (token_scores.defined()) {
        const float* s = token_scores[row].data_ptr<float>();
        hyp.token_scores.assign(s + prompt_len_, s + total);
      }
      // transformers appends eos_token_id[0] to any returned sequence shorter than max_length
      // (a token no step chose: its score is 0, as compute_transition_scores gives it).
      if (total < options_.max_length && !options_.eos.empty()) {
        hyp.tokens.push_back(options_.eos[0]);
        if (token_scores.defined()) hyp.token_scores.push_back(0.0);
      }
      add(pools[bg], scores[row].item<float>(), std::move(hyp), total - prompt_len_);
    }
  }
  std::vector<std::vector<Sequence>> out(batch_);
  for (int64_t b = 0; b < batch_; ++b) {
    std::vector<Finished> all;
    for (int64_t g = 0; g < groups; ++g) {
      const auto& beams = pools[b * groups + g].beams;
      all.insert(all.end(), beams.begin(), beams.end());
    }
    std::stable_sort(all.begin(), all.end(),
                     [](const Finished& x, const Finished& y) { return x.score < y.score; });
    for (int64_t j = 0; j < options_.num_return_sequences && !all.empty(); ++j) {
      out[b].push_back(
          Sequence{all.back().tokens, all.back().score, {}, std::move(all.back().token_scores)});
      all.pop_back();
    }
  }
  return out;
}

}  // namespace gengraph

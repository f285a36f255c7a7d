#include "serving/batch_scheduler.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <numeric>
#include <unordered_set>
#include <vector>

#include "framework/decoding/pipeline.h"
#include "framework/decoding/sampling_generator.h"
#include "framework/decoding/search/search_strategy.h"
#include "framework/model/causal_lm.h"
#include "framework/quant/kernels.h"
#include "framework/util/error.h"

namespace gengraph {

struct BatchScheduler::Live {
  int64_t id = 0;
  PlannedRequest req;
  Pipeline pipe;
  TokenHistory seqs;
  std::vector<int64_t> tokens;  // the prompt, then each token chosen (the last one not yet run)
  int64_t computed = 0;         // leading positions whose keys and values the cache holds
  std::vector<int64_t> blocks;  // the block table
  int64_t published = 0;        // leading blocks offered to the prefix index
  int64_t decisions = 0, max_steps = 0;
  bool cancelled = false, admitted_once = false, has_first = false, preempted = false;
  Clock::time_point admitted, first_token;
  int64_t preemptions = 0, reused = 0;
  int64_t planned = 0;  // positions in the step being laid out
};

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

BatchScheduler::BatchScheduler(ForwardBackend& backend, const CoreOptions& options)
    : backend_(backend),
      options_(options),
      policy_(PolicyRegistry::instance().get(options.policy).create()),
      pool_(options.kv_blocks, options.block_size) {
  if (!backend.runs_ragged()) {
    throw Error(
        "scheduler: backend '" + backend.name() +
        "' cannot run a ragged batch over a paged cache (ForwardBackend::runs_ragged); "
        "the scheduler runs on eager, aoti with ragged: true, or cuda_graph with step: eager "
        "(docs/serving.md#backends)");
  }
  for (const auto& [key, value] : {std::pair{"max_step_tokens", options.max_step_tokens},
                                   {"prefill_chunk", options.prefill_chunk},
                                   {"max_running", options.max_running}}) {
    if (value < 1) {
      throw Error(std::string("scheduler option ") + key + ": expected an integer >= 1, found " +
                  std::to_string(value));
    }
  }
  if (options.batch_invariant) {
    // The paths that sum in one order whatever the batch: gengraph's CPU kernels, in float32
    // activations, over the fused form's projections.
    const CausalLM& m = backend.model();
    std::string why;
    if (!m.device().is_cpu()) {
      why = "the model is on " + m.device().str() +
            " (cuBLAS picks its kernels by shape; the invariant kernels are gengraph's CPU ones)";
    } else if (m.dtype() != at::kFloat) {
      why = std::string("the model computes in ") + c10::toString(m.dtype()) +
            " (the invariant kernels take float32 activations)";
    } else if (!m.config().fused) {
      why = "the model is loaded unfused (fused: false), whose projections run at::linear";
    }
    if (!why.empty()) {
      throw Error("scheduler option batch_invariant: " + why +
                  "; load it in float32 on the CPU, fused, or set batch_invariant: false "
                  "(docs/serving.md#batch-invariance)");
    }
  }
  const ModelShape s = model_shape(backend.model());
  cache_ = std::make_unique<PagedCache>(
      PagedLayout{s.num_layers, s.num_kv_heads, s.head_dim, options.kv_blocks, options.block_size},
      at::TensorOptions()
          .dtype(model_dtype(backend.model()))
          .device(model_device(backend.model())));
}

BatchScheduler::~BatchScheduler() = default;

PlannedRequest BatchScheduler::make_request(std::vector<int64_t> prompt,
                                            const nlohmann::json& settings,
                                            const nlohmann::json& generation_defaults,
                                            uint64_t seed, int64_t priority,
                                            TokenStream stream) const {
  PlannedRequest r;
  r.plan =
      plan_generation(plan_target(backend_, generation_defaults), settings, "request", {prompt});
  const ResolvedSettings& c = r.plan.config;
  if (c.num_beams > 1) {
    throw Error("request: num_beams " + std::to_string(c.num_beams) +
                ": beam search is refused by the scheduler (its strategy reorders rows and "
                "chooses its sequences only at the end); run it through Engine::generate");
  }
  if (c.num_return_sequences > 1) {
    throw Error("request: num_return_sequences " + std::to_string(c.num_return_sequences) +
                ": the scheduler runs one sequence per request; submit one request per sequence, "
                "each with its own seed");
  }
  if (r.plan.speculative()) {
    throw Error(
        "request: speculative decoding (prompt_lookup_num_tokens, candidate_generator) "
        "is refused by the scheduler; run it through Engine::generate");
  }
  if (!r.plan.pipeline || !r.plan.pipeline->strategy->streams()) {
    throw Error("request: the '" +
                (r.plan.pipeline ? r.plan.pipeline->strategy->name() : std::string("?")) +
                "' strategy does not fix a token when it chooses it; the scheduler runs greedy "
                "search and sampling");
  }
  const int64_t capacity = pool_.blocks() * pool_.block_size();
  if (r.plan.max_length > capacity) {
    throw Error("request: its prompt (" + std::to_string(r.plan.prompt_length) +
                " tokens) plus max_new_tokens (" +
                std::to_string(r.plan.max_length - r.plan.prompt_length) + ") need " +
                std::to_string(r.plan.max_length) + " positions, more than the KV pool holds (" +
                std::to_string(pool_.blocks()) + " blocks of " +
                std::to_string(pool_.block_size()) + " = " + std::to_string(capacity) +
                "); raise kv_blocks or kv_memory_mb, or ask for fewer tokens");
  }
  // A generator of the model's device seeded as Engine::manual_seed(seed) seeds the default one.
  const at::Device device = model_device(backend_.model());
  at::Generator base = at::globalContext().defaultGenerator(device);
  {
    const std::lock_guard<std::mutex> lock(base.mutex());
    r.generator = base.clone();
  }
  r.generator.set_current_seed(seed);
  r.prompt = std::move(prompt);
  r.priority = priority;
  r.stream = std::move(stream);
  return r;
}

int64_t BatchScheduler::add(PlannedRequest request) {
  auto r = std::make_unique<Live>();
  r->id = next_id_++;
  r->req = std::move(request);
  r->pipe = std::move(*r->req.plan.pipeline);
  r->req.plan.pipeline.reset();
  const GenerationPlan& plan = r->req.plan;
  const int64_t len = plan.prompt_length;
  r->max_steps = plan.max_length - len;
  r->tokens = r->req.prompt;
  // The sequences as the decoding loop lays out one prompt: the prompt, then the pad token.
  const auto l = at::TensorOptions().dtype(at::kLong).device(model_device(backend_.model()));
  at::Tensor laid = at::full({1, plan.max_length}, effective_pad_token(plan.config), at::kLong);
  laid[0].narrow(0, 0, len).copy_(at::tensor(r->req.prompt, at::kLong));
  r->seqs.buffer = laid.to(l.device());
  r->seqs.prompt_valid = at::ones({1, len}, l.dtype(at::kBool));
  r->seqs.prompt_length = len;
  r->seqs.length = Length(len);
  r->pipe.strategy->begin(r->seqs);
  waiting_.push_back(std::move(r));
  return waiting_.back()->id;
}

bool BatchScheduler::cancel(int64_t id) {
  for (auto* list : {&waiting_}) {
    for (auto& r : *list) {
      if (r->id == id) return !std::exchange(r->cancelled, true);
    }
  }
  for (auto& r : running_) {
    if (r->id == id) return !std::exchange(r->cancelled, true);
  }
  return false;
}

RequestView BatchScheduler::view(const Live& r) const {
  RequestView v;
  v.id = r.id;
  v.prompt_tokens = static_cast<int64_t>(r.req.prompt.size());
  v.to_compute = static_cast<int64_t>(r.tokens.size()) - r.computed;
  v.generated = r.decisions;
  v.max_new_tokens = r.max_steps;
  v.priority = r.req.priority;
  v.running = !r.preempted && r.admitted_once;
  if (policy_->wants_cached_prefix() && options_.prefix_sharing && r.computed == 0) {
    v.cached_prefix = pool_.cached_prefix(r.tokens);
  }
  return v;
}

bool BatchScheduler::goes_before(const RequestView& a, const RequestView& b) const {
  if (policy_->before(a, b)) return true;
  if (policy_->before(b, a)) return false;
  return a.id < b.id;
}

bool BatchScheduler::goes_before(const Live& a, const Live& b) const {
  return goes_before(view(a), view(b));
}

std::vector<size_t> BatchScheduler::policy_order(const std::vector<Live*>& requests,
                                                 bool decodes_first) const {
  // Each request viewed once (a view may look the request up in the prefix index).
  std::vector<RequestView> views;
  for (const Live* r : requests) views.push_back(view(*r));
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (decodes_first) {
      const bool da = views[a].to_compute == 1, db = views[b].to_compute == 1;
      if (da != db) return da;
    }
    return goes_before(views[a], views[b]);
  });
  return order;
}

void BatchScheduler::release(Live& r) {
  for (int64_t b : r.blocks) pool_.release(b);
  r.blocks.clear();
  r.computed = 0;
  r.published = 0;
}

CoreResult BatchScheduler::finish(Live& r, const std::string& reason, const std::string& error) {
  CoreResult out;
  out.id = r.id;
  out.finish = reason;
  out.error = error;
  out.prompt_length = static_cast<int64_t>(r.req.prompt.size());
  if (r.decisions > 0) {
    try {
      auto seqs = r.pipe.strategy->finalize(r.seqs);
      if (!seqs.empty() && !seqs[0].empty()) out.sequence = std::move(seqs[0][0]);
    } catch (const std::exception& e) {
      if (out.error.empty()) out.error = e.what();
    }
  }
  const auto at = [&](Clock::time_point t) {
    return std::chrono::duration<double>(t - r.req.submitted).count();
  };
  const auto now = Clock::now();
  out.queue_s = at(r.admitted_once ? r.admitted : now);
  out.time_to_first_token_s = r.has_first ? at(r.first_token) : 0.0;
  out.total_s = at(now);
  out.preemptions = r.preemptions;
  out.reused_tokens = r.reused;
  release(r);
  r.pipe = Pipeline{};
  ++finished_;
  return out;
}

bool BatchScheduler::take_prefix(Live& r) {
  if (!options_.prefix_sharing || r.computed > 0 || !r.blocks.empty()) return false;
  const int64_t bs = pool_.block_size();
  // At least the last position is computed: its logits choose the next token.
  BlockPool::Match m = pool_.match(r.tokens, static_cast<int64_t>(r.tokens.size()) - 1);
  r.blocks = m.blocks;
  r.computed = static_cast<int64_t>(m.blocks.size()) * bs;
  if (m.partial > 0) {
    if (auto b = pool_.allocate()) {
      // Copy on write: the positions this sequence shares with the published block, into a block
      // of its own that it goes on writing.
      cache_->copy_block(m.partial_block, *b, m.partial);
      r.blocks.push_back(*b);
      r.computed += m.partial;
      ++cow_copies_;
    }
  }
  r.published = static_cast<int64_t>(m.blocks.size());
  r.reused += r.computed;
  pool_.count_hit(r.computed);
  return r.computed > 0;
}

void BatchScheduler::preempt(Live& r) {
  // Recompute: its blocks go back (those published stay in the prefix index, likely to be matched
  // again when it resumes); its choices so far are kept, and every position is run again, which
  // gives the same keys, values and logits (batch invariance).
  release(r);
  r.preempted = true;
  ++r.preemptions;
  ++preemptions_;
}

void BatchScheduler::drop_running(const std::function<bool(const Live&)>& gone) {
  running_.erase(std::remove_if(running_.begin(), running_.end(),
                                [&](const std::unique_ptr<Live>& r) { return gone(*r); }),
                 running_.end());
}

bool BatchScheduler::ensure_blocks(Live& r, int64_t upto) {
  const int64_t need = ceil_div(upto, pool_.block_size());
  while (static_cast<int64_t>(r.blocks.size()) < need) {
    if (auto b = pool_.allocate()) {
      r.blocks.push_back(*b);
      continue;
    }
    // Out of blocks: preempt the running request the policy puts last, among those not in this
    // step yet; r itself when there is none.
    Live* victim = nullptr;
    for (auto& other : running_) {
      if (other.get() == &r || other->preempted || other->planned > 0 || other->blocks.empty()) {
        continue;
      }
      if (!victim || goes_before(*victim, *other)) victim = other.get();
    }
    if (!victim || goes_before(*victim, r)) victim = &r;
    preempt(*victim);
    if (victim == &r) return false;
  }
  return true;
}

void BatchScheduler::admit() {
  if (waiting_.empty()) return;
  const int64_t bs = pool_.block_size();
  const int64_t watermark = std::max<int64_t>(1, pool_.blocks() / 100);
  // The prompt blocks running requests are still computing: a waiting request whose next block
  // (past what the index holds) is among them waits for it to be published instead of computing
  // it a second time (requests that arrive together behind one system prompt compute it once).
  std::unordered_set<uint64_t> computing;
  const auto note_computing = [&](const Live& r) {
    const int64_t full = (static_cast<int64_t>(r.tokens.size()) - 1) / bs;
    const std::vector<uint64_t> h = pool_.block_hashes(r.tokens, full);
    for (int64_t i = r.computed / bs; i < full; ++i) computing.insert(h[static_cast<size_t>(i)]);
  };
  if (options_.prefix_sharing) {
    for (const auto& r : running_) note_computing(*r);
  }
  const auto waits_for_prefix = [&](const Live& r) {
    if (!options_.prefix_sharing || computing.empty() || r.computed > 0) return false;
    const int64_t full = (static_cast<int64_t>(r.tokens.size()) - 1) / bs;
    const int64_t cached = std::min(pool_.cached_prefix(r.tokens) / bs, full);
    if (cached >= full) return false;
    return computing.count(pool_.block_hashes(r.tokens, cached + 1).back()) > 0;
  };
  // Candidates in the policy's order.
  std::vector<Live*> candidates;
  for (auto& r : waiting_) candidates.push_back(r.get());
  for (size_t k : policy_order(candidates, /*decodes_first=*/false)) {
    if (static_cast<int64_t>(running_.size()) >= options_.max_running) break;
    const auto it = waiting_.begin() + static_cast<std::ptrdiff_t>(k);
    Live& r = **it;
    if (waits_for_prefix(r)) continue;
    take_prefix(r);
    const int64_t remaining = static_cast<int64_t>(r.tokens.size()) - r.computed;
    const int64_t first = std::min({remaining, options_.prefill_chunk, options_.max_step_tokens});
    const int64_t need = ceil_div(r.computed + first, bs) - static_cast<int64_t>(r.blocks.size());
    if (pool_.available() < need + (running_.empty() ? 0 : watermark)) {
      release(r);  // what it took from the prefix index, until it can run
      break;
    }
    if (!r.admitted_once) {
      r.admitted_once = true;
      r.admitted = Clock::now();
    }
    r.preempted = false;
    if (options_.prefix_sharing) note_computing(r);
    running_.push_back(std::move(*it));
  }
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), nullptr), waiting_.end());
}

void BatchScheduler::decide(Live& r, const at::Tensor& logits, std::vector<CoreResult>& done) {
  const at::Tensor row = logits.scalar_type() == at::kFloat ? logits : logits.to(at::kFloat);
  if (!std::isfinite(row.sum().item<double>())) {
    done.push_back(finish(r, "failed",
                          "the model's logits hold NaN or infinite values at generated token " +
                              std::to_string(r.decisions)));
    return;
  }
  // A part or a stream that throws fails its own request only.
  StepDecision d;
  try {
    const SamplingGeneratorScope generator(r.req.generator);
    d = r.pipe.strategy->step(row, r.pipe.processors, r.seqs, r.pipe.stopping);
  } catch (const std::exception& e) {
    done.push_back(finish(r, "failed", std::string("choosing its next token: ") + e.what()));
    return;
  }
  const int64_t token = d.next_tokens.to(at::kCPU).item<int64_t>();
  ++r.decisions;
  if (!r.has_first) {
    r.has_first = true;
    r.first_token = Clock::now();
  }
  const bool running = d.running.item<bool>();
  bool go_on = true;
  const bool emitted = !d.emitted.defined() || d.emitted.to(at::kCPU).item<bool>();
  if (r.req.stream && emitted) {
    StreamedToken t;
    t.token = token;
    t.step = r.decisions - 1;
    if (d.token_scores.defined()) t.logprob = d.token_scores.to(at::kCPU).item<double>();
    if (auto top = top_logprobs_on_host(d); !top.empty()) t.top = std::move(top[0]);
    t.last = d.continues.defined() ? !d.continues.to(at::kCPU).item<bool>() : false;
    try {
      go_on = r.req.stream(t);
    } catch (const std::exception& e) {
      done.push_back(finish(r, "failed", std::string("its stream threw: ") + e.what()));
      return;
    }
  }
  if (!go_on) {
    done.push_back(finish(r, "stopped"));
  } else if (!running || r.decisions >= r.max_steps) {
    const auto& eos = r.req.plan.config.eos_token_id;
    const bool ended = !running && std::find(eos.begin(), eos.end(), token) != eos.end();
    done.push_back(finish(r, r.decisions >= r.max_steps && !ended ? "length" : "stop"));
  } else {
    r.tokens.push_back(token);
  }
}

std::vector<CoreResult> BatchScheduler::step() {
  std::vector<CoreResult> done;
  // Cancelled requests leave first, their blocks freed.
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if ((*it)->cancelled) {
      done.push_back(finish(**it, "cancelled"));
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& r : running_) {
    if (r->cancelled) done.push_back(finish(*r, "cancelled"));
  }
  drop_running([](const Live& r) { return r.cancelled; });
  admit();
  if (running_.empty()) return done;

  // Decode steps first (one position each: the running batch's next tokens are never held up by
  // a prefill), then the rest in the policy's order, within the step's token budget; a prompt
  // gives at most prefill_chunk positions a step.
  std::vector<Live*> running;
  for (auto& r : running_) running.push_back(r.get());
  std::vector<Live*> order;
  for (size_t k : policy_order(running, /*decodes_first=*/true)) order.push_back(running[k]);
  int64_t budget = options_.max_step_tokens;
  std::vector<Live*> in_step;
  for (Live* r : order) {
    r->planned = 0;
  }
  for (Live* r : order) {
    if (budget == 0) break;
    if (r->preempted) continue;
    const int64_t remaining = static_cast<int64_t>(r->tokens.size()) - r->computed;
    int64_t n = std::min(remaining, budget);
    if (remaining > 1) n = std::min(n, options_.prefill_chunk);
    if (!ensure_blocks(*r, r->computed + n)) continue;
    r->planned = n;
    budget -= n;
    in_step.push_back(r);
  }
  // Preempted requests wait again, ahead of later arrivals under fcfs (their ids are older).
  for (auto& r : running_) {
    if (r->preempted) waiting_.push_front(std::move(r));
  }
  running_.erase(std::remove(running_.begin(), running_.end(), nullptr), running_.end());
  peak_in_use_ = std::max(peak_in_use_, pool_.in_use());
  if (in_step.empty()) return done;

  // The step's layout, on the host, moved once.
  const int64_t bs = pool_.block_size();
  int64_t total = 0, widest = 0;
  for (Live* r : in_step) {
    total += r->planned;
    widest = std::max<int64_t>(widest, static_cast<int64_t>(r->blocks.size()));
  }
  const auto l = at::TensorOptions().dtype(at::kLong);
  at::Tensor ids = at::empty({total}, l), pos = at::empty({total}, l);
  at::Tensor slots = at::empty({total}, l), seq = at::empty({total}, l);
  at::Tensor tables = at::zeros({static_cast<int64_t>(in_step.size()), widest}, l);
  std::vector<int64_t> logit_rows;
  std::vector<Live*> deciding;
  int64_t* ip = ids.data_ptr<int64_t>();
  int64_t* pp = pos.data_ptr<int64_t>();
  int64_t* sp = slots.data_ptr<int64_t>();
  int64_t* qp = seq.data_ptr<int64_t>();
  int64_t* tp = tables.data_ptr<int64_t>();
  int64_t at_token = 0;
  for (int64_t s = 0; s < static_cast<int64_t>(in_step.size()); ++s) {
    Live& r = *in_step[s];
    std::copy(r.blocks.begin(), r.blocks.end(), tp + s * widest);
    for (int64_t p = r.computed; p < r.computed + r.planned; ++p, ++at_token) {
      ip[at_token] = r.tokens[static_cast<size_t>(p)];
      pp[at_token] = p;
      sp[at_token] = r.blocks[static_cast<size_t>(p / bs)] * bs + p % bs;
      qp[at_token] = s;
    }
    if (r.computed + r.planned == static_cast<int64_t>(r.tokens.size())) {
      logit_rows.push_back(at_token - 1);
      deciding.push_back(&r);
    }
    if (r.planned == 1) {
      ++decode_tokens_;
    } else {
      prefill_tokens_ += r.planned;
    }
  }
  const at::Device device = model_device(backend_.model());
  PagedCache::Step step;
  step.write_slots = slots.to(device);
  step.block_tables = tables.to(device);
  step.seq = seq.to(device);
  step.last = pos.to(device);
  step.first = at::zeros({total}, l.device(device));
  cache_->set_step(std::move(step));
  RaggedBatch batch;
  batch.input_ids = ids.to(device);
  batch.positions = cache_->step().last;
  batch.logit_rows = at::tensor(logit_rows, l).to(device);
  at::Tensor logits;
  {
    const kernels::BatchInvariant invariant(options_.batch_invariant);
    logits = backend_.forward_ragged(batch, *cache_);  // [K, vocab]
  }
  ++steps_;
  tokens_ += total;

  for (Live* r : in_step) {
    r->computed += r->planned;
    r->planned = 0;
    const int64_t full = r->computed / bs;
    if (options_.prefix_sharing) {
      for (int64_t i = r->published; i < full; ++i) {
        pool_.publish(r->tokens, i, r->blocks[static_cast<size_t>(i)]);
      }
    }
    r->published = std::max(r->published, full);
  }
  for (size_t k = 0; k < deciding.size(); ++k) {
    decide(*deciding[k], logits.narrow(0, static_cast<int64_t>(k), 1), done);
  }
  drop_running([&](const Live& r) {
    return std::any_of(done.begin(), done.end(), [&](const CoreResult& c) { return c.id == r.id; });
  });
  return done;
}

std::vector<CoreResult> BatchScheduler::fail_all(const std::string& error) {
  std::vector<CoreResult> done;
  for (auto& r : running_) done.push_back(finish(*r, "failed", error));
  for (auto& r : waiting_) done.push_back(finish(*r, "failed", error));
  running_.clear();
  waiting_.clear();
  return done;
}

nlohmann::json BatchScheduler::stats() const {
  return {{"steps", steps_},
          {"tokens", tokens_},
          {"decode_tokens", decode_tokens_},
          {"prefill_tokens", prefill_tokens_},
          {"running", running()},
          {"waiting", waiting()},
          {"finished", finished_},
          {"blocks",
           {{"total", pool_.blocks()},
            {"block_size", pool_.block_size()},
            {"in_use", pool_.in_use()},
            {"peak_in_use", peak_in_use_},
            {"cached", pool_.cached()}}},
          {"prefix_hits", pool_.hits()},
          {"reused_tokens", pool_.tokens_reused()},
          {"copy_on_write", cow_copies_},
          {"preemptions", preemptions_},
          {"policy", policy_->name()},
          {"batch_invariant", options_.batch_invariant}};
}

}  // namespace gengraph

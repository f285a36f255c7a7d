// The decoding parts, a public header (<gengraph/extension.h> includes it): the base classes a
// logits processor, a stopping criterion, a search strategy and a candidate generator (speculative
// decoding) derive from. Each kind is registered by name (<gengraph/ext/registry.h>) and selected
// from YAML like gengraph's own; docs/extending.md walks through each. Every part reads the token
// history (<gengraph/ext/token_history.h>) through its helpers, so that one implementation serves
// both the host loop and the whole step on the device.
#pragma once

#include <ATen/Tensor.h>
#include <gengraph/error.h>
#include <gengraph/ext/token_history.h>
#include <gengraph/generation.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gengraph {

// A logits processor rewrites next-token scores. The chain of processors is itself a processor,
// and can time each member.
class LogitsProcessor {
 public:
  virtual ~LogitsProcessor() = default;
  virtual std::string name() const = 0;
  // scores: [rows, vocab] float32 -> [rows, vocab] float32 (may be modified in place)
  virtual at::Tensor process(const TokenHistory& seqs, at::Tensor scores) const = 0;
  // "" when process() neither reads a value back to the host nor changes its shapes from step to
  // step with the length on the device (token_history.h), so that the whole decoding step may run
  // inside a CUDA graph (docs/architecture.md#the-whole-step-on-the-device); otherwise why not. A
  // processor that does not say is taken to be unable.
  virtual std::string whole_step_blocker() const;
};

class ProcessorChain final : public LogitsProcessor {
 public:
  // A member built here or handed in by the caller (shared: the caller may keep it).
  void add(std::shared_ptr<LogitsProcessor> p) { members_.push_back(std::move(p)); }
  void insert(size_t index, std::shared_ptr<LogitsProcessor> p) {
    members_.insert(members_.begin() + static_cast<std::ptrdiff_t>(index), std::move(p));
  }
  std::string name() const override;
  at::Tensor process(const TokenHistory& seqs, at::Tensor scores) const override;
  std::string whole_step_blocker() const override;  // the first member's
  bool empty() const { return members_.empty(); }
  size_t size() const { return members_.size(); }
  const LogitsProcessor& at(size_t i) const { return *members_.at(i); }

  // When enabled, each member's wall time is accumulated (seconds) in member order.
  void enable_timing(bool on) {
    timing_ = on;
    seconds_.assign(members_.size(), 0.0);
  }
  const std::vector<double>& member_seconds() const { return seconds_; }

 private:
  std::vector<std::shared_ptr<LogitsProcessor>> members_;
  bool timing_ = false;
  mutable std::vector<double> seconds_;
};

// A stopping criterion says, per row, whether that row is done after the token just appended.
class StoppingCriterion {
 public:
  virtual ~StoppingCriterion() = default;
  virtual std::string name() const = 0;
  // -> [rows] bool
  virtual at::Tensor should_stop(const TokenHistory& seqs) const = 0;
  // The same answer for every row, known on the host without device work (max_length from a
  // length the host knows, max_time from the clock), or nullopt. StoppingCriteria then skips the
  // member's tensor: fewer operators for the host loop to issue.
  virtual std::optional<bool> decided_on_host(const TokenHistory&) const { return std::nullopt; }
  // As LogitsProcessor::whole_step_blocker: "" when should_stop() reads no value back to the host
  // and keeps its shapes with the length on the device (token_history.h).
  virtual std::string whole_step_blocker() const;
};

// A generation's criteria together: a row stops when any of them says so.
class StoppingCriteria {
 public:
  void add(std::shared_ptr<StoppingCriterion> c) { members_.push_back(std::move(c)); }
  // -> [rows] bool: any member says stop
  at::Tensor should_stop(const TokenHistory& seqs) const;
  bool has(const std::string& name) const;
  std::string whole_step_blocker() const;  // the first member's
  size_t size() const { return members_.size(); }

 private:
  std::vector<std::shared_ptr<StoppingCriterion>> members_;
};

// What a search strategy's step decides. The tensors may be the strategy's own state: the loop
// reads or copies them before the next step.
struct StepDecision {
  at::Tensor next_tokens;  // [rows] int64, already written into the sequences
  at::Tensor parent_rows;  // [rows] int64, or undefined when the strategy never reorders rows
  // [] bool: a further step can still change what finalize() returns. The host loop reads it
  // after every step, the whole step every sync_every steps.
  at::Tensor running;
  // [rows] bool: which of next_tokens belong to their row's output (false for the padding a
  // finished row receives), and which rows go on after them (false: that token was the row's
  // last). Set by strategies that stream (streams()), in the host loop (the only one that
  // streams); undefined otherwise.
  at::Tensor emitted, continues;
  // [rows] float32: each token's score (its log-probability), when the strategy scores tokens.
  at::Tensor token_scores;
  // With top_logprobs = k > 0 (top_logprobs()): each row's k most likely tokens, [rows, k] int64,
  // and their log-probabilities, [rows, k] float32, best first; undefined otherwise.
  at::Tensor top_tokens, top_logprobs;
};

// A search strategy turns next-token logits into the next tokens of every row, and at the end into
// the returned sequences. It never sees a backend; the loop moves tensors between the two.
class SearchStrategy {
 public:
  virtual ~SearchStrategy() = default;
  virtual std::string name() const = 0;
  // Rows per input prompt (num_beams for beam strategies).
  virtual int64_t rows_per_input() const { return 1; }
  // True when every chosen token is final as soon as it is chosen, so it can be streamed
  // (StepDecision::emitted says which are output). Beam strategies are not.
  virtual bool streams() const { return false; }
  // True when it was built to score its tokens (output_scores): finalize() then fills
  // Sequence::token_scores and score. A strategy that cannot is refused with output_scores.
  virtual bool scores_tokens() const { return false; }
  // k > 0 when it was built to give each token's k most likely alternatives (the setting
  // top_logprobs): StepDecision::top_tokens and top_logprobs, Sequence::top_logprobs. A strategy
  // that does not give as many as the setting asks for is refused with it.
  virtual int64_t top_logprobs() const { return 0; }
  // Called once after the prompt is laid out, before the first step.
  virtual void begin(const TokenHistory& seqs) = 0;
  // logits: [rows, vocab] float32. Runs `processors` as the strategy requires, chooses the next
  // tokens, writes them into column `seqs.length` of `seqs.buffer` (reordering rows when it
  // changes parents), advances the length by one, and consults `stop`.
  //
  // One implementation serves both loops (token_history.h): the length is on the host in the host
  // loop and on the device in the whole step, and the helpers there do the least work each
  // allows. In the whole step the loop reads `running` only every few steps, so a step must have
  // fixed shapes, no host reads, state updated in place (keep(), refill()), and once `running`
  // is false it must change nothing finalize() returns.
  virtual StepDecision step(const at::Tensor& logits, const LogitsProcessor& processors,
                            TokenHistory& seqs, const StoppingCriteria& stop) = 0;
  // True when step() draws each row's token from the softmax of the processed scores (plain
  // multinomial sampling): speculative sampling may then choose the token by its own rule from
  // the same distribution, through step_choosing().
  virtual bool samples() const { return false; }
  // step() with the next token of every row chosen by `choose` ([rows, vocab] processed scores ->
  // [rows] int64) instead of by the strategy's own rule; the rest (scores, padding, stopping) as
  // step() does it. Called only when samples() is true.
  virtual StepDecision step_choosing(const at::Tensor& logits, const LogitsProcessor& processors,
                                     TokenHistory& seqs, const StoppingCriteria& stop,
                                     const std::function<at::Tensor(const at::Tensor&)>& choose) {
    (void)logits, (void)processors, (void)seqs, (void)stop, (void)choose;
    throw Error("internal: search strategy '" + name() + "' does not sample (samples() is false)");
  }
  // The returned sequences for each input, best first.
  virtual std::vector<std::vector<Sequence>> finalize(const TokenHistory& seqs) = 0;

  // "" when step() meets the whole step's conditions above, so that the step can run with the
  // length on the device and be captured as a CUDA graph; otherwise why not.
  virtual std::string whole_step_blocker() const {
    return "search strategy '" + name() +
           "' does not say it can run in a whole-step graph (SearchStrategy::whole_step_blocker)";
  }
};

// Strategies that extend every row independently (greedy, sampling): transformers' _sample loop.
// A finished row receives pad tokens from then on and its returned length stops growing. Derive
// and implement choose().
class RowwiseSearch : public SearchStrategy {
 public:
  // `score_tokens`: record each token's log-probability under the processed distribution
  // (output_scores). `top_logprobs` = k > 0: record each step's k most likely tokens under that
  // distribution (log_softmax, then at::topk), and each token's log-probability with them.
  explicit RowwiseSearch(std::optional<int64_t> pad_token_id, bool score_tokens = false,
                         int64_t top_logprobs = 0)
      : pad_token_id_(pad_token_id),
        score_tokens_(score_tokens || top_logprobs > 0),
        top_k_(top_logprobs) {}
  bool streams() const override { return true; }
  bool scores_tokens() const override { return score_tokens_; }
  int64_t top_logprobs() const override { return top_k_; }
  void begin(const TokenHistory& seqs) override;
  StepDecision step(const at::Tensor& logits, const LogitsProcessor& processors, TokenHistory& seqs,
                    const StoppingCriteria& stop) override;
  StepDecision step_choosing(const at::Tensor& logits, const LogitsProcessor& processors,
                             TokenHistory& seqs, const StoppingCriteria& stop,
                             const std::function<at::Tensor(const at::Tensor&)>& choose) override;
  std::vector<std::vector<Sequence>> finalize(const TokenHistory& seqs) override;

 protected:
  // scores: [rows, vocab] float32, processed -> [rows] int64. A strategy whose choice reads
  // nothing back to the host and keeps its shapes overrides whole_step_blocker() with "".
  virtual at::Tensor choose(const at::Tensor& scores) = 0;

 private:
  // The step after the choice: scores, padding, the column written, stopping.
  StepDecision advance(const at::Tensor& scores, at::Tensor next, TokenHistory& seqs,
                       const StoppingCriteria& stop);
  std::optional<int64_t> pad_token_id_;
  bool score_tokens_ = false;
  int64_t top_k_ = 0;        // top_logprobs
  at::Tensor unfinished_;    // [rows] bool
  at::Tensor lengths_;       // [rows] int64, generated tokens counted while unfinished
  at::Tensor token_scores_;  // [rows, capacity] float32 (score_tokens_): by the token's column
  // top_k_ > 0: [rows, capacity, k] int64 and float32, each step's alternatives by its column.
  at::Tensor top_tokens_, top_logprobs_;
};

// Speculative decoding's proposers: a candidate generator guesses the tokens that follow a row,
// the target model scores the guesses in one forward (ForwardBackend::verify), and the search
// strategy keeps the longest prefix it would have chosen itself. For greedy search, and for
// sampling from candidates without a distribution, candidates change only how fast tokens come,
// never which: a wrong guess costs a wasted position of the verify forward. Sampling from a
// draft's distribution (propose_sampled) keeps the output's distribution, not its draws. The
// built-in `prompt_lookup` is enabled by transformers' prompt_lookup_num_tokens; a registered one
// is chosen with `candidate_generator: {name: ...}`.
class CandidateGenerator {
 public:
  virtual ~CandidateGenerator() = default;
  virtual std::string name() const = 0;
  // Called once per generation, before the first proposal.
  virtual void begin() {}
  // Up to `max` tokens to follow `history` (the row's tokens so far, prompt included, no
  // padding), best guess first; none is a plain step. `allowed(candidates)` says how many leading
  // candidates the generation's logits processors allow (transformers' prompt lookup drops a
  // candidate they ban, and the ones after it).
  virtual std::vector<int64_t> propose(
      const std::vector<int64_t>& history, int64_t max,
      const std::function<size_t(const std::vector<int64_t>&)>& allowed) = 0;
  // Sampling (do_sample). A generator that draws its candidates from a distribution of its own
  // returns them and sets `probabilities` to each one's distribution, [candidates, vocab] float32
  // rows that sum to 1. The target then keeps or replaces each candidate by speculative sampling's
  // rule (docs/decoding.md#speculative-sampling), which leaves the output distributed as plain
  // sampling's. `process(drafted, logits)` applies the generation's logits processors and warpers
  // to a [1, vocab] float32 row of logits that follows the history and the candidates `drafted`
  // so far: the draft's distribution should be taken through them, as transformers' assistant
  // does. The default proposes as propose() does and leaves `probabilities` undefined: then a
  // candidate is kept only when the target's own draw at its position equals it (transformers'
  // rule for prompt lookup), which gives plain sampling's tokens for a seed.
  using Process =
      std::function<at::Tensor(const std::vector<int64_t>& drafted, const at::Tensor& logits)>;
  virtual std::vector<int64_t> propose_sampled(
      const std::vector<int64_t>& history, int64_t max,
      const std::function<size_t(const std::vector<int64_t>&)>& allowed, const Process& process,
      at::Tensor& probabilities) {
    (void)process;
    probabilities = at::Tensor();
    return propose(history, max, allowed);
  }
  // After the verify forward: `proposed` candidates, of which the first `accepted` were kept.
  virtual void update(int64_t proposed, int64_t accepted) {
    (void)proposed;
    (void)accepted;
  }
};

}  // namespace gengraph

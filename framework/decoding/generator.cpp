#include "framework/decoding/generator.h"

#include <ATen/ATen.h>

#include <chrono>

#include "framework/model/causal_lm.h"
#include "framework/model/memory.h"
#include "framework/util/clock.h"
#include "framework/util/error.h"
#include "framework/util/step_graph.h"

namespace gengraph {
namespace {

// Hands the step's output tokens to `stream`, row r being sequence r % per_input of input
// r / per_input (rows are laid out input by input).
void emit(const TokenStream& stream, const StepDecision& d, int64_t per_input, int64_t step) {
  const at::Tensor tokens = d.next_tokens.to(at::kCPU).contiguous();
  // A streaming strategy that leaves `emitted` unset outputs every row's token.
  const at::Tensor emitted = d.emitted.defined() ? d.emitted.to(at::kCPU).contiguous()
                                                 : at::ones({tokens.numel()}, at::kBool);
  const int64_t* t = tokens.data_ptr<int64_t>();
  const bool* e = emitted.data_ptr<bool>();
  for (int64_t r = 0; r < tokens.numel(); ++r) {
    if (e[r]) stream(StreamedToken{r / per_input, r % per_input, t[r], step});
  }
}

// NaN in the prompts' logits: weights that are finite (the load checks that) but whose forward
// overflows, as a checkpoint from a diverged run or random weights drawn too wide do. Search over
// NaN gives garbage without a word ([0] tokens, -nan scores); one read per generation says so.
at::Tensor checked_prompt_logits(at::Tensor logits) {
  if (at::isnan(logits).any().item<bool>()) {
    throw Error(
        "the model's logits for the prompts hold NaN values: its weights are finite but its "
        "forward overflows (a checkpoint from a diverged run, or random weights drawn too wide: "
        "a large initializer_range); the generated tokens would be garbage");
  }
  return logits;
}

}  // namespace

// Everything a whole-step generation's graph reads and writes, kept for the next generation of
// the same shape on the same backend: its graph then replays from the first decode step on.
struct Generator::WholeStepState {
  const ForwardBackend* backend = nullptr;
  StaticDecode* static_decode = nullptr;
  int64_t rows = 0, max_length = 0, prompt_length = 0;
  Pipeline pipe;
  Sequences seqs;
  // [] bool: after the last decision; [] int64: decisions made after it had become true (the
  // graph runs on between reads of the flag), which do not count as steps.
  at::Tensor done, dead_steps;
  StaticDecodeBuffers buffers;  // the backend's, as the graph was captured over them
  std::unique_ptr<StepGraph> graph;
  bool reuses(ForwardBackend& b, int64_t r, int64_t len, int64_t prompt) const {
    if (&b != backend || r != rows || len != max_length || prompt != prompt_length) return false;
    StaticDecode* sd = b.static_decode();
    if (sd != static_decode) return false;
    const StaticDecodeBuffers now = sd->buffers();
    return now.ids.data_ptr() == buffers.ids.data_ptr() &&
           now.positions.data_ptr() == buffers.positions.data_ptr() &&
           now.slot.data_ptr() == buffers.slot.data_ptr() &&
           now.parents.data_ptr() == buffers.parents.data_ptr() &&
           now.logits.data_ptr() == buffers.logits.data_ptr();
  }
};

Generator::Generator(const Generator& other)
    : config_(other.config_), sync_(other.sync_), loop_(other.loop_) {}

Generator::~Generator() = default;
Generator::Generator(Generator&&) noexcept = default;

Generator::WholeStepState& Generator::whole_step_state(ForwardBackend& backend, Pipeline pipe,
                                                       int64_t rows, int64_t max_length,
                                                       int64_t prompt_length) const {
  if (whole_ && whole_->reuses(backend, rows, max_length, prompt_length)) return *whole_;
  whole_.reset();  // its graph and buffers first
  auto w = std::make_unique<WholeStepState>();
  w->backend = &backend;
  w->static_decode = backend.static_decode();
  w->rows = rows;
  w->max_length = max_length;
  w->prompt_length = prompt_length;
  w->pipe = std::move(pipe);
  const auto l = at::TensorOptions().dtype(at::kLong).device(backend.model().device());
  w->seqs = Sequences{at::empty({rows, max_length}, l),
                      at::empty({rows, prompt_length}, l.dtype(at::kBool)), prompt_length,
                      at::zeros({}, l)};
  w->done = at::zeros({}, l.dtype(at::kBool));
  w->dead_steps = at::zeros({}, l);
  w->buffers = w->static_decode->buffers();
  whole_ = std::move(w);
  return *whole_;
}

Generator::Generator(GenerationConfig config, std::function<void()> sync, LoopOptions loop)
    : config_(std::move(config)), sync_(std::move(sync)), loop_(loop) {
  config_.validate();
  if (loop_.sync_every < 1) {
    throw Error("loop option sync_every: expected an integer >= 1, found " +
                std::to_string(loop_.sync_every));
  }
}

int64_t check_prompts(const ModelConfig& mc, const GenerationConfig& g,
                      const std::vector<std::vector<int64_t>>& prompts) {
  g.validate_for_vocab(mc.vocab_size);
  if (prompts.empty()) throw Error("generate: no input prompts");
  int64_t prompt_len = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) throw Error("input " + std::to_string(i) + ": empty prompt");
    for (size_t j = 0; j < prompts[i].size(); ++j) {
      const int64_t id = prompts[i][j];
      if (id < 0 || id >= mc.vocab_size) {
        throw Error("input " + std::to_string(i) + " token " + std::to_string(j) + ": id " +
                    std::to_string(id) + " is outside the vocabulary [0, " +
                    std::to_string(mc.vocab_size) + ")");
      }
    }
    prompt_len = std::max<int64_t>(prompt_len, static_cast<int64_t>(prompts[i].size()));
  }
  const int64_t max_length = g.resolve_max_length(prompt_len, mc.max_positions);
  if (prompt_len >= mc.max_positions) {
    throw Error("the longest prompt has " + std::to_string(prompt_len) +
                " tokens but the model's context is " + std::to_string(mc.max_positions) +
                " positions (" + mc.source + ")");
  }
  if (max_length > mc.max_positions) {
    throw Error("the longest prompt (" + std::to_string(prompt_len) + " tokens) plus " +
                std::to_string(max_length - prompt_len) +
                " new tokens exceeds the model's context of " + std::to_string(mc.max_positions) +
                " positions (" + mc.source + ")");
  }

  return max_length;
}

GenerationResult Generator::generate(ForwardBackend& backend,
                                     const std::vector<std::vector<int64_t>>& prompts,
                                     const TokenStream& stream) const {
  const CausalLM& model = backend.model();
  const auto& mc = model.config();
  int64_t prompt_len = 0;
  for (const auto& p : prompts)
    prompt_len = std::max<int64_t>(prompt_len, static_cast<int64_t>(p.size()));
  const int64_t max_length = check_prompts(mc, config_, prompts);

  Pipeline pipe = build_pipeline(config_, PipelineShape{max_length, prompt_len, mc.vocab_size});
  const int64_t batch = static_cast<int64_t>(prompts.size());
  const int64_t per_input = pipe.strategy->rows_per_input();
  const int64_t rows = batch * per_input;
  // What this call will hold (KV cache, the prefill's masks and activations, a decode step, the
  // search's state), before any of it is allocated; the weights are resident already.
  GenerationShape shape;
  shape.inputs = static_cast<double>(batch);
  shape.rows_per_input = static_cast<double>(per_input);
  shape.prompt_length = static_cast<double>(prompt_len);
  shape.max_length = static_cast<double>(max_length);
  shape.beam_search = config_.num_beams > 1;
  shape.shared_prefill = backend.shares_prefill();
  const BackendReport report = backend.report();
  const auto static_cache = report.find("static_cache");
  shape.static_cache =
      backend.name() != "eager" || (static_cache != report.end() && static_cache->second != 0.0);
  const MemoryEstimate need = estimate_generation_memory(mc, model.dtype(), shape);
  const std::string what = "generating " + std::to_string(rows) + " rows (" +
                           std::to_string(batch) + " prompts x " + std::to_string(per_input) +
                           ") of " + std::to_string(max_length) + " positions";
  const std::string advice =
      "use fewer or shorter prompts, a smaller num_beams or num_return_sequences, or fewer new "
      "tokens (max_new_tokens)";
  check_memory(what + " (" + need.breakdown() + ")", need.total(), model.device(), advice);
  // An allocation that fails all the same is reported with the estimate, not LibTorch's text.
  return with_allocation_errors(what, need.total(), model.device(), advice, [&] {
    return run_checked(backend, prompts, stream, std::move(pipe), prompt_len, max_length);
  });
}

GenerationResult Generator::run_checked(ForwardBackend& backend,
                                        const std::vector<std::vector<int64_t>>& prompts,
                                        const TokenStream& stream, Pipeline pipe,
                                        int64_t prompt_len, int64_t max_length) const {
  const CausalLM& model = backend.model();
  const int64_t batch = static_cast<int64_t>(prompts.size());
  const int64_t per_input = pipe.strategy->rows_per_input();
  const int64_t rows = batch * per_input;
  const int64_t pad = effective_pad_token(config_);
  if (stream && !pipe.strategy->streams()) {
    throw Error("streaming: the '" + pipe.strategy->name() +
                "' strategy chooses its sequences only when it finishes, so its tokens cannot be "
                "streamed; stream with greedy search or sampling");
  }

  // Left padding, laid out on the CPU and moved once.
  at::Tensor ids = at::full({batch, prompt_len}, pad, at::kLong);
  at::Tensor valid = at::zeros({batch, prompt_len}, at::kBool);
  for (int64_t i = 0; i < batch; ++i) {
    const int64_t n = static_cast<int64_t>(prompts[i].size());
    ids[i].narrow(0, prompt_len - n, n).copy_(at::tensor(prompts[i], at::kLong));
    valid[i].narrow(0, prompt_len - n, n).fill_(true);
  }
  const auto device = model.device();
  // One row per input for the prefill (its rows share the prompt); per_input rows each after it.
  const at::Tensor input_ids = ids.to(device), input_valid = valid.to(device);
  // Position ids as transformers 5 computes them from the attention mask (padding gets 0).
  const at::Tensor input_positions =
      input_valid.to(at::kLong).cumsum(1).sub_(1).masked_fill_(input_valid.logical_not(), 0);
  ids = input_ids.repeat_interleave(per_input, 0);
  valid = input_valid.repeat_interleave(per_input, 0);
  const at::Tensor positions = input_positions.repeat_interleave(per_input, 0);

  backend.prepare(BatchShape{rows, max_length});
  GenerationResult result;
  result.prompt_length = prompt_len;
  result.rows = rows;
  if (loop_.whole_step != LoopOptions::WholeStep::kOff) {
    std::string why = whole_step_blocker(pipe, backend, static_cast<bool>(stream), loop_);
    if (why.empty()) {
      WholeStepState& w = whole_step_state(backend, std::move(pipe), rows, max_length, prompt_len);
      // The static form: a [rows, max_length] buffer that the steps write in place.
      w.seqs.tokens.narrow(1, 0, prompt_len).copy_(ids);
      w.seqs.tokens.narrow(1, prompt_len, max_length - prompt_len).fill_(pad);
      w.seqs.prompt_valid.copy_(valid);
      w.seqs.written.fill_(prompt_len);
      w.pipe.strategy->begin(w.seqs);
      const auto t0 = Clock::now();
      const at::Tensor logits = checked_prompt_logits(
          backend.prefill(StepInputs{input_ids, input_positions, input_valid, {}, per_input})
              .to(at::kFloat));
      run_whole_step(backend, w, logits, positions.select(1, prompt_len - 1).unsqueeze(1),
                     max_length - prompt_len, t0, result);
      fold_outputs(w.pipe.strategy->finalize(w.seqs), batch, result);
      return result;
    }
    if (loop_.whole_step == LoopOptions::WholeStep::kOn) {
      throw Error("loop option whole_step: on, but the whole step cannot run: " + why);
    }
    result.loop.fallback = why;
  }

  Sequences seqs{ids, valid, prompt_len, {}};
  pipe.strategy->begin(seqs);
  const auto t0 = Clock::now();
  at::Tensor logits = checked_prompt_logits(
      backend.prefill(StepInputs{input_ids, input_positions, input_valid, {}, per_input})
          .to(at::kFloat));
  at::Tensor last_pos = positions.select(1, prompt_len - 1).unsqueeze(1);  // [rows, 1]
  const at::Tensor one_valid = at::ones({rows, 1}, valid.options());
  for (int64_t step = 0;; ++step) {
    const StepDecision d = pipe.strategy->step(logits, pipe.processors, seqs, pipe.stopping);
    result.timing.steps = step + 1;
    if (stream) emit(stream, d, per_input, step);
    if (step == 0) {
      if (sync_) sync_();
      result.timing.time_to_first_token_s = since(t0);
    }
    if (d.done) break;
    if (d.parent_rows.defined()) last_pos = last_pos.index_select(0, d.parent_rows);
    last_pos = last_pos + 1;
    logits =
        backend.decode(StepInputs{d.next_tokens.unsqueeze(1), last_pos, one_valid, d.parent_rows})
            .to(at::kFloat);
  }
  if (sync_) sync_();
  result.timing.total_s = since(t0);
  result.loop.steps_run = result.timing.steps;
  fold_outputs(pipe.strategy->finalize(seqs), batch, result);
  return result;
}

void Generator::fold_outputs(std::vector<std::vector<Hypothesis>> per_row, int64_t batch,
                             GenerationResult& result) {
  // Strategies return one list per row group; fold rows back to inputs.
  result.outputs.resize(batch);
  for (int64_t i = 0; i < batch; ++i) {
    for (int64_t k = 0; k < static_cast<int64_t>(per_row.size()) / batch; ++k) {
      auto& src = per_row[i * (per_row.size() / batch) + k];
      result.outputs[i].insert(result.outputs[i].end(), src.begin(), src.end());
    }
  }
}

void Generator::run_whole_step(ForwardBackend& backend, WholeStepState& w,
                               const at::Tensor& first_logits, const at::Tensor& last_positions,
                               int64_t max_steps, Clock::time_point t0,
                               GenerationResult& result) const {
  StaticDecode& sd = *w.static_decode;
  Pipeline& pipe = w.pipe;
  Sequences& seqs = w.seqs;
  sd.start();
  const StaticDecodeBuffers& buf = w.buffers;
  buf.positions.copy_(last_positions);
  const bool reorder = pipe.strategy->reorders_rows();
  const at::Tensor& done = w.done;
  const at::Tensor& dead_steps = w.dead_steps;
  done.zero_();
  dead_steps.zero_();
  // One decision: the strategy's device step, then its tokens into the backend's input buffers.
  const auto decide = [&](const at::Tensor& logits) {
    dead_steps.add_(done);
    const DeviceDecision d =
        pipe.strategy->device_step(logits, pipe.processors, seqs, pipe.stopping);
    buf.ids.copy_(d.next_tokens.unsqueeze(1));
    if (reorder) {
      buf.parents.copy_(d.parent_rows);
      buf.positions.copy_(buf.positions.index_select(0, d.parent_rows) + 1);
    } else {
      buf.positions.add_(1);
    }
    done.copy_(d.done);
  };
  const auto step = [&] {
    sd.run(reorder);
    buf.slot.add_(1);
    decide(buf.logits.to(at::kFloat));
  };
  const auto read_done = [&] {
    ++result.loop.flag_reads;
    return done.item<bool>();
  };

  decide(first_logits);
  if (sync_) sync_();
  result.timing.time_to_first_token_s = since(t0);
  result.loop.whole_step = true;
  int64_t run = 1;
  for (; run < max_steps; ++run) {
    if ((run == 1 || run % loop_.sync_every == 0) && read_done()) break;
    // In the first generation of a shape the first decode step runs uncaptured (it creates what
    // the parts make on first use), the graph records the second and replays from then on; later
    // generations of the shape replay it from the first decode step.
    if (loop_.capture && (run >= 2 || w.graph)) {
      if (!w.graph) {
        const auto c0 = Clock::now();
        auto graph = std::make_unique<StepGraph>(backend.model().device());
        graph->capture(step);
        w.graph = std::move(graph);
        result.loop.capture_s = since(c0);
      }
      result.loop.captured = true;
      w.graph->replay();
    } else {
      step();
    }
  }
  if (sync_) sync_();
  result.timing.total_s = since(t0);
  result.loop.steps_run = run;
  result.timing.steps = run - dead_steps.item<int64_t>();  // run decisions were made
}

}  // namespace gengraph

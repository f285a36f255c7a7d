#include "framework/decoding/generator.h"

#include <ATen/ATen.h>

#include "framework/model/causal_lm.h"
#include "framework/model/memory.h"
#include "framework/util/error.h"

namespace gengraph {
namespace {

// Strategies return one list per row group; fold rows back to inputs.
void fold_outputs(std::vector<std::vector<Sequence>> per_row, int64_t batch, Generation& result) {
  result.outputs.resize(batch);
  for (int64_t i = 0; i < batch; ++i) {
    for (int64_t k = 0; k < static_cast<int64_t>(per_row.size()) / batch; ++k) {
      auto& src = per_row[i * (per_row.size() / batch) + k];
      result.outputs[i].insert(result.outputs[i].end(), src.begin(), src.end());
    }
  }
}

}  // namespace

Generator::Generator(const Generator& other)
    : config_(other.config_),
      settings_(other.settings_),
      sync_(other.sync_),
      loop_(other.loop_) {}  // none of its loop

Generator::~Generator() = default;
Generator::Generator(Generator&&) noexcept = default;

Generator::Generator(GenerationConfig config, std::function<void()> sync, LoopOptions loop)
    : config_(std::move(config)), sync_(std::move(sync)), loop_(loop) {
  config_.validate();
  settings_ = config_.to_json();
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

Generation within_memory(const ForwardBackend& backend, const GenerationConfig& config,
                         int64_t inputs, int64_t rows_per_input, int64_t prompt_length,
                         int64_t max_length, const std::function<Generation()>& work) {
  const CausalLM& model = backend.model();
  // What the call will hold (KV cache, the prefill's masks and activations, a decode step, the
  // search's state), before any of it is allocated; the weights are resident already.
  GenerationShape shape;
  shape.inputs = static_cast<double>(inputs);
  shape.rows_per_input = static_cast<double>(rows_per_input);
  shape.prompt_length = static_cast<double>(prompt_length);
  shape.max_length = static_cast<double>(max_length);
  shape.beam_search = config.num_beams > 1;
  shape.shared_prefill = backend.shares_prefill();
  const BackendReport report = backend.report();
  const auto static_cache = report.find("static_cache");
  shape.static_cache =
      backend.name() != "eager" || (static_cache != report.end() && static_cache->second != 0.0);
  const MemoryEstimate need = estimate_generation_memory(model.config(), model.dtype(), shape);
  const std::string what = "generating " + std::to_string(inputs * rows_per_input) + " rows (" +
                           std::to_string(inputs) + " prompts x " + std::to_string(rows_per_input) +
                           ") of " + std::to_string(max_length) + " positions";
  const std::string advice =
      "use fewer or shorter prompts, a smaller num_beams or num_return_sequences, or fewer new "
      "tokens (max_new_tokens)";
  check_memory(what + " (" + need.breakdown() + ")", need.total(), model.device(), advice);
  // An allocation that fails all the same is reported with the estimate, not LibTorch's text.
  return with_allocation_errors(what, need.total(), model.device(), advice, work);
}

Generation Generator::generate(ForwardBackend& backend,
                               const std::vector<std::vector<int64_t>>& prompts,
                               const TokenStream& stream) {
  const ModelConfig& mc = backend.model().config();
  int64_t prompt_len = 0;
  for (const auto& p : prompts)
    prompt_len = std::max<int64_t>(prompt_len, static_cast<int64_t>(p.size()));
  const int64_t max_length = check_prompts(mc, config_, prompts);
  Pipeline pipe = build_pipeline(config_, max_length, prompt_len, mc.vocab_size, &backend.model());
  const int64_t per_input = pipe.strategy->rows_per_input();
  return within_memory(backend, config_, static_cast<int64_t>(prompts.size()), per_input,
                       prompt_len, max_length, [&] {
                         return run_checked(backend, prompts, stream, std::move(pipe), prompt_len,
                                            max_length);
                       });
}

Generation Generator::run_checked(ForwardBackend& backend,
                                  const std::vector<std::vector<int64_t>>& prompts,
                                  const TokenStream& stream, Pipeline pipe, int64_t prompt_len,
                                  int64_t max_length) {
  const int64_t batch = static_cast<int64_t>(prompts.size());
  const int64_t rows = batch * pipe.strategy->rows_per_input();
  if (stream && !pipe.strategy->streams()) {
    throw Error("streaming: the '" + pipe.strategy->name() +
                "' strategy chooses its sequences only when it finishes, so its tokens cannot be "
                "streamed; stream with greedy search or sampling");
  }
  if (config_.output_scores && !pipe.strategy->scores_tokens()) {
    throw Error("output_scores: the '" + pipe.strategy->name() +
                "' strategy does not score its tokens (SearchStrategy::scores_tokens); the "
                "built-in greedy search, sampling, beam search and beam sampling do");
  }
  if (pipe.candidates) {
    const std::string what = "speculative decoding ('" + pipe.candidates->name() + "' candidates)";
    if (rows != 1) {
      throw Error(what + " verifies one sequence at a time, as transformers' assisted generation " +
                  "does: found " + std::to_string(batch) + " prompt(s) x " +
                  std::to_string(rows / batch) + " sequence(s); generate each prompt alone");
    }
    if (!pipe.strategy->streams()) {
      throw Error(what + ": the '" + pipe.strategy->name() +
                  "' strategy does not choose each token for good as it goes "
                  "(SearchStrategy::streams), so candidates cannot be checked position by "
                  "position; use greedy search or sampling");
    }
  }
  backend.prepare(rows, max_length);
  Generation result;
  result.settings = settings_;
  result.prompt_length = prompt_len;
  result.rows = rows;
  bool whole = false;
  if (loop_.whole_step != LoopOptions::WholeStep::kOff) {
    const std::string why = whole_step_blocker(pipe, backend, static_cast<bool>(stream), loop_);
    if (why.empty()) {
      whole = true;
    } else if (loop_.whole_step == LoopOptions::WholeStep::kOn) {
      throw Error("loop option whole_step: on, but the whole step cannot run: " + why);
    } else {
      result.whole_step_fallback = why;
    }
  }
  // The whole step keeps its loop (and graph) for the next generation of the same shape; the
  // host loop starts afresh each time.
  if (!whole || !serves(backend, rows, max_length, prompt_len)) {
    set_up(backend, std::move(pipe), rows, max_length, prompt_len, whole);
  }
  if (pipe_.candidates) {
    run_speculative(prompts.front(), effective_pad_token(config_), stream, result);
  } else {
    run_loop(prompts, effective_pad_token(config_), stream, result);
  }
  fold_outputs(pipe_.strategy->finalize(seqs_), batch, result);
  if (!whole) forget();  // the host loop keeps nothing
  return result;
}

}  // namespace gengraph

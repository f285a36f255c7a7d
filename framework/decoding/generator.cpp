#include "framework/decoding/generator.h"

#include <ATen/ATen.h>

#include "framework/model/causal_lm.h"
#include "framework/model/memory.h"
#include "framework/util/error.h"
#include "framework/util/progress.h"

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

Generator::Generator(ResolvedSettings config, std::function<void()> sync, LoopOptions loop)
    : config_(std::move(config)), sync_(std::move(sync)), loop_(loop) {
  config_.validate();
  settings_ = config_.to_json();
  if (loop_.sync_every < 1) {
    throw Error("loop option sync_every: expected an integer >= 1, found " +
                std::to_string(loop_.sync_every));
  }
}

Generation Generator::generate(ForwardBackend& backend,
                               const std::vector<std::vector<int64_t>>& prompts,
                               const TokenStream& stream) {
  GenerationPlan plan = plan_generation(plan_target(backend), config_, prompts);
  return generate(backend, plan, prompts, stream);
}

Generation Generator::generate(ForwardBackend& backend, GenerationPlan& plan,
                               const std::vector<std::vector<int64_t>>& prompts,
                               const TokenStream& stream) {
  if (plan.settings != settings_) {
    throw Error("generate: the plan was made for other settings than this Generator's");
  }
  check_planned_prompts(plan, backend.model().config().vocab_size, prompts);
  // The plan's pipeline serves its first generation; a later one builds its own.
  Pipeline pipe = plan.pipeline
                      ? std::move(*plan.pipeline)
                      : build_pipeline(config_, plan.max_length, plan.prompt_length,
                                       backend.model().config().vocab_size, &backend.model());
  plan.pipeline.reset();
  // An allocation that fails all the same is reported with the plan's estimate, not LibTorch's
  // text.
  return with_allocation_errors(
      plan.memory_what, plan.memory.total(), backend.model().device(), kGenerationMemoryAdvice,
      [&] { return run_checked(backend, prompts, stream, std::move(pipe), plan); });
}

Generation Generator::run_checked(ForwardBackend& backend,
                                  const std::vector<std::vector<int64_t>>& prompts,
                                  const TokenStream& stream, Pipeline pipe,
                                  const GenerationPlan& plan) {
  const int64_t prompt_len = plan.prompt_length, max_length = plan.max_length;
  const int64_t batch = static_cast<int64_t>(prompts.size());
  const int64_t rows = batch * pipe.strategy->rows_per_input();
  if (stream && !pipe.strategy->streams()) {
    throw Error("streaming: the '" + pipe.strategy->name() +
                "' strategy chooses its sequences only when it finishes, so its tokens cannot be "
                "streamed; stream with greedy search or sampling");
  }
  backend.prepare(rows, max_length);
  loop_position().begin(prompt_len, max_length - prompt_len);  // for a progress display
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

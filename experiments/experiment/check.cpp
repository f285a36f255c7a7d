// check_runnable and check_experiment (runner.h): an experiment checked before any weight is read,
// through the same plan (framework/decoding/plan.h) a generation executes, made from the model's
// configuration instead of its loaded weights.
#include <algorithm>
#include <set>

#include "backends/register_builtin.h"
#include "experiments/experiment/load_runner.h"
#include "experiments/experiment/row_forms.h"
#include "experiments/experiment/runner.h"
#include "experiments/tools/peers.h"
#include "framework/backend/backend_registry.h"
#include "framework/decoding/generation_defaults.h"
#include "framework/decoding/plan.h"
#include "framework/model/gguf.h"
#include "framework/model/loader.h"
#include "framework/model/model_registry.h"
#include "framework/util/device.h"
#include "framework/util/error.h"
#include "framework/util/strings.h"

namespace gengraph {
namespace {

ModelSource model_source(const ExperimentConfig& c) {
  ModelSource src;
  src.preset = c.model.preset;
  src.path = c.model.path;
  src.config_overrides = c.model.config_overrides;
  src.seed = c.model.seed;
  return src;
}

// Every backend name and its options, where the backend can check them without a model.
void check_backends(const ExperimentConfig& c) {
  register_builtin_backends();
  for (const auto& b : c.backends) {
    try {
      // The device as written (parse_device would also demand that it exist here: validating a
      // CUDA experiment on a CPU machine is allowed).
      BackendRegistry::instance().validate(b.name, BackendOptions(b.name, b.options),
                                           c10::Device(c.model.device));
    } catch (const Error& e) {
      throw Error(c.file + ": backends: '" + b.label + "': " + e.what());
    }
    // A whole step that must be captured needs the model on CUDA; say so before any work.
    if (b.loop.whole_step == LoopOptions::WholeStep::kOn && b.loop.capture &&
        c.model.device.rfind("cuda", 0) != 0) {
      throw Error(c.file + ": backends: '" + b.label +
                  "': loop.whole_step: on with capture: true needs model.device: cuda (found " +
                  c.model.device + "); set loop.capture: false to run the whole step uncaptured");
    }
  }
  if (c.model.preset.empty() && !is_gguf_file(c.model.path)) {
    try {
      check_model_folder(c.model.path);
    } catch (const Error& e) {
      throw Error(c.file + ": model.path: " + e.what());
    }
  }
}

// The further forms of the model that rows ask for (`fused`, `model:`), each loaded beside the
// first: the checkpoint's weights again and its own projections (quantized or fused) besides
// them, counted as 1.5 times the weights (the most any format holds).
std::pair<size_t, double> further_forms(const ExperimentConfig& c, double weights) {
  std::set<std::string> forms{form_key(c.model)};
  double bytes = 0;
  for (const auto& b : c.backends) {
    if (forms.insert(form_key(row_model_spec(c, b))).second) bytes += 1.5 * weights;
  }
  return {forms.size() - 1, bytes};
}

}  // namespace

void check_runnable(const ExperimentConfig& c) {
  if (c.serve) {
    // A server: its backend and the model's configuration; requests bring the rest, each
    // checked as it comes.
    check_backends(c);
    (void)model_config_of(model_source(c));
    return;
  }
  if (c.load) {
    // Every system times tokens as they are chosen: strategies that choose sequences at the end
    // cannot run (the scheduler refuses them too).
    const auto beams = c.generation.find("num_beams");
    if (beams != c.generation.end() && beams->is_number_integer() && beams->get<int64_t>() > 1) {
      throw Error(c.file + ": generation.num_beams: expected 1 with load: (its systems stream " +
                  "each token as it is chosen: greedy search or sampling), found " + beams->dump());
    }
    // Its longest request, and its largest static batch, planned as any experiment's inputs.
    try {
      check_runnable(load_plan_config(c));
    } catch (const Error& e) {
      throw Error(std::string(e.what()) +
                  " (load: checked as its longest request, shared_prefix.length + "
                  "prompt_lengths.max prompt tokens and output_lengths.max new tokens, in a batch "
                  "of static_batch_max when static_batching runs)");
    }
    return;
  }
  check_backends(c);
  // The model's configuration (no weights): the preset and its overrides, and the prompts and
  // lengths against its vocabulary and context. Texts are checked once encoded, at run time.
  const ModelSource src = model_source(c);
  const ModelConfig mc = model_config_of(src);
  const auto in_file = [&](const Error& e) {
    const std::string what = e.what();
    return what.rfind(c.file, 0) == 0 ? Error(what) : Error(c.file + ": " + what);
  };
  // The plan of each generation exactly as `run` makes it, from the configuration: unknown
  // processors, stopping criteria or strategies, wrong parameter types and values, impossible
  // combinations and lengths fail here, in `validate` and `submit`, not in every task of a
  // submitted job. The longest prompt decides the lengths: a synthetic batch is planned as its
  // count of prompts of its length (one stands for them all), texts as one token each.
  PlanTarget target;
  ModelConfig sized = mc;  // in the form the rows use: the unfused form holds more activations
  sized.fused = c.model.fused;
  for (const auto& b : c.backends) {
    if (b.fused && !*b.fused) sized.fused = false;
  }
  target.config = &sized;
  target.source = src.preset.empty() ? src.path.string() : "preset:" + src.preset;
  target.dtype = parse_dtype(c.model.dtype);
  target.device = c10::Device(c.model.device);
  target.architecture = &ModelRegistry::instance().get(mc.model_type, mc.source);
  // Texts, and a prompt file's lines that are not all plain token ids (gengraph generate --prompts
  // plans each batch of them once encoded), are checked once encoded.
  const bool encoded_later =
      c.inputs.has_texts() || (c.inputs.prompt_file && c.inputs.prompts.empty());
  const auto prompts =
      encoded_later ? std::vector<std::vector<int64_t>>{std::vector<int64_t>(1, 0)}
      : c.inputs.synthetic
          ? std::vector<std::vector<int64_t>>{std::vector<int64_t>(c.inputs.prompt_length, 0)}
          : c.inputs.prompts;
  const int64_t inputs =
      encoded_later        ? std::max<int64_t>(1, c.inputs.texts.size() + c.inputs.messages.size())
      : c.inputs.synthetic ? c.inputs.batch_size
                           : static_cast<int64_t>(c.inputs.prompts.size());
  // The experiment's settings, planned for the largest cache any row lays out.
  GenerationPlan plan;
  try {
    if (src.preset.empty()) target.generation_defaults = read_generation_defaults(src.path);
    for (const auto& b : c.backends) {
      const CacheLayout row = cache_layout(b.name, b.options);
      target.cache.static_cache = target.cache.static_cache || row.static_cache;
      target.cache.shared_prefill = target.cache.shared_prefill && row.shared_prefill;
    }
    plan = plan_generation(target, c.generation, c.file + ": generation", prompts, inputs);
  } catch (const Error& e) {
    throw in_file(e);
  }
  // A peer that cannot honour a setting is refused here, not after gengraph's rows have run.
  for (const auto& peer : c.peers) {
    const std::string why = peer_refusal(peer.name, plan.config, c.model.device, c.model.dtype);
    if (!why.empty()) throw Error(c.file + ": peers: '" + peer.label + "' cannot run " + why);
  }
  // Each row with settings of its own (`generation:` over the experiment's), planned for its cache.
  const GenerationPlan* largest = &plan;
  std::vector<GenerationPlan> row_plans;
  row_plans.reserve(c.backends.size());
  for (const auto& b : c.backends) {
    if (b.generation.empty()) continue;
    try {
      PlanTarget row_target = target;
      row_target.cache = cache_layout(b.name, b.options);
      row_plans.push_back(
          plan_generation(row_target, row_generation(c, b), "generation", prompts, inputs));
    } catch (const Error& e) {
      throw Error(c.file + ": backends: '" + b.label + "': " + e.what());
    }
    if (row_plans.back().memory.total() > largest->memory.total()) largest = &row_plans.back();
  }
  if (encoded_later) return;  // their lengths are known once they are encoded
  // Before any load: the weights, the KV cache of every row (batch x beams or sequences), the
  // prefill (quadratic in the prompt), a decode step and the search's state, against what the
  // device (and this process's limits) have available. The largest need of any row counts.
  const MemoryEstimate& need = largest->memory;
  const auto [forms, further] = further_forms(c, need.weights);
  const std::string further_text =
      further > 0
          ? ", " + std::to_string(forms) + " further form(s) of the model " + human_bytes(further)
          : std::string();
  check_memory(c.file + ": this experiment (" + need.breakdown() + further_text + ")",
               need.total() + further, c10::Device(c.model.device),
               "lower inputs (batch_size or prompts), the prompt length, generation.num_beams / "
               "num_return_sequences, generation.max_new_tokens, or the model's size");
}

std::vector<std::pair<std::vector<std::string>, ExperimentConfig>> check_experiment(
    const ExperimentConfig& c) {
  auto points = expand_sweep(c);
  for (const auto& [overrides, pc] : points) {
    try {
      check_runnable(pc);
    } catch (const Error& e) {
      if (overrides.empty()) throw;
      throw Error("sweep point [" + join(overrides, ", ") + "]: " + e.what());
    }
  }
  return points;
}

}  // namespace gengraph

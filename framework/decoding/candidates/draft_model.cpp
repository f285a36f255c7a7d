#include "framework/decoding/candidates/draft_model.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>

#include "framework/backend/backend_registry.h"
#include "framework/model/causal_lm.h"
#include "framework/model/loader.h"
#include "framework/model/model_names.h"
#include "framework/model/model_registry.h"
#include "framework/quant/weight_format.h"
#include "framework/util/error.h"
#include "framework/util/strings.h"

namespace gengraph {
namespace {

// The draft's 'weights' parameter (float, int8, int4 or bfloat16), through the one weight-format
// parser, its errors naming the parameter.
WeightFormat draft_weight_format(const std::string& weights) {
  WeightFormatKeys keys;
  keys.weights = weights;
  WeightKeyNames names;
  names.name = [](std::string_view key) { return "'" + std::string(key) + "'"; };
  return parse_weight_format(keys, names);
}

std::string string_param(const nlohmann::json& p, const char* key, const std::string& fallback) {
  if (!p.contains(key)) return fallback;
  if (!p.at(key).is_string() || p.at(key).get<std::string>().empty()) {
    throw Error(std::string("'") + key + "': expected a non-empty string, found " +
                p.at(key).dump());
  }
  return p.at(key).get<std::string>();
}

// The draft, loaded once per (model, weights, dtype, device) and shared by every generation.
std::shared_ptr<const CausalLM> load_draft(const DraftModelOptions& o, const CausalLM& target) {
  static std::mutex mutex;
  static std::map<std::tuple<std::string, std::string, std::string, std::string>,
                  std::shared_ptr<const CausalLM>>
      loaded;
  const std::string dtype = c10::toString(target.dtype()), device = target.device().str();
  const std::lock_guard<std::mutex> lock(mutex);
  auto& slot = loaded[{o.model, o.weights, dtype, device}];
  if (slot) return slot;
  // The name as every boundary reads one (model_names.h); the draft's form is the target's.
  const ModelName name = resolve_model_name(o.model, "'model':");
  ModelSource src;
  src.preset = name.preset;
  src.path = name.folder;
  src.load.dtype = target.dtype();
  src.load.device = target.device();
  src.load.weights = draft_weight_format(o.weights);
  LoadedModel draft = load_model(src);
  const int64_t vocab = draft.model->config().vocab_size, want = target.config().vocab_size;
  if (vocab != want) {
    throw Error("'model': " + draft.source + " has a vocabulary of " + std::to_string(vocab) +
                " tokens, the model it drafts for " + std::to_string(want) +
                ": a draft must share the target's vocabulary");
  }
  slot = draft.model;
  return slot;
}

// The layer a checkpoint name belongs to: its first all-digit segment ("model.layers.3.mlp...",
// "transformer.h.3.ln_1.weight"), or -1 for the embeddings, the final norm and the head.
int64_t layer_of(const std::string& name) {
  size_t start = 0;
  while (start <= name.size()) {
    const size_t end = std::min(name.find('.', start), name.size());
    const std::string part = name.substr(start, end - start);
    if (!part.empty() && part.find_first_not_of("0123456789") == std::string::npos) {
      // A number too long for a layer index is past every layer.
      return part.size() > 9 ? std::numeric_limits<int64_t>::max() : std::stoll(part);
    }
    start = end + 1;
  }
  return -1;
}

// The backend, options, num_tokens and schedule parameters, shared by both parts.
void read_run_params(const nlohmann::json& p, DraftModelOptions& o) {
  o.backend = string_param(p, "backend", "eager");
  if (p.contains("options")) {
    const auto& opts = p.at("options");
    if (!opts.is_object()) throw Error("'options': expected a mapping, found " + opts.dump());
    for (auto it = opts.begin(); it != opts.end(); ++it) {
      o.backend_options[it.key()] = it->is_string() ? it->get<std::string>() : it->dump();
    }
  }
  BackendRegistry::instance().validate(o.backend, BackendOptions(o.backend, o.backend_options),
                                       c10::Device(c10::kCPU));
  if (p.contains("num_tokens")) {
    const auto& n = p.at("num_tokens");
    if (!n.is_number_integer() || n.get<int64_t>() < 1) {
      throw Error("'num_tokens': expected an integer >= 1, found " + n.dump());
    }
    o.num_tokens = n.get<int64_t>();
  }
  const std::string schedule = string_param(p, "schedule", "constant");
  if (schedule != "constant" && schedule != "heuristic") {
    throw Error("'schedule': expected constant or heuristic, found '" + schedule + "'");
  }
  o.heuristic = schedule == "heuristic";
  const std::string sampling = string_param(p, "sampling", "speculative");
  if (sampling != "speculative" && sampling != "plain_draws") {
    throw Error("'sampling': expected speculative or plain_draws, found '" + sampling + "'");
  }
  o.speculative_sampling = sampling == "speculative";
}

void check_known(const nlohmann::json& p, const std::vector<std::string>& known) {
  if (!p.is_object()) throw Error("expected a mapping of parameters, found " + p.dump());
  for (auto it = p.begin(); it != p.end(); ++it) {
    if (std::find(known.begin(), known.end(), it.key()) == known.end()) {
      throw Error("unknown parameter '" + it.key() + "'" + did_you_mean(it.key(), known) +
                  "; known: " + join(known, ", "));
    }
  }
}

// Draft backends kept between generations. The pipeline, and with it the DraftModel, is built
// for every generation; a trace draft would trace again each time and an aoti draft reload its
// package. A DraftModel takes a backend for its model, backend and options from here when it is
// built (or makes one) and gives it back when it ends, so two generations running at once (two
// Engines on two threads) never share one. At most kKept are kept, the oldest given back dropped;
// each entry holds its model, so a key's address is never another model's.
class DraftBackends {
 public:
  static constexpr size_t kKept = 4;
  using Key = std::tuple<const CausalLM*, std::string, std::map<std::string, std::string>>;

  static std::unique_ptr<ForwardBackend> take(const std::shared_ptr<const CausalLM>& model,
                                              const DraftModelOptions& o) {
    {
      const std::lock_guard<std::mutex> lock(mutex());
      auto& kept = entries();
      const Key key{model.get(), o.backend, o.backend_options};
      for (auto it = kept.begin(); it != kept.end(); ++it) {
        if (it->key == key) {
          auto backend = std::move(it->backend);
          kept.erase(it);
          return backend;
        }
      }
    }
    created().fetch_add(1);
    return BackendRegistry::instance().create(o.backend, model,
                                              BackendOptions(o.backend, o.backend_options));
  }

  static std::atomic<int64_t>& created() {
    static std::atomic<int64_t> n{0};
    return n;
  }

  static void give_back(const DraftModelOptions& o, std::unique_ptr<ForwardBackend> backend) {
    if (!backend) return;
    const std::lock_guard<std::mutex> lock(mutex());
    auto& kept = entries();
    const CausalLM* model = &backend->model();
    kept.push_back(Entry{Key{model, o.backend, o.backend_options}, std::move(backend)});
    if (kept.size() > kKept) kept.erase(kept.begin());
  }

 private:
  struct Entry {
    Key key;
    std::unique_ptr<ForwardBackend> backend;  // holds its model (ForwardBackend::model())
  };
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::vector<Entry>& entries() {
    // Never destroyed: backends must not outlive LibTorch's own statics at exit.
    static auto* e = new std::vector<Entry>();
    return *e;
  }
};

// The draft reads the prompt and writes the candidates in a cache of the generation's length: a
// context shorter than that would index past its position table ("index out of range in self")
// halfway through the generation. Refused before any work, as the target's own check does.
void check_draft_context(const ModelConfig& draft, const ModelConfig& target, int64_t max_length,
                         int64_t prompt_length) {
  if (max_length <= draft.max_positions) return;
  const std::string contexts = "the draft model " + draft.source + " has a context of " +
                               std::to_string(draft.max_positions) +
                               " positions (the target model " + target.source + " has " +
                               std::to_string(target.max_positions) + ")";
  if (prompt_length >= draft.max_positions) {
    throw Error(contexts + ": the longest prompt has " + std::to_string(prompt_length) +
                " tokens; use a draft with a longer context, or shorter prompts");
  }
  throw Error(contexts + ": the longest prompt (" + std::to_string(prompt_length) +
              " tokens) plus " + std::to_string(max_length - prompt_length) + " new tokens needs " +
              std::to_string(max_length) +
              "; use a draft with a longer context, shorter prompts or a smaller max_new_tokens");
}

// NaN or inf in the draft's logits: its candidates (and, when sampling, the distribution they
// are kept by) would be garbage; sampling would end in LibTorch's "probability tensor contains
// either inf, nan or element < 0". One sum, read with the choice that is read anyway: finite only
// when every logit is (a sum that overflows finite values is settled by the exact test).
void check_draft_logits(const ForwardBackend& backend, const at::Tensor& logits) {
  if (std::isfinite(logits.sum().item<double>()) || at::isfinite(logits).all().item<bool>()) {
    return;
  }
  const bool nan = at::isnan(logits).any().item<bool>();
  throw Error("the draft model's backend '" + backend.name() + "' gave " +
              (nan ? "NaN" : "infinite") + " logits (" + backend.model().config().source +
              "): its forward overflows, or the backend computes wrong values");
}

at::Tensor row(const std::vector<int64_t>& tokens, size_t from, const c10::Device& device) {
  return at::tensor(
             std::vector<int64_t>(tokens.begin() + static_cast<std::ptrdiff_t>(from), tokens.end()),
             at::kLong)
      .to(device)
      .unsqueeze(0);
}

}  // namespace

DraftModelOptions read_draft_model_options(const nlohmann::json& p) {
  check_known(p, {"model", "weights", "backend", "options", "num_tokens", "schedule", "sampling"});
  DraftModelOptions o;
  if (!p.contains("model"))
    throw Error(
        "parameter 'model' is required (the draft's folder, known name or \"preset:NAME\")");
  o.model = string_param(p, "model", "");
  o.weights = string_param(p, "weights", "float");
  draft_weight_format(o.weights);
  read_run_params(p, o);
  return o;
}

DraftModelOptions read_early_exit_options(const nlohmann::json& p) {
  check_known(p, {"layers", "backend", "options", "num_tokens", "schedule", "sampling"});
  DraftModelOptions o;
  if (!p.contains("layers") || !p.at("layers").is_number_integer() ||
      p.at("layers").get<int64_t>() < 1) {
    throw Error("parameter 'layers': expected an integer >= 1 (the target's layers that draft), " +
                std::string(p.contains("layers") ? "found " + p.at("layers").dump() : "missing"));
  }
  o.layers = p.at("layers").get<int64_t>();
  read_run_params(p, o);
  return o;
}

std::shared_ptr<const CausalLM> early_exit_model(const CausalLM& target, int64_t layers) {
  // The pipeline, and with it the draft, is built for every generation: the last truncated model
  // is kept for the next one on the same target. The key holds one of the target's tensors, so
  // that a later target at the same address cannot be mistaken for it (that storage stays alive);
  // one slot, so that at most one target's tensors are kept past its life.
  static std::mutex mutex;
  static std::tuple<const CausalLM*, at::Tensor, int64_t> key;
  static std::shared_ptr<const CausalLM> last;
  const at::Tensor& first = target.weights().begin()->second;
  const std::lock_guard<std::mutex> lock(mutex);
  if (last && std::get<0>(key) == &target && std::get<1>(key).is_same(first) &&
      std::get<2>(key) == layers) {
    return last;
  }
  const ModelConfig& tc = target.config();
  if (layers < 1 || layers >= tc.num_layers) {
    throw Error("early exit after " + std::to_string(layers) + " layer(s): expected 1 .. " +
                std::to_string(tc.num_layers - 1) + " (" + tc.source + " has " +
                std::to_string(tc.num_layers) + " layers; the draft is fewer of them)");
  }
  ModelConfig c = tc;
  c.num_layers = layers;
  if (!c.sliding_layers.empty()) c.sliding_layers.resize(static_cast<size_t>(layers));
  WeightMap weights;
  for (const auto& [name, tensor] : target.weights()) {
    if (layer_of(name) < layers) weights.emplace(name, tensor);
  }
  last = ModelRegistry::instance().get(c.model_type, "early exit").build(c, std::move(weights));
  key = {&target, first, layers};
  return last;
}

DraftModel::DraftModel(DraftModelOptions options, const CausalLM* target, int64_t max_length,
                       int64_t prompt_length)
    : options_(std::move(options)), max_length_(max_length), num_tokens_(options_.num_tokens) {
  if (target == nullptr) return;  // checked, not run
  const std::shared_ptr<const CausalLM> draft =
      options_.layers ? early_exit_model(*target, options_.layers) : load_draft(options_, *target);
  check_draft_context(draft->config(), target->config(), max_length, prompt_length);
  backend_ = DraftBackends::take(draft, options_);
}

int64_t draft_backends_created() { return DraftBackends::created().load(); }

DraftModel::~DraftModel() { DraftBackends::give_back(options_, std::move(backend_)); }

void DraftModel::begin() {
  if (!backend_) throw Error("internal: draft_model run without its target model");
  backend_->prepare(1, max_length_);
  cached_ = history_ = 0;
}

std::vector<int64_t> DraftModel::propose(
    const std::vector<int64_t>& history, int64_t max,
    const std::function<size_t(const std::vector<int64_t>&)>&) {
  return draft(history, max, nullptr, nullptr);
}

std::vector<int64_t> DraftModel::propose_sampled(
    const std::vector<int64_t>& history, int64_t max,
    const std::function<size_t(const std::vector<int64_t>&)>&, const Process& process,
    at::Tensor& probabilities) {
  probabilities = at::Tensor();
  if (!options_.speculative_sampling) return draft(history, max, nullptr, nullptr);
  std::vector<at::Tensor> rows;
  std::vector<int64_t> out = draft(history, max, &process, &rows);
  if (!out.empty()) probabilities = at::cat(rows);
  return out;
}

std::vector<int64_t> DraftModel::draft(const std::vector<int64_t>& history, int64_t max,
                                       const Process* process,
                                       std::vector<at::Tensor>* probabilities) {
  const auto len = static_cast<int64_t>(history.size());
  const int64_t k = std::min(num_tokens_, max);
  history_ = len;
  if (k <= 0) return {};
  const auto device = backend_->model().device();
  // The history the draft has not seen: the whole prompt at first, then the target's own token
  // (and the last candidate, when every one was kept).
  at::Tensor logits;
  const auto ids = row(history, static_cast<size_t>(cached_), device);
  const at::Tensor positions = at::arange(cached_, len, ids.options()).unsqueeze(0);
  const at::Tensor valid = at::ones(ids.sizes(), ids.options().dtype(at::kBool));
  if (cached_ == 0) {
    logits = backend_->prefill(StepInputs{ids, positions, valid, {}});
  } else {
    logits = backend_->verify(StepInputs{ids, positions, valid, {}}).select(1, -1);
  }
  std::vector<int64_t> out;
  for (int64_t i = 0;; ++i) {
    check_draft_logits(*backend_, logits);
    if (process != nullptr) {
      // A draw from the draft's processed distribution (the default generator), kept with it.
      const at::Tensor q = at::softmax((*process)(out, logits.to(at::kFloat)), -1);  // [1, vocab]
      out.push_back(at::multinomial(q, 1).item<int64_t>());
      probabilities->push_back(q);
    } else {
      out.push_back(logits.argmax(-1).item<int64_t>());
    }
    if (static_cast<int64_t>(out.size()) == k) break;
    const at::Tensor next = at::tensor({out.back()}, at::kLong).to(device).unsqueeze(0);
    logits = backend_->decode(StepInputs{next,
                                         at::full({1, 1}, len + i, next.options()),
                                         at::ones({1, 1}, next.options().dtype(at::kBool)),
                                         {}});
  }
  cached_ = len + k - 1;  // the last candidate was not fed
  return out;
}

void DraftModel::update(int64_t proposed, int64_t accepted) {
  // The draft's cache keeps the history and the candidates the target kept.
  const int64_t valid = history_ + std::min(accepted, std::max<int64_t>(proposed - 1, 0));
  if (cached_ > valid) backend_->rewind(cached_ - valid);
  cached_ = std::min(cached_, valid);
  if (options_.heuristic && proposed > 0) {
    num_tokens_ = accepted == proposed ? num_tokens_ + 2 : std::max<int64_t>(1, num_tokens_ - 1);
  }
}

}  // namespace gengraph

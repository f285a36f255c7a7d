// gengraph::Engine (include/gengraph/gengraph.h): the facade over the loader, the backend
// registry and the decoding loop, resolving settings as the CLI's runner does.
#include <ATen/ATen.h>
#include <gengraph/gengraph.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "backends/register_builtin.h"
#include "engine/model_impl.h"
#include "framework/backend/backend_registry.h"
#include "framework/decoding/generation_defaults.h"
#include "framework/decoding/generator.h"
#include "framework/decoding/plan.h"
#include "framework/model/loader.h"
#include "framework/model/model_names.h"
#include "framework/quant/weight_format.h"
#include "framework/text/chat_native.h"
#include "framework/text/tokenizer.h"
#include "framework/util/device.h"
#include "framework/util/error.h"
#include "framework/util/path_errors.h"

namespace gengraph {

struct Engine::Impl {
  std::shared_ptr<const Model::Impl> model;  // shared with the Model and its other Engines
  const LoadedModel& loaded() const { return model->loaded; }
  std::string backend_name;
  std::unique_ptr<ForwardBackend> backend;
  LoopOptions loop;
  // The last call's generator and its resolved settings: a call with the same settings reuses
  // it, and with it a whole-step graph of the same shape.
  std::unique_ptr<Generator> generator;
  nlohmann::json generator_settings;
  // The folder's tokenizer, loaded on first use (encode, decode, generate_text).
  std::mutex tokenizer_mutex;
  std::unique_ptr<Tokenizer> tokenizer;
  const Tokenizer& text() {
    const std::lock_guard<std::mutex> lock(tokenizer_mutex);
    if (!tokenizer) {
      if (loaded().source.rfind("preset:", 0) == 0) {
        throw Error("Engine: model " + loaded().source +
                    " has random weights and no tokenizer: give token ids to generate(), or a "
                    "model folder with tokenizer.json");
      }
      tokenizer = load_tokenizer(loaded().source);
    }
    return *tokenizer;
  }
  // The model's chat template (chat, apply_chat_template), read on first use.
  std::optional<NativeChat> chat_template;
  bool chat_template_read = false;
  const NativeChat& chat() {
    const std::lock_guard<std::mutex> lock(tokenizer_mutex);
    if (!chat_template_read) {
      const std::string& source = loaded().source;
      if (source.rfind("preset:", 0) == 0) {
        throw Error("Engine: chat: model " + source +
                    " has random weights and no chat template: chat needs a model folder or "
                    "GGUF file with one");
      }
      try {
        chat_template = NativeChat::for_model(source);
      } catch (const jinja::Unsupported& e) {
        throw Error("Engine: chat: " + std::string(e.what()) +
                    ": the Engine renders chat templates natively only (gengraph generate --chat "
                    "renders this one through transformers)");
      }
      chat_template_read = true;
    }
    if (!chat_template) {
      throw Error("Engine: chat: model '" + loaded().source +
                  "' has no chat template (chat_template.jinja, or chat_template in "
                  "tokenizer_config.json; tokenizer.chat_template in a GGUF file): give texts to "
                  "generate_text with the template written out");
    }
    return *chat_template;
  }

  // One call at a time: the backend's cache, the generator's reused state and its graph belong to
  // the call that runs. A second thread's call waits for the first; a call from inside this
  // Engine's own stream callback (same thread, lock held) would wait on itself and is refused.
  std::mutex mutex;
  std::atomic<std::thread::id> holder{};
  class Call {
   public:
    Call(Impl& impl, const char* what) : impl_(impl) {
      if (impl.holder.load() == std::this_thread::get_id()) {
        throw Error(std::string("Engine::") + what +
                    ": called from inside this Engine's own generate (its stream callback); an "
                    "Engine runs one call at a time: call it after generate returns, or use a "
                    "second Engine");
      }
      lock_ = std::unique_lock<std::mutex>(impl.mutex);
      impl.holder = std::this_thread::get_id();
    }
    ~Call() { impl_.holder = std::thread::id(); }  // before lock_ is released
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;

   private:
    Impl& impl_;
    std::unique_lock<std::mutex> lock_;
  };
};

namespace {

// The model `model` names (model_names.h: the rules every boundary shares), in the form `o` asks.
ModelSource model_source_of(const std::string& model, const ModelOptions& o) {
  const ModelName name = resolve_model_name(model, "Engine: model");
  ModelSource src;
  if (!name.preset.empty()) {
    src.preset = name.preset;
    src.config_overrides = o.model_config;
    src.seed = o.weights_seed;
  } else {
    src.path = name.folder;
    if (!o.model_config.is_null()) {
      throw Error("Engine: model_config applies to presets; '" + model +
                  "' is a folder (edit its config.json instead)");
    }
  }
  src.load.dtype = o.dtype == DType::kBFloat16  ? at::kBFloat16
                   : o.dtype == DType::kFloat16 ? at::kHalf
                                                : at::kFloat;
  src.load.device = parse_device(o.device.str());
  src.load.fused = o.fused;
  src.load.check_weights = o.check_weights;
  WeightFormatKeys keys;
  keys.weights = o.weights;
  keys.group_size = o.group_size;
  keys.quantize_head = o.quantize_head;
  keys.int8_head = o.int8_head;
  keys.int8_activation_rows = o.int8_activation_rows;
  keys.int8_activation_block = o.int8_activation_block;
  keys.fused = o.fused;
  src.load.weights = parse_weight_format(keys, key_names_with_prefix("EngineOptions::"));
  return src;
}

}  // namespace

Model::Model(const std::string& model, const ModelOptions& o) {
  const ModelSource src = model_source_of(model, o);
  model_config_of(src);  // the preset or config.json checked before any weight is read
  auto impl = std::make_shared<Impl>();
  try {
    impl->loaded = load_model(src);
  } catch (const c10::Error& e) {  // e.g. an allocation for a model too big for this machine
    throw Error("loading model " +
                (src.preset.empty() ? "'" + src.path.string() + "'" : "preset " + src.preset) +
                " (" + dtype_name(src.load.dtype) + ", " + o.device.str() +
                ") failed: " + e.what_without_backtrace());
  }
  impl_ = std::move(impl);
}

Model::Model(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

const std::string& Model::source() const { return impl_->loaded.source; }
int64_t Model::vocab_size() const { return impl_->loaded.model->config().vocab_size; }
const std::vector<std::string>& Model::warnings() const { return impl_->loaded.warnings; }

nlohmann::json Model::describe() const {
  const LoadedModel& l = impl_->loaded;
  const ModelConfig& mc = l.model->config();
  return {{"source", l.source},
          {"model_type", mc.model_type},
          {"fused", mc.fused},
          {"weights", mc.weights.describe()},
          {"parameters", l.model->parameter_count()},
          {"layers", mc.num_layers},
          {"hidden_size", mc.hidden_size},
          {"vocab_size", mc.vocab_size},
          {"context_length", mc.max_positions},
          {"load_seconds", l.load_seconds}};
}

double Model::decode_read_bytes(int64_t rows, double mean_cache_length) const {
  const CausalLM& m = *impl_->loaded.model;
  const ModelConfig& c = m.config();
  return m.decode_weight_bytes() + 2.0 * static_cast<double>(c.num_layers) *
                                       static_cast<double>(rows * c.num_kv_heads * c.head_dim) *
                                       mean_cache_length *
                                       static_cast<double>(c10::elementSize(m.dtype()));
}

void Model::save(const std::string& folder) const { save_model_folder(impl_->loaded, folder); }

namespace {

// The run options checked without a model: the loop's settings, then the backend's options
// (`device`: where the model is or will be).
LoopOptions checked_loop(const RunOptions& o, const c10::Device& device) {
  register_builtin_backends();
  BackendRegistry::instance().validate(o.backend, BackendOptions(o.backend, o.backend_options),
                                       device);
  LoopOptions loop;
  loop.whole_step = o.whole_step;
  loop.capture = o.capture;
  loop.sync_every = o.sync_every;
  if (o.sync_every < 1) {
    throw Error("EngineOptions::sync_every: expected an integer >= 1, found " +
                std::to_string(o.sync_every));
  }
  return loop;
}

}  // namespace

Engine::Engine(const std::string& model, const EngineOptions& o) : impl_(std::make_unique<Impl>()) {
  // The backend and its options are checked before the weights are read.
  impl_->loop = checked_loop(o, parse_device(o.device.str()));
  impl_->model = Model(model, o).impl_;
  impl_->backend_name = o.backend;
  impl_->backend = BackendRegistry::instance().create(o.backend, impl_->loaded().model,
                                                      BackendOptions(o.backend, o.backend_options));
}

Engine::Engine(const Model& model, const RunOptions& o) : impl_(std::make_unique<Impl>()) {
  impl_->loop = checked_loop(o, model.impl_->loaded.model->device());
  impl_->model = model.impl_;
  impl_->backend_name = o.backend;
  impl_->backend = BackendRegistry::instance().create(o.backend, impl_->loaded().model,
                                                      BackendOptions(o.backend, o.backend_options));
}

Engine::~Engine() = default;
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;

struct Plan::Impl {
  const void* engine = nullptr;  // the Engine (its Impl) that made it
  GenerationPlan plan;
};

const nlohmann::json& Plan::settings() const { return impl_->plan.settings; }
const std::vector<std::string>& Plan::ignored_keys() const { return impl_->plan.ignored_keys; }
int64_t Plan::inputs() const { return impl_->plan.inputs; }
int64_t Plan::rows_per_input() const { return impl_->plan.rows_per_input; }
int64_t Plan::prompt_length() const { return impl_->plan.prompt_length; }
int64_t Plan::max_length() const { return impl_->plan.max_length; }
double Plan::memory_bytes() const { return impl_->plan.memory.total(); }
std::string Plan::memory_breakdown() const { return impl_->plan.memory.breakdown(); }

Plan Engine::plan(const std::vector<std::vector<int64_t>>& prompts,
                  const nlohmann::json& settings) {
  const Impl::Call call(*impl_, "plan");
  return plan_locked(prompts, settings);
}

Plan Engine::plan_locked(const std::vector<std::vector<int64_t>>& prompts,
                         const nlohmann::json& settings) {
  Plan out;
  out.impl_ = std::make_shared<Plan::Impl>();
  out.impl_->engine = impl_.get();
  out.impl_->plan =
      plan_generation(plan_target(*impl_->backend, impl_->loaded().generation_defaults), settings,
                      "generation", prompts);
  return out;
}

Plan Engine::plan(const std::vector<std::vector<int64_t>>& prompts,
                  const GenerationSettings& settings) {
  return plan(prompts, settings.to_json());
}

Generation Engine::generate(const std::vector<std::vector<int64_t>>& prompts,
                            const nlohmann::json& settings, const TokenStream& stream) {
  const Impl::Call call(*impl_, "generate");
  return generate_locked(plan_locked(prompts, settings), prompts, stream);
}

Generation Engine::generate(const Plan& plan, const std::vector<std::vector<int64_t>>& prompts,
                            const TokenStream& stream) {
  const Impl::Call call(*impl_, "generate");
  return generate_locked(plan, prompts, stream);
}

Generation Engine::generate_locked(const Plan& plan,
                                   const std::vector<std::vector<int64_t>>& prompts,
                                   const TokenStream& stream) {
  if (!plan.impl_ || plan.impl_->engine != impl_.get()) {
    throw Error(
        "Engine::generate: the plan was made by another Engine (or is empty); make it "
        "with this Engine's plan()");
  }
  GenerationPlan& p = plan.impl_->plan;
  // The Generator is kept while the settings stay the same, and with it a whole-step graph.
  if (!impl_->generator || impl_->generator_settings != p.settings) {
    const c10::Device device = impl_->loaded().model->device();
    std::function<void()> sync;
    if (device.is_cuda()) sync = [device] { synchronize(device); };
    impl_->generator = std::make_unique<Generator>(p.config, sync, impl_->loop);
    impl_->generator_settings = p.settings;
  }
  return impl_->generator->generate(*impl_->backend, p, prompts, stream);
}

std::vector<int64_t> Engine::encode(const std::string& text, bool add_special_tokens) const {
  return impl_->text().encode(text, add_special_tokens);
}

std::string Engine::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  return impl_->text().decode(ids, skip_special_tokens);
}

Generation Engine::generate_text(const std::vector<std::string>& texts,
                                 const nlohmann::json& settings, const TextStreamCallback& stream) {
  TextPieceCallback pieces;
  if (stream) {
    pieces = [&stream](const TextPiece& p) {
      return p.text.empty() || stream(p.input, p.sequence, p.text);
    };
  }
  return generate_text(texts, settings, pieces);
}

Generation Engine::generate_text(const std::vector<std::string>& texts,
                                 const nlohmann::json& settings_in,
                                 const TextPieceCallback& stream) {
  // skip_special_tokens (transformers' name, a decoding option rather than a generation one):
  // special tokens left out of the text. Default false, as decode's. add_special_tokens
  // (tokenizer(text, add_special_tokens=...)): what the tokenizer's post-processor adds (LLaMA's
  // BOS, ...). Default true; chat's rendered prompts take false. Both taken out of the settings.
  nlohmann::json settings = settings_in;
  const auto take_bool = [&settings](const char* key, bool fallback) {
    if (!settings.is_object() || !settings.contains(key)) return fallback;
    if (!settings[key].is_boolean()) {
      throw Error(std::string("Engine::generate_text: ") + key +
                  ": expected true or false, found " + settings[key].dump());
    }
    const bool v = settings[key].get<bool>();
    settings.erase(key);
    return v;
  };
  const bool skip_special = take_bool("skip_special_tokens", false);
  const bool add_special = take_bool("add_special_tokens", true);
  const Tokenizer& tok = impl_->text();
  std::vector<std::vector<int64_t>> prompts;
  const int64_t vocab = impl_->loaded().model->config().vocab_size;
  for (size_t i = 0; i < texts.size(); ++i) {
    prompts.push_back(tok.encode(texts[i], add_special));
    if (prompts.back().empty()) {
      throw Error("Engine::generate_text: text " + std::to_string(i) + " encodes to no tokens");
    }
    for (const int64_t id : prompts.back()) {
      if (id >= vocab) {
        throw Error("Engine::generate_text: text " + std::to_string(i) + " gives token id " +
                    std::to_string(id) + ", outside the model's vocabulary [0, " +
                    std::to_string(vocab) + "): the tokenizer does not match the model");
      }
    }
  }
  // One detokeniser per (input, sequence), made when its first token comes, and the piece its
  // tokens since the last one shown make up.
  struct Open {
    TextStream text;
    TextPiece piece;
  };
  std::map<std::pair<int64_t, int64_t>, Open> streams;
  TokenStream on_token;
  if (stream) {
    on_token = [&](const StreamedToken& t) {
      auto it = streams.find({t.input, t.sequence});
      if (it == streams.end()) {
        it = streams
                 .emplace(std::make_pair(t.input, t.sequence),
                          Open{TextStream(tok, skip_special), TextPiece{}})
                 .first;
      }
      TextPiece& p = it->second.piece;
      p.tokens.push_back(t.token);
      p.logprobs.push_back(t.logprob);
      p.top.push_back(t.top);
      p.text = it->second.text.push(t.token);
      if (p.text.empty()) return true;
      p.input = t.input;
      p.sequence = t.sequence;
      const bool go_on = stream(p);
      p = TextPiece{};
      return go_on;
    };
  }
  Generation out = generate(prompts, settings, on_token);
  for (auto& [key, open] : streams) {
    TextPiece& p = open.piece;
    p.text = open.text.finish();
    if (p.text.empty() && p.tokens.empty()) continue;
    p.input = key.first;
    p.sequence = key.second;
    stream(p);
  }
  for (auto& per_input : out.outputs) {
    // Up to the last whole character: one the length limit cut is left out, as the stream's
    // end leaves it out.
    for (auto& seq : per_input) {
      size_t cut = 0;
      seq.text = tok.decode_whole(seq.tokens, skip_special, cut);
    }
  }
  return out;
}

std::string Engine::apply_chat_template(const nlohmann::json& messages,
                                        bool add_generation_prompt) const {
  return impl_->chat().render(messages, add_generation_prompt, "conversation 0");
}

Generation Engine::chat(const std::vector<nlohmann::json>& conversations,
                        const nlohmann::json& settings_in, const TextStreamCallback& stream) {
  // As transformers' apply_chat_template(tokenize=True): the template writes the special tokens
  // itself, so encoding adds none; the text leaves them out unless told otherwise.
  if (!settings_in.is_object()) {
    throw Error("Engine::chat: settings: expected an object, found " + settings_in.dump());
  }
  const NativeChat& chat = impl_->chat();
  const nlohmann::json all(conversations);
  check_chat_messages(all);  // named by conversation and message
  std::vector<std::string> texts;
  for (size_t i = 0; i < conversations.size(); ++i) {
    texts.push_back(chat.render(conversations[i], /*add_generation_prompt=*/true,
                                "conversation " + std::to_string(i)));
  }
  nlohmann::json settings = settings_in;
  settings.emplace("add_special_tokens", false);
  settings.emplace("skip_special_tokens", true);
  return generate_text(texts, settings, stream);
}

void Engine::manual_seed(uint64_t seed) { at::manual_seed(seed); }

nlohmann::json Engine::default_settings() const {
  return resolve_generation(impl_->loaded(), nlohmann::json::object(), "generation").to_json();
}

Generation Engine::generate(const std::vector<std::vector<int64_t>>& prompts,
                            const GenerationSettings& settings, const TokenStream& stream) {
  return generate(prompts, settings.to_json(), stream);
}

Generation Engine::generate_text(const std::vector<std::string>& texts,
                                 const GenerationSettings& settings,
                                 const TextStreamCallback& stream) {
  return generate_text(texts, settings.to_json(), stream);
}

Device::Device(const std::string& text) {
  // LibTorch's parser reads the text; whether the device exists is asked when a model is loaded.
  std::optional<c10::Device> d;
  try {
    d = c10::Device(text);
  } catch (const std::exception&) {
  }
  if (!d || !(d->is_cuda() || (d->is_cpu() && !d->has_index()))) {
    throw Error("Device: expected cpu, cuda or cuda:N, found '" + text + "'");
  }
  kind = d->is_cuda() ? Kind::kCuda : Kind::kCpu;
  index = d->has_index() ? d->index() : -1;
}

Device::Device(const char* text) : Device(std::string(text != nullptr ? text : "")) {}

std::string Device::str() const {
  if (kind == Kind::kCpu) return "cpu";
  return index < 0 ? "cuda" : "cuda:" + std::to_string(index);
}

Model Engine::model() const { return Model(impl_->model); }
const std::string& Engine::model_source() const { return impl_->loaded().source; }
const std::string& Engine::backend() const { return impl_->backend_name; }
int64_t Engine::vocab_size() const { return impl_->loaded().model->config().vocab_size; }
nlohmann::json Engine::backend_report() const {
  const Impl::Call call(*impl_, "backend_report");
  return impl_->backend->report();
}
const std::vector<std::string>& Engine::warnings() const { return impl_->loaded().warnings; }

}  // namespace gengraph

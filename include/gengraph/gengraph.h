// gengraph's public C++ API: load a model (a Hugging Face folder or a built-in preset), pick a
// forward backend by name, generate. The settings are resolved exactly as the CLI resolves them:
// transformers' defaults, then the model's generation_config.json, then yours.
//
//   #include <gengraph/gengraph.h>
//   gengraph::Engine engine("/path/to/hf-folder");                 // or a preset, "gpt2-tiny"
//   auto result = engine.generate({{464, 2068}}, {{"max_new_tokens", 8}});
//   for (int64_t t : result.outputs[0][0].tokens) std::cout << t << ' ';
//
// Link gengraph::core (find_package(gengraph)); see docs/embedding.md. This header does not pull
// in LibTorch's; errors are thrown as gengraph::Error (a std::runtime_error) naming the input.
#pragma once

#include <gengraph/error.h>
#include <gengraph/generation.h>
#include <gengraph/settings.h>
#include <gengraph/stream.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace gengraph {

enum class DType { kFloat32, kBFloat16, kFloat16 };

// Where a model lives. Built from the text the CLI and YAML use ("cpu", "cuda", "cuda:N"), so
// `options.device = "cuda:1"` reads as it did; other text is a gengraph::Error naming it.
struct Device {
  enum class Kind { kCpu, kCuda };
  Kind kind = Kind::kCpu;
  int index = -1;  // CUDA: which device; -1 the current one
  Device() = default;
  Device(Kind k, int i = -1) : kind(k), index(i) {}  // NOLINT(google-explicit-constructor)
  Device(const char* text);                          // NOLINT(google-explicit-constructor)
  Device(const std::string& text);                   // NOLINT(google-explicit-constructor)
  std::string str() const;                           // "cpu", "cuda", "cuda:1"
};

// How a model is loaded: its form in memory, fixed for the life of the loaded model.
struct ModelOptions {
  Device device;  // the CPU unless set
  DType dtype = DType::kFloat32;
  // Fused projections and one-kernel forms (the default), or transformers' formulation op by op.
  bool fused = true;
  // Refuse checkpoint tensors holding NaN or Inf (one pass at load, naming the tensor and file);
  // false loads them as they are.
  bool check_weights = true;
  // Weight-only quantization of the linear layers (fused form): "float" (as loaded), "int8",
  // "int4" (groups of group_size input channels) or "bfloat16"; quantize_head covers the output
  // head too. See docs/quantization.md.
  std::string weights = "float";
  // 32, 64, 128 or 256 input channels per scale; 0 (not given): int4 groups of 32, int8 one scale
  // per output channel. int8 with a group_size: one float16 scale per block (CPU only).
  int64_t group_size = 0;
  bool quantize_head = true;
  // int4: the output head in int8 instead (with int8 activations as the two settings below say).
  // Not given: true for int4 (false keeps the head int4); true with another format is refused.
  std::optional<bool> int8_head;
  // int8 or int4 on CPU: products of at least this many activation rows quantize the activations
  // to int8 too (W8A8 / W4A8, gengraph's integer kernels); 0 keeps every product weight-only.
  int64_t int8_activation_rows = 0;
  // Those products' activation scales: 0 one per row; B one per block of B input channels (a
  // multiple of 32 dividing the projections' widths), computed by gengraph's integer kernels;
  // int4 takes 32.
  // No effect while int8_activation_rows is 0.
  int64_t int8_activation_block = 0;
  // Presets only: config.json keys over the preset's (e.g. {"n_layer": 4}) and the seed of the
  // random weights.
  nlohmann::json model_config = nullptr;
  uint64_t weights_seed = 0;
};

// How an Engine runs a loaded model: the backend and the decoding loop.
struct RunOptions {
  std::string backend = "eager";                       // a registered backend (gengraph backends)
  std::map<std::string, std::string> backend_options;  // as in YAML, e.g. {"cache", "static"}
  // The whole step (WholeStep, gengraph/generation.h), replayed as a CUDA graph (`capture`, CUDA
  // only) or run uncaptured; the done flag read every `sync_every` steps.
  WholeStep whole_step = WholeStep::kOff;
  bool capture = true;
  int64_t sync_every = 4;
};

// Both, for an Engine that loads its own model.
struct EngineOptions : ModelOptions, RunOptions {};

// A loaded model: its weights in memory once, shared by every Engine built on it (each with its
// own backend and caches), so that backends are compared, or served side by side, without a
// second load. Copies share the same weights; they are freed with the last copy and the last
// Engine on them.
class Model {
 public:
  // `model` as for Engine; the weights are read here, after the configuration is checked.
  explicit Model(const std::string& model, const ModelOptions& options = {});
  const std::string& source() const;  // "preset:NAME" or the folder
  int64_t vocab_size() const;
  const std::vector<std::string>& warnings() const;  // as Engine::warnings
  // What was loaded: source, model_type, fused, weights (the format, described), parameters,
  // layers, hidden_size, vocab_size, context_length (positions), load_seconds (the results'
  // `model` block).
  nlohmann::json describe() const;
  // The least a decode step reads: the weights (as stored) once and the KV cache of `rows` rows of
  // `mean_cache_length` positions. What bandwidth figures divide by a step's time.
  double decode_read_bytes(int64_t rows, double mean_cache_length) const;
  // Writes the model as a Hugging Face folder (config.json, model.safetensors), e.g. a preset's
  // random weights for another engine to load. The weights as loaded: quantized forms are not
  // written.
  void save(const std::string& folder) const;

 private:
  friend class Engine;
  friend class Scheduler;
  struct Impl;
  explicit Model(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
};

// One generation decided before any work (Engine::plan): the settings resolved over the model's
// defaults, the prompts checked, the decoding pipeline built, the memory it needs estimated and
// checked. Engine::generate executes a plan as it is, so a plan made once serves repeated
// generations of the same prompts (each a fresh run) with nothing resolved or checked again.
// A plan belongs to the Engine that made it.
class Plan {
 public:
  const nlohmann::json& settings() const;  // the resolved settings every Generation reports
  // Keys of the model's generation_config.json that gengraph does not use.
  const std::vector<std::string>& ignored_keys() const;
  int64_t inputs() const;                // prompts
  int64_t rows_per_input() const;        // num_beams, or num_return_sequences when sampling
  int64_t prompt_length() const;         // the longest prompt (the others are left-padded)
  int64_t max_length() const;            // prompt plus new tokens
  double memory_bytes() const;           // the estimate checked against the device (weights aside)
  std::string memory_breakdown() const;  // "KV cache 1.2 GB, prefill ..., decode step ..."

 private:
  friend class Engine;
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// generate_text's stream: text of prompt `input`'s sequence `sequence` as it becomes final (never
// ending inside a UTF-8 character). The pieces of a sequence add up to its Sequence::text.
// Returns whether to go on, as TokenStream does (stream.h).
using TextStreamCallback =
    std::function<bool(int64_t input, int64_t sequence, const std::string& text)>;

// The same stream with the tokens behind each piece: the ids of that sequence streamed since its
// previous piece (one held back until its character completed included) and, as the streamed ids
// have them (StreamedToken), their log-probabilities (NaN without output_scores or top_logprobs)
// and alternatives (top_logprobs). A sequence's last piece may have no text (special tokens
// skipped, a character the limit cut); its pieces' tokens are all the sequence's tokens.
struct TextPiece {
  int64_t input = 0;
  int64_t sequence = 0;
  std::string text;
  std::vector<int64_t> tokens;
  std::vector<double> logprobs;
  std::vector<std::vector<TopLogprob>> top;
};
using TextPieceCallback = std::function<bool(const TextPiece& piece)>;

// Threads: one Engine runs one call at a time. Calls from several threads are serialised (a
// second caller waits until the first call returns; results are as if called one after the
// other); a call from inside a stream callback of the same Engine is refused with an Error, since
// it would wait on itself. Separate Engines may generate at the same time on separate threads.
// Engines on one Model may too (they share only the read-only weights).
// manual_seed seeds LibTorch's global generator, which every Engine shares. Moving or destroying
// an Engine while another thread calls it is not allowed.
class Engine {
 public:
  // `model`: an existing folder (config.json + safetensors), a known real model set up here
  // ("smollm2-135m", gengraph models) or a preset name (gengraph presets); "preset:NAME" names a
  // preset even where a folder of that name exists (Model::source() gives presets that way).
  // The backend and its options are checked before the weights are loaded.
  explicit Engine(const std::string& model, const EngineOptions& options = {});
  // An Engine on a model already loaded: the weights are the Model's (shared with every other
  // Engine on it), the backend and its caches this Engine's own. Engines on one Model may
  // generate at the same time on separate threads, as Engines on separate models may.
  explicit Engine(const Model& model, const RunOptions& options = {});
  // A Model's form was fixed when it was loaded: give an Engine on it RunOptions only.
  Engine(const Model& model, const EngineOptions& options) = delete;
  ~Engine();
  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;

  // Generates from token ids (ragged prompts are left-padded as transformers does). `settings`:
  // generation keys as in a YAML `generation:` block (max_new_tokens, num_beams, do_sample, ...),
  // over the model's own defaults. `stream`, when given, receives each token as it is chosen
  // (greedy search and sampling only).
  Generation generate(const std::vector<std::vector<int64_t>>& prompts,
                      const nlohmann::json& settings = nlohmann::json::object(),
                      const TokenStream& stream = {});
  // The same with typed settings (gengraph/settings.h): settings.to_json() in the call above.
  Generation generate(const std::vector<std::vector<int64_t>>& prompts,
                      const GenerationSettings& settings, const TokenStream& stream = {});
  // generate() in two steps: plan() resolves and checks everything (the first error names the
  // key or input) and generate(plan, ...) runs it, for the prompts it was made for.
  Plan plan(const std::vector<std::vector<int64_t>>& prompts,
            const nlohmann::json& settings = nlohmann::json::object());
  Plan plan(const std::vector<std::vector<int64_t>>& prompts, const GenerationSettings& settings);
  Generation generate(const Plan& plan, const std::vector<std::vector<int64_t>>& prompts,
                      const TokenStream& stream = {});

  // Text in and out, natively (framework/text/tokenizer.h): the model folder's tokenizer.json (or
  // tokenizer.model), loaded on first use; a preset, or a folder without one, is refused naming
  // it. encode adds what the tokenizer's post-processor adds (LLaMA's BOS, ...) unless told not
  // to, as transformers' tokenizer(text) does; decode keeps special tokens unless told not to.
  std::vector<int64_t> encode(const std::string& text, bool add_special_tokens = true) const;
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = false) const;
  // generate() from texts: each encoded, generated, and every Sequence's text decoded. `stream`,
  // when given, receives the text of each sequence as it becomes final (greedy and sampling).
  Generation generate_text(const std::vector<std::string>& texts,
                           const nlohmann::json& settings = nlohmann::json::object(),
                           const TextStreamCallback& stream = {});
  Generation generate_text(const std::vector<std::string>& texts,
                           const GenerationSettings& settings,
                           const TextStreamCallback& stream = {});
  // generate_text whose stream hands over each piece with its tokens and their log-probabilities.
  Generation generate_text(const std::vector<std::string>& texts, const nlohmann::json& settings,
                           const TextPieceCallback& stream);
  // Chat, as transformers' apply_chat_template(messages, add_generation_prompt=True,
  // tokenize=True) then generate: each conversation (a list of {"role": "system" | "user" |
  // "assistant", "content": text}) rendered with the model's own chat template, natively (no
  // Python process), encoded without special tokens (settings' add_special_tokens, false here)
  // and generated as generate_text does; skip_special_tokens defaults to true here. A template
  // the native renderer does not render is refused naming the construct; so is a model without
  // a template, and a preset.
  Generation chat(const std::vector<nlohmann::json>& conversations,
                  const nlohmann::json& settings = nlohmann::json::object(),
                  const TextStreamCallback& stream = {});
  // One conversation rendered as chat() renders it (apply_chat_template(tokenize=False)).
  std::string apply_chat_template(const nlohmann::json& messages,
                                  bool add_generation_prompt = true) const;
  // Seeds the generator sampling draws from (the CLI seeds it with run.seed, default 0, before
  // every generation; do the same here to get its sampled tokens).
  void manual_seed(uint64_t seed);

  // The model's own defaults (transformers' GenerationConfig after generation_config.json).
  nlohmann::json default_settings() const;
  Model model() const;                      // the model it runs, for another Engine to share
  const std::string& model_source() const;  // "preset:NAME" or the folder
  const std::string& backend() const;
  int64_t vocab_size() const;
  nlohmann::json backend_report() const;  // numbers the backend reports (trace or capture time)
  // What loading did that the files did not say outright (e.g. an lm_head left untied because the
  // checkpoint stores one that differs from the embedding, as transformers does).
  const std::vector<std::string>& warnings() const;

 private:
  // plan() and generate(plan, ...) inside a call that holds the Engine already.
  Plan plan_locked(const std::vector<std::vector<int64_t>>& prompts,
                   const nlohmann::json& settings);
  Generation generate_locked(const Plan& plan, const std::vector<std::vector<int64_t>>& prompts,
                             const TokenStream& stream);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gengraph

// Forward backends, a public header (<gengraph/extension.h> includes it): the one interface
// between the decoding loop and a way of running the model forward, its options, and the registry
// that makes backends by name. Backends never see decoding settings; strategies never see
// backends. docs/extending.md walks through writing one.
#pragma once

#include <ATen/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <gengraph/ext/model.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace gengraph {

// String options for a backend (from YAML or --set), read with types and checked for unknown keys.
class BackendOptions {
 public:
  BackendOptions() = default;
  BackendOptions(std::string backend, std::map<std::string, std::string> values)
      : backend_(std::move(backend)), values_(std::move(values)) {}

  std::string get_string(const std::string& key, const std::string& fallback,
                         const std::vector<std::string>& allowed = {}) const;
  int64_t get_int(const std::string& key, int64_t fallback, int64_t min, int64_t max) const;
  bool get_bool(const std::string& key, bool fallback) const;
  // Throws for any key not read by one of the getters above (call after reading all options).
  void check_all_used() const;
  const std::map<std::string, std::string>& values() const { return values_; }
  const std::string& backend() const { return backend_; }

 private:
  std::string backend_;
  std::map<std::string, std::string> values_;
  mutable std::set<std::string> known_;
};

struct StepInputs {
  at::Tensor input_ids;    // [rows, T] int64; T = padded prompt length at prefill, 1 when decoding
  at::Tensor positions;    // [rows, T] int64; position ids as transformers computes them
  at::Tensor token_valid;  // [rows, T] bool; false for left padding
  at::Tensor parent_rows;  // [rows] int64 (decode only): row r continues row parent_rows[r]'s
                           // cache; undefined means identity (no beams)
  // Prefill only: each row stands for `copies` consecutive rows of the prepared batch (the beams,
  // or the return sequences, of one input share its prompt). A backend that shares prefills
  // (shares_prefill()) runs the prompt once per input and copies its cache to the other rows; for
  // the others prefill() repeats the rows first. Either way the logits of every prepared row
  // come back.
  int64_t copies = 1;
};

// A ragged batch: the tokens of many sequences in one forward, each at its own position
// (continuous batching, docs/serving.md). Their keys and values live in a PagedCache, whose step
// (PagedCache::set_step) says where each token writes and which positions it reads; a prompt's
// chunk and a decode step's one token are alike.
struct RaggedBatch {
  at::Tensor input_ids;   // [N] int64
  at::Tensor positions;   // [N] int64: each token's position in its sequence
  at::Tensor logit_rows;  // [K] int64: the tokens whose logits come back, in this order
};

class PagedCache;

// A decode step over buffers that stay where they are: what a loop needs to run the whole
// decoding step on the device (framework/decoding/generator.h), captured in a CUDA graph or not.
// run() reads only the buffers, never the host, allocates nothing its next call depends on, and
// does the same work whether a graph is being captured or not. A backend that offers one returns
// it from ForwardBackend::static_decode(); the loop composes it with the decoding parts, so an
// out-of-tree backend gets the whole-step graph by implementing start() and run() and setting the
// buffers.
class StaticDecode {
 public:
  virtual ~StaticDecode() = default;
  // After prefill(): slot = length(), parents the identity, every token valid. The caller then
  // fills ids and positions.
  virtual void start() = 0;
  virtual void run(bool reorder) = 0;

  // The buffers, views of the prepared rows, set when the backend is prepared: the same storage
  // for as long as the prepared shape does not change (a loop keeps a graph captured over them
  // for the next generation of that shape).
  at::Tensor ids;        // [rows, 1] int64: the tokens the next run() reads
  at::Tensor positions;  // [rows, 1] int64: their position ids
  at::Tensor slot;       // [1] int64: the cache slot the next run() writes; the caller advances it
  at::Tensor parents;    // [rows] int64: the rows run(true) reorders the cache by first
  at::Tensor logits;     // [rows, vocab]: what the last run() produced
};

// Numbers a backend reports about itself (trace time, capture time, graph memory, ...).
using BackendReport = std::map<std::string, double>;

class ForwardBackend {
 public:
  explicit ForwardBackend(std::shared_ptr<const CausalLM> model) : model_(std::move(model)) {}
  virtual ~ForwardBackend() = default;

  virtual std::string name() const = 0;

  // Allocates (and may trace or capture) for `rows` = batch x beams sequences of at most
  // `max_length` tokens (prompt with its padding plus new tokens). Called before every
  // generation; a backend may keep what it built for an equal shape.
  void prepare(int64_t rows, int64_t max_length);
  // Runs the prompt; returns the last position's logits, [rows, vocab].
  at::Tensor prefill(const StepInputs& in);
  // One new token per row; reorders the cache by parent_rows first. Returns [rows, vocab].
  at::Tensor decode(const StepInputs& in);
  // Speculative decoding: T tokens per row (the last chosen token, then the candidates) written
  // at length() .. length() + T - 1, no parent_rows; returns every position's logits,
  // [rows, T, vocab]. One forward when verifies_at_once(), else T decode steps (the same logits).
  at::Tensor verify(const StepInputs& in);
  // Drops the last n written positions (the candidates not kept): attention no longer reads them
  // and the next write reuses their slots.
  void rewind(int64_t n);

  virtual BackendReport report() const { return {}; }
  // Whether do_prefill takes rows that stand for StepInputs::copies rows each.
  virtual bool shares_prefill() const { return false; }
  // After prepare(): this backend's static decode step for the prepared shape, or nullptr when it
  // has none (then the decoding step runs from the host).
  virtual StaticDecode* static_decode() { return nullptr; }
  // Whether do_verify runs verify()'s positions as one forward.
  virtual bool verifies_at_once() const { return false; }
  // After prepare(): the most candidates one verify() may take after the last chosen token. A
  // cache that holds sliding-window layers in rings rewrites them in place only for steps of up
  // to ring_spare + 1 tokens (WindowLayout); speculative decoding proposes no more than this.
  virtual int64_t max_verify_candidates() const { return std::numeric_limits<int64_t>::max(); }
  // Continuous batching (docs/serving.md): whether forward_ragged() runs. A scheduler refuses a
  // backend without it by name.
  virtual bool runs_ragged() const { return false; }
  // One forward over a ragged batch whose step `cache` holds (set_step); returns the logits of
  // batch.logit_rows, [K, vocab]. prepare() is not called for it. The default throws, naming the
  // backend.
  virtual at::Tensor forward_ragged(const RaggedBatch& batch, PagedCache& cache);
  // The model, read through <gengraph/ext/model.h> (model_shape, run_forward_step, ...).
  const CausalLM& model() const { return *model_; }
  // The prepared shape.
  int64_t rows() const { return rows_; }
  int64_t max_length() const { return max_length_; }
  // Tokens written so far in the current generation (prompt included).
  int64_t length() const { return length_; }

 protected:
  virtual void do_prepare(int64_t rows, int64_t max_length) = 0;
  // `slots`: [T] int64, the cache slots this step writes (length() .. length() + T - 1).
  // do_prefill sees in.copies > 1 only when shares_prefill(); it returns [rows(), vocab].
  virtual at::Tensor do_prefill(const StepInputs& in, const at::Tensor& slots) = 0;
  virtual at::Tensor do_decode(const StepInputs& in, const at::Tensor& slots) = 0;
  // With verifies_at_once(): T tokens per row at `slots` ([T]), every position's logits.
  virtual at::Tensor do_verify(const StepInputs& in, const at::Tensor& slots);
  // For a do_verify that runs one forward per bucket of positions (trace, cuda_graph): T asked
  // positions rounded up to a multiple of `bucket`, capped by the cache's room left.
  static int64_t verify_positions(int64_t t, int64_t bucket, int64_t room);
  // The inputs padded to `positions` with filler: the last token repeated at the positions after
  // it, valid. The filler's logits are dropped and its slots truncated after the forward.
  static StepInputs pad_verify_inputs(const StepInputs& in, int64_t positions);
  // The cache keeps its first `length` positions (KVCache::truncate); by default refused, naming
  // the backend (speculative decoding needs it).
  virtual void do_rewind(int64_t length);

 private:
  void check(const StepInputs& in, int64_t expected_t, const char* call, int64_t rows) const;
  std::shared_ptr<const CausalLM> model_;
  int64_t rows_ = 0, max_length_ = 0;
  int64_t length_ = 0;
  bool prepared_ = false;
};

struct BackendInfo {
  std::string name;
  std::string description;
  // Empty when usable here with these options; otherwise why not (e.g. "needs a CUDA device; none
  // is visible"). Listings ask with empty options, i.e. the defaults.
  std::function<std::string(const BackendOptions& options)> unavailable_reason;
  // Optional: reads every option (throwing on bad values) without a model, so that an experiment
  // can be checked before anything is loaded. Without it, options are checked at creation.
  // `device` is where the model will run (a backend may need a particular one).
  std::function<void(const BackendOptions& options, const c10::Device& device)> check_options;
  // Reads its options (throwing on bad values) and builds the backend for `model`.
  std::function<std::unique_ptr<ForwardBackend>(std::shared_ptr<const CausalLM> model,
                                                const BackendOptions& options)>
      create;
};

// Backends by name. gengraph's own are registered by register_builtin_backends(); a backend from
// another library registers itself with BackendRegistry::instance().add(...).
class BackendRegistry {
 public:
  static BackendRegistry& instance();
  void add(BackendInfo info);  // throws on a duplicate name
  // Takes a backend out (a Python-defined one replaced or unregistered); backends already created
  // from it keep working. Throws for a name not registered.
  void remove(const std::string& name);
  const BackendInfo& get(const std::string& name) const;  // throws listing the known names
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return backends_.count(name) != 0; }
  // Checks the name and, where the backend can without a model (check_options), the options:
  // their values and that none is unknown.
  void validate(const std::string& name, const BackendOptions& options,
                const c10::Device& device) const;
  // get(name).create(...) after validate(), checking availability, and that every option was read.
  std::unique_ptr<ForwardBackend> create(const std::string& name,
                                         std::shared_ptr<const CausalLM> model,
                                         const BackendOptions& options) const;

 private:
  std::map<std::string, BackendInfo> backends_;
};

}  // namespace gengraph

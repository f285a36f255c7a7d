// A model step over a static KV cache: the model's forward for a prompt (prefill) or for one new
// token per row (decode), reading and writing a StaticCache in place. It is the unit a backend
// that owns its buffers runs and a CUDA graph captures. Three kinds are built in, each beside the
// backend it comes from: `eager` (the model's own forward, backends/eager), `trace` (a TorchScript
// trace of it, backends/trace) and `aoti` (an AOTInductor package, backends/aoti). The cuda_graph
// backend wraps whichever its option `step` names, through this interface only: no backend
// includes another. A step kind from another library registers itself with
// ModelStepRegistry::instance().add(...), as a backend does (docs/extending.md).
#pragma once

#include <ATen/Tensor.h>
#include <gengraph/error.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "framework/backend/forward_backend.h"
#include "framework/backend/options.h"

namespace gengraph {

class StaticCache;

// One call of a step. Rows are the cache's rows.
struct StepArgs {
  at::Tensor input_ids;    // [rows, T] int64 (T = 1 for decode)
  at::Tensor positions;    // [rows, T] int64
  at::Tensor slots;        // [T] int64: the cache slots this call writes
  at::Tensor token_valid;  // [rows, T] bool: false on left padding
  StaticCache* cache =
      nullptr;  // written in place; for a shared prompt, first rows of a larger one
  // The cudaStream_t to run on (nullptr: the current stream), so that a CUDA graph capturing on a
  // side stream records a step that takes its stream explicitly (aoti).
  void* cuda_stream = nullptr;
};

class ModelStep {
 public:
  virtual ~ModelStep() = default;
  // The kind's name ("eager", "trace", "aoti", or a registered one).
  virtual std::string kind() const = 0;
  // Before a row count's first decode (a bucket of a backend): a step that specialises per shape
  // (a trace is made per row count) builds it here, not inside a graph capture.
  virtual void prepare_rows(int64_t rows, int64_t max_length) {
    (void)rows;
    (void)max_length;
  }
  // The prompt: [rows, T] tokens -> the last position's logits [rows, vocab].
  virtual at::Tensor prefill(const StepArgs& args) = 0;
  // One token per row -> [rows, vocab]. Reads only its arguments and the cache, never the host,
  // so that it can be captured.
  virtual at::Tensor decode(const StepArgs& args) = 0;
  // Speculative decoding: T tokens per row written at args.slots -> every position's logits
  // [rows, T, vocab]. Like decode it reads only its arguments and the cache, so that it can be
  // captured (a graph per position count). Only when verifies() (the eager and trace steps do).
  virtual bool verifies() const { return false; }
  virtual at::Tensor verify(const StepArgs& args) {
    (void)args;
    throw Error("internal: the " + kind() + " model step does not verify (ModelStep::verifies)");
  }
  // Whether prefill() takes fewer rows than the decode calls that follow (the prompt of an
  // input's beams run once, in the cache's first rows). A trace is made per row count: it does
  // not.
  virtual bool shares_prefill() const { return true; }
  // Whether the step runs the model's forward over any StaticCache, so that its sliding-window
  // layers can be held in rings (WindowLayout); a trace or a package takes the cache's stacked
  // buffers as its inputs, every layer at the whole length.
  virtual bool reads_window_rings() const { return false; }
  // Whether the step runs gengraph's own attention (its kernel choice is reported); a compiled
  // package runs its own.
  virtual bool runs_own_attention() const { return true; }
  virtual BackendReport report() const { return {}; }
};

struct ModelStepInfo {
  std::string name;
  std::string description;
  // The option keys this kind reads (a backend that wraps steps refuses them for another kind,
  // naming the kind they belong to).
  std::vector<std::string> option_keys;
  // Reads this kind's options, throwing on bad values, without a model (the options name the
  // wrapping backend in their errors).
  std::function<void(const BackendOptions& options)> check_options;
  // `warmup`: calls a fresh prefill specialisation (a new trace) runs before its result counts.
  std::function<std::unique_ptr<ModelStep>(const CausalLM& model, const BackendOptions& options,
                                           int64_t warmup)>
      create;
};

class ModelStepRegistry {
 public:
  static ModelStepRegistry& instance();
  void add(ModelStepInfo info);  // throws on a duplicate name
  // Throws naming `where` and listing the known kinds.
  const ModelStepInfo& get(const std::string& name, const std::string& where) const;
  std::vector<std::string> names() const;
  // The kind that reads `key` ("" when none does).
  std::string owner_of(const std::string& key) const;

 private:
  std::map<std::string, ModelStepInfo> kinds_;
};

}  // namespace gengraph

// A model step as a TorchScript module, traced from C++ or loaded from a file (for example one
// traced in Python by tools/trace_hf.py). The contract every such module follows:
//
//   methods prefill and decode, each
//     (input_ids   int64 [rows, T],        T = prompt_length for prefill, 1 for decode
//      positions   int64 [rows, T],
//      slots       int64 [T],              cache positions written by this step
//      token_valid bool  [rows, T],        false on left padding
//      valid       bool  [rows, max_length],                          written in place
//      keys        dtype [layers, rows, kv_heads, max_length, head_dim], written in place
//      values      dtype [layers, rows, kv_heads, max_length, head_dim], written in place)
//     -> logits of the last position [rows, vocab]
//   and an extra file "gengraph.json" (TraceMeta) saying what it was made for.
#pragma once

#include <ATen/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <tuple>

namespace torch::jit {
struct Module;
}  // namespace torch::jit

#include "framework/backend/model_step.h"

namespace gengraph {

class BackendOptions;
class CausalLM;

// The `trace` model step (framework/backend/model_step.h): traces per row count and prompt length,
// options freeze and fuser (read_step_options).
ModelStepInfo trace_step_info();

struct TraceMeta {
  int format = 1;
  std::string model_type;
  std::string
      model_fingerprint;  // identifies the weights a C++ trace has baked in ("" = unchecked)
  int64_t layers = 0, kv_heads = 0, head_dim = 0, vocab_size = 0;
  std::string dtype;  // float32 | bfloat16 | float16
  int64_t rows = 0, prompt_length = 0, max_length = 0;
  std::string made_by;  // "gengraph" or the Python tool

  nlohmann::json to_json() const;
  // Read through JsonAt: a refusal is "<source>: gengraph.json: key 'layers': expected an integer,
  // found ...", with `source` the trace file ("trace file 'a.pt'").
  static TraceMeta from_json(const nlohmann::json& j, const std::string& source);
  // From gengraph.json's text (parse_json_text, then from_json).
  static TraceMeta parse(std::string_view text, const std::string& source);
};

// What the running model and batch need; compared field by field with a file's TraceMeta.
TraceMeta expected_meta(const CausalLM& model, int64_t rows, int64_t prompt_length,
                        int64_t max_length);

struct TraceOptions {
  bool freeze = true;
  bool optimize_for_inference = false;
  // LibTorch's TensorExpr fuser while this step runs: kDefault leaves LibTorch's setting (on
  // CUDA it fuses elementwise ops; on CPU it does not), kNone disables it, kTe enables it on CUDA
  // and CPU (CPU fusion needs a LibTorch built with LLVM; the PyPI wheels are not).
  enum class Fuser { kDefault, kNone, kTe } fuser = Fuser::kDefault;
  int64_t profiling_runs = 1;  // LibTorch's profiled-run count while this step runs; 0 = LibTorch's
};

// Reads the step options the trace and cuda_graph (step: trace) backends share: freeze (true) and
// fuser (default | none | te).
void read_step_options(const BackendOptions& options, TraceOptions& out);

class TracedStep {
 public:
  // Traces prefill (T = meta.prompt_length) and decode from `model` over a static cache.
  static TracedStep trace(const CausalLM& model, const TraceMeta& meta,
                          const TraceOptions& options);
  // Traces a verify step of `t` positions per row (speculative decoding: the last chosen token
  // and t - 1 candidates written at `slots`), returning every position's logits [rows, t, vocab];
  // the module's one method is verify, with the contract's arguments.
  static TracedStep trace_verify(const CausalLM& model, const TraceMeta& meta, int64_t t,
                                 const TraceOptions& options);
  // Loads a module following the contract; refuses, naming the file and the difference, one made
  // for another model, shape or dtype, or one without the methods.
  static TracedStep load(const std::filesystem::path& path, const c10::Device& device,
                         const TraceMeta& expected, const TraceOptions& options = {});
  // Writes the module and its gengraph.json atomically.
  void save(const std::filesystem::path& path) const;

  at::Tensor prefill(const at::Tensor& input_ids, const at::Tensor& positions,
                     const at::Tensor& slots, const at::Tensor& token_valid,
                     const at::Tensor& valid, const at::Tensor& keys, const at::Tensor& values);
  at::Tensor decode(const at::Tensor& input_ids, const at::Tensor& positions,
                    const at::Tensor& slots, const at::Tensor& token_valid, const at::Tensor& valid,
                    const at::Tensor& keys, const at::Tensor& values);
  // Only on a trace_verify() step.
  at::Tensor verify(const at::Tensor& input_ids, const at::Tensor& positions,
                    const at::Tensor& slots, const at::Tensor& token_valid, const at::Tensor& valid,
                    const at::Tensor& keys, const at::Tensor& values);
  const TraceMeta& meta() const { return meta_; }
  const std::string& source() const { return source_; }

 private:
  at::Tensor call(const char* method, const std::vector<at::Tensor>& args, bool& checked);
  std::shared_ptr<torch::jit::Module> module_;
  TraceMeta meta_;
  TraceOptions options_;  // fuser and profiled runs apply to each call (LibTorch keeps them global)
  std::string source_;    // file path or "traced in C++"
  bool checked_prefill_ = false, checked_decode_ = false, checked_verify_ = false;
  int64_t verify_positions_ = 0;  // a trace_verify() step's positions; 0 for prefill/decode
};

// Speculative decoding's verify traces, one per (rows, positions, max_length), each made on first
// use: what the trace backend and the trace model step (cuda_graph's step: trace) share.
class VerifyTraces {
 public:
  VerifyTraces(const CausalLM& model, const TraceOptions& options)
      : model_(model), options_(options) {}
  // The trace for this shape; `made` (when given) says whether this call traced it.
  TracedStep& get(int64_t rows, int64_t positions, int64_t max_length, bool* made = nullptr);
  size_t size() const { return steps_.size(); }
  double seconds() const { return seconds_; }  // spent tracing

 private:
  const CausalLM& model_;
  TraceOptions options_;
  std::map<std::tuple<int64_t, int64_t, int64_t>, TracedStep> steps_;
  double seconds_ = 0;
};

}  // namespace gengraph

// A model step compiled ahead of time by AOTInductor: a `.pt2` package made by
// tools/export_aoti.py (torch.export of the step, compiled to C++/OpenMP kernels on CPU, Triton
// on CUDA), loaded with LibTorch's AOTIModelPackageLoader. One program serves prefill, decode and
// speculative decoding's verify;
// it follows the static-cache contract of backends/trace/traced_step.h with the cache passed per
// layer (an input of its own is written by an in-place scatter; a view into one stacked input
// would be copied whole every step), and the rows, the step's token count and the cache length
// dynamic:
//
//   (input_ids int64 [rows, T], positions int64 [rows, T], slots int64 [T],
//    token_valid bool [rows, T], valid bool [rows, max_length] (written in place),
//    keep int64 [P] (the step's positions whose logits are wanted: the last, or all T),
//    keys_0, values_0, ..., keys_L-1, values_L-1
//        dtype [rows, kv_heads, max_length, head_dim] (written in place))
//   -> logits of the positions `keep` [rows, P, vocab]
//
// The package's metadata (keys "gengraph.*", AotiMeta) says what it was made for; a package made
// for other weights, dtype, device, export format or torch version is refused, by name.
//
// A package of the ragged form (gengraph.form "ragged", tools/export_aoti.py --ragged) holds
// instead one forward over a ragged batch and a paged cache, for continuous batching
// (run_ragged, backends/aoti/aoti_ragged.cpp; docs/aoti.md#the-ragged-form).
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "framework/backend/model_step.h"
#include "framework/model/model_config.h"

namespace torch::inductor {
class AOTIModelPackageLoader;
}  // namespace torch::inductor

namespace gengraph {

class BackendOptions;
class CausalLM;
class PagedCache;
struct RaggedBatch;

// The `aoti` model step (framework/backend/model_step.h): one package for every row count, options
// package, cache_dir, freezing and max_rows (read_aoti_options).
ModelStepInfo aoti_step_info();

// The exported contract's version: tools/export_aoti.py's EXPORT_FORMAT. Cached packages of
// another format are rebuilt; given ones are refused.
// 3: the `keep` input (2 returned the last position's logits only).
constexpr int kAotiExportFormat = 3;

struct AotiMeta {
  int format = 0;
  std::string model_type, model_fingerprint;  // fingerprint "" when the exporter was not told it
  int64_t layers = 0, kv_heads = 0, head_dim = 0, vocab_size = 0;
  std::string dtype, device;          // float32|bfloat16|float16, cpu|cuda
  int64_t max_rows = 0, context = 0;  // the dynamic dimensions' upper bounds
  bool freezing = false;
  // The weights' format (aoti_weights_tag): "float", or the quantized form the package's
  // projections hold and compute with (packages that predate the key are "float").
  std::string weights = "float";
  std::string torch_version, made_by;
  // "step" (the contract above) or "ragged" (run_ragged's); packages that predate the key are
  // "step". `invariant`: the ragged form's projections are gengraph::linear_f32 (--invariant).
  std::string form = "step";
  bool invariant = false;

  // The metadata LibTorch's loader reads from a package (`raw`, keys "gengraph.*"); throws Error
  // naming `path` and the key when one is missing or not of its type.
  static AotiMeta from(const std::unordered_map<std::string, std::string>& raw,
                       const std::filesystem::path& path);

  // Reads the package's metadata (from its zip directory, checked as check_aoti_package
  // (aoti_package.h) does but without the checksums); throws Error naming `path` when it is
  // missing, not an AOTI package, damaged, or lacks a gengraph key.
  static AotiMeta read(const std::filesystem::path& path);
};

// What a package for `model` must say (fingerprint, structure, dtype, device, weights, format,
// torch).
AotiMeta expected_aoti_meta(const CausalLM& model, bool freezing);

// A weight format as the package metadata and the package cache name it: "float", "int8",
// "int4-g32", "bfloat16", with "-float-head" when the output head is kept as loaded
// (tools/export_aoti.py's weights_tag).
std::string aoti_weights_tag(const WeightFormat& format);

// The torch version this build runs, "MAJOR.MINOR.PATCH".
std::string torch_version();

// What to build: tools/export_aoti.py's arguments.
struct AotiExportRequest {
  std::string dtype, device, fingerprint;
  bool freezing = false;
  int64_t max_rows = 1024;
  // model.weights: the exporter quantizes the model's projections as gengraph does, and the
  // package calls gengraph's weight-only operators, which `ops_library` (this process's
  // libgengraph_core) registers in the exporter's Python.
  WeightFormat weights;
  std::string ops_library;
  // The ragged form (--ragged), with its projections through gengraph::linear_f32 (--invariant).
  bool ragged = false, invariant = false;
};

// What building took, as the exporter reported it.
struct AotiBuildReport {
  double export_seconds = 0, compile_seconds = 0;
};

// Writes a package for `model` at `out` (atomically: `out` exists only when complete), or throws
// Error with the exporter's reason. gengraph_core cannot run Python; gengraph::experiments installs
// one that runs tools/export_aoti.py (install_aoti_export_tool), and an embedding program may
// install its own or pass packages by path.
using AotiPackageBuilder = std::function<AotiBuildReport(
    const CausalLM& model, const AotiExportRequest& request, const std::filesystem::path& out)>;
// `identity` names what the builder makes (e.g. a hash of the exporter's sources): it is part of
// the package cache's key, so that packages of an older exporter are rebuilt, not reused.
void set_aoti_package_builder(AotiPackageBuilder builder, std::string identity);
bool has_aoti_package_builder();

struct AotiStepOptions {
  std::string package;    // use this package, or
  std::string cache_dir;  // build one on first use here, keyed by fingerprint and options
  bool freezing = false;
  int64_t max_rows = 1024;
  // The package's form: the ragged one (backend aoti's options ragged and invariant), or the step.
  bool ragged = false, invariant = false;
};

// Reads the options the aoti backend and cuda_graph (step: aoti) share: package, cache_dir,
// freezing, max_rows. `backend` names the backend in errors.
void read_aoti_options(const BackendOptions& options, AotiStepOptions& out);

// The default package cache: $GENGRAPH_AOTI_CACHE, else $XDG_CACHE_HOME/gengraph/aoti, else
// ~/.cache/gengraph/aoti.
std::filesystem::path default_aoti_cache_dir();

class AotiStep {
 public:
  // Loads options.package, or the cached package for `model` (building it first when missing,
  // under a lock so that concurrent processes build it once: FileLock, with its timeout and
  // messages). Every package is checked before it is loaded (check_aoti_package); a cached one
  // first against the SHA-256 recorded when it was built, and rebuilt when damaged. What
  // LibTorch's loader unpacked is removed when loading fails.
  AotiStep(const CausalLM& model, const AotiStepOptions& options, const std::string& backend);
  ~AotiStep();
  AotiStep(const AotiStep&) = delete;
  AotiStep& operator=(const AotiStep&) = delete;

  // Runs the program; the cache tensors are written in place. Returns the last position's logits
  // [rows, vocab], or with `all_positions` every position's [rows, T, vocab] (a verify). Checks
  // rows and cache length against the package's bounds. `keys` and `values` ([layers, rows, ...])
  // may be the first rows of larger buffers (narrowed on dim 1: each layer's slice is then still
  // contiguous), as a shared prefill passes them. `cuda_stream`: the cudaStream_t to run on
  // (nullptr: the current stream), so that a CUDA graph capturing on a side stream records the
  // program.
  at::Tensor run(const at::Tensor& input_ids, const at::Tensor& positions, const at::Tensor& slots,
                 const at::Tensor& token_valid, const at::Tensor& valid, const at::Tensor& keys,
                 const at::Tensor& values, bool all_positions = false, void* cuda_stream = nullptr);

  // The ragged form's forward (backends/aoti/aoti_ragged.cpp): the tokens of `batch` over the
  // step `cache` holds (PagedCache::set_step), its pools written in place at the step's write
  // slots; returns the logits of batch.logit_rows, [K, vocab]. Throws Error naming the package
  // when it is not of the ragged form or the step exceeds its bounds.
  at::Tensor run_ragged(const RaggedBatch& batch, const PagedCache& cache);

  const AotiMeta& meta() const { return meta_; }
  const std::filesystem::path& path() const { return path_; }
  // aoti_built (0|1), aoti_export_seconds, aoti_compile_seconds (this run's build, or the
  // recorded one of a cached package), aoti_load_seconds, aoti_package_bytes, aoti_freezing.
  std::map<std::string, double> report() const;

 private:
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader_;
  AotiMeta meta_;
  std::filesystem::path path_;
  std::string backend_;
  bool built_ = false;
  AotiBuildReport build_;
  double load_s_ = 0;
  // Per-layer views of the stacked cache buffers last passed to run(), and which buffers they are.
  // Per-layer views of the cache buffers, for the last two buffer pairs seen (a cache that
  // reorders by swapping alternates between two).
  struct LayerViews {
    const void* keys = nullptr;
    const void* values = nullptr;
    std::vector<int64_t> sizes;
    std::vector<at::Tensor> views;
  };
  LayerViews layer_views_[2];
  int next_views_ = 0;
  // 0 .. context - 1 on the model's device: `keep` is a view of it (no allocation per step, none
  // inside a CUDA graph capture).
  at::Tensor positions_;
  // The ragged form's per-layer pool views [blocks, block_size, kv_heads, head_dim], made once
  // per pool.
  LayerViews pool_views_;
};

}  // namespace gengraph

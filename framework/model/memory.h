// Memory estimates made before anything is allocated, checked against what the device has
// available, so that a legal but absurd setting (a million layers, a billion rows, a context of
// millions) is refused in a second, naming the estimate and the setting to change, instead of
// allocating until the machine runs out or LibTorch's allocator gives up. An allocation that fails
// all the same is reported the same way (with_allocation_errors), never with LibTorch's own text.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <exception>
#include <string>

#include "framework/model/model_config.h"

namespace gengraph {

struct Architecture;

// Bytes of the model's weights in `dtype`: the architecture's own tensor list for one and for two
// layers, extrapolated to the configured count (so a million layers costs no million-entry list).
double weight_bytes(const Architecture& arch, const ModelConfig& config, c10::ScalarType dtype);

// Bytes of a KV cache (keys and values, every layer) for `rows` x `max_length` positions.
// With ring_spare >= 0 the sliding-window layers count at window + ring_spare slots where that is
// fewer (the rings of WindowLayout, which the built-in caches hold them in by default).
double kv_cache_bytes(const ModelConfig& config, c10::ScalarType dtype, double rows,
                      double max_length, int64_t ring_spare = -1);

// The shape of one generate() call, for estimate_generation_memory. Doubles: an absurd setting
// (a billion rows) is estimated without overflow.
struct GenerationShape {
  double inputs = 1;          // prompts in the batch
  double rows_per_input = 1;  // num_beams, or num_return_sequences when sampling
  double prompt_length = 1;   // the longest prompt, in tokens
  double max_length = 1;      // prompt plus new tokens
  // Beam search (num_beams > 1, grouped or not): it keeps 2 x num_beams candidates per input and
  // the finished hypotheses, token histories of max_length each, and ranks every row's scores.
  bool beam_search = false;
  // The prompt runs once per input and its cache is copied to the input's rows (the backends'
  // share_prefill, the default); false: once per row.
  bool shared_prefill = true;
  // A cache preallocated for max_length (eager's cache: static, trace, aoti, cuda_graph): the
  // prefill attends over max_length slots, and beam search's reorder holds a second copy of it.
  bool static_cache = false;
  // The cache holds the sliding-window layers in rings of window + ring_spare slots; -1: not.
  int64_t ring_spare = -1;
};

// What a generation needs, by part. The prefill's and the decode steps' temporaries are not held
// at the same time, so the total is weights + KV cache + the larger of the two + working memory.
// The model's form counts: config.fused false (transformers' op-by-op formulation) holds more
// activations.
struct MemoryEstimate {
  double weights = 0;   // the model's weights (0 when the estimate leaves them out)
  double kv_cache = 0;  // keys and values of every row, max_length positions
  double prefill = 0;   // the prompt's forward: attention masks (prompt x attended length per
                        // row: quadratic in the prompt), attention, activations
  double decode = 0;    // one decode step: masks, activations, logits and their float copies
  double search = 0;    // the strategy's state and temporaries: token histories, scores, top-k
  double working = 0;   // LibTorch's first-call overhead (kernels, thread pools)
  double total() const;
  // "weights 498 MB, KV cache 1.2 GB, prefill 3.0 GB (masks and attention over 60000 x 60000
  // positions), decode step 12 MB, search 3.4 GB, working memory 32 MB".
  std::string breakdown() const;
  // For breakdown(): the prefill's rows x prompt x attended positions.
  double prefill_rows = 0, prefill_queries = 0, prefill_keys = 0;
};

// The estimate for `shape` on a model of `config` in `dtype`, calibrated against peaks measured on
// CPU (docs/reliability.md): never below the measured extra resident memory for long prompts
// and many beams, with a margin. The weights are included when `arch` is given.
MemoryEstimate estimate_generation_memory(const ModelConfig& config, c10::ScalarType dtype,
                                          const GenerationShape& shape,
                                          const Architecture* arch = nullptr);

// "1.5 GB", "812 MB", "12 KB".
std::string human_bytes(double bytes);

// Throws Error when `bytes` exceed what `device` has available (CPU: MemAvailable, bounded by a
// cgroup memory limit and the process's own ulimit -v / -d; CUDA: free device memory plus what the
// caching allocator holds unused): "<what> needs about X, more than the Y available on <device>;
// <advice>", and when a limit decided Y, "; or raise <the limit>" (e.g. "the process's
// address-space limit (ulimit -v 4000000)"). Does nothing when the device cannot be asked (a CUDA
// device validated on a machine without one).
void check_memory(const std::string& what, double bytes, const c10::Device& device,
                  const std::string& advice);

// Whether `e` is an allocation failure: std::bad_alloc, c10::OutOfMemoryError, or a c10::Error
// whose message says LibTorch could not allocate ("can't allocate", "out of memory").
bool is_allocation_failure(const std::exception& e);

// Called inside a catch block: when the exception being handled is an allocation failure, throws
// Error("<what> ran out of memory on <device>: an allocation of N failed; gengraph estimated about
// X; Y available on <device> now; <advice>[; or raise <the limit>]"), without LibTorch's text;
// otherwise rethrows the exception unchanged. `estimate_bytes` <= 0 leaves the estimate out.
[[noreturn]] void rethrow_allocation_failure(const std::string& what, double estimate_bytes,
                                             const c10::Device& device, const std::string& advice);

// Runs f() and turns an allocation failure inside it into that Error.
template <class F>
auto with_allocation_errors(const std::string& what, double estimate_bytes,
                            const c10::Device& device, const std::string& advice, F&& f)
    -> decltype(f()) {
  try {
    return f();
  } catch (...) {
    rethrow_allocation_failure(what, estimate_bytes, device, advice);
  }
}

}  // namespace gengraph

// `trace`: the model step as a TorchScript trace over the static KV cache, made from C++ (and kept
// in memory per batch shape, optionally on disk) or loaded from a file traced in Python.
// Options:
//   freeze: true|false (true)              torch::jit::freeze the traced module
//   optimize_for_inference: true|false (false)
//   fuser: default|none|te (default)        LibTorch's TensorExpr fuser for CPU and GPU
//   (process-wide) profiling_runs: N (1)                   warm-up calls per new trace before
//   timing starts cache_dir: PATH ("")                    save traces there and reuse them in later
//   runs file: PATH ("")                         use this trace (e.g. from tools/trace_hf.py)
//   instead
#pragma once

#include "framework/backend/backend_registry.h"

namespace gengraph {

BackendInfo trace_backend_info();

}  // namespace gengraph

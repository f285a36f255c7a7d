// `aoti`: the model step compiled ahead of time by AOTInductor (torch.export, then generated
// C++/OpenMP kernels on CPU or Triton on CUDA), run over a static KV cache through LibTorch's
// AOTIModelPackageLoader. Options:
//   package: PATH ("")       a package made by tools/export_aoti.py for these weights, or else
//   cache_dir: PATH ("")     where packages are built on first use and kept, keyed by the weights'
//                            fingerprint, dtype, device and options ("" = default_aoti_cache_dir)
//   freezing: true|false (false)   Inductor freezing: weights constant-folded and prepacked
//   max_rows: N (1024)       the largest batch x beams a built package accepts (at least 2)
#pragma once

#include "framework/backend/backend_registry.h"

namespace gengraph {

BackendInfo aoti_backend_info();

}  // namespace gengraph

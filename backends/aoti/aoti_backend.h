// `aoti`: the model step compiled ahead of time by AOTInductor (torch.export, then generated
// C++/OpenMP kernels on CPU or Triton on CUDA), run over a static KV cache through LibTorch's
// AOTIModelPackageLoader. Options:
//   package: PATH ("")       a package made by tools/export_aoti.py for these weights, or else
//   cache_dir: PATH ("")     where packages are built on first use and kept, keyed by the weights'
//                            fingerprint, dtype, device and options ("" = default_aoti_cache_dir)
//   freezing: true|false (false)   Inductor freezing: weights constant-folded and prepacked
//   max_rows: N (1024)       the largest batch x beams a built package accepts (at least 2); of
//                            the ragged form, the most sequences in one step
//   ragged: true|false (false)     the package's ragged form (tools/export_aoti.py --ragged): the
//                            backend then runs continuous batching's ragged batches over a paged
//                            cache (runs_ragged), and not generate()
//   invariant: true|false (false)  with ragged: every projection through gengraph::linear_f32,
//                            batch invariant under kernels::BatchInvariant (float32, CPU)
#pragma once

#include "framework/backend/backend_registry.h"

namespace gengraph {

BackendInfo aoti_backend_info();

}  // namespace gengraph

// What an architecture expects of its weights, and how they are filled: from a checkpoint (with
// name, shape and dtype checks) or at random from a seed.
#pragma once

#include <ATen/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "framework/model/model_config.h"

namespace gengraph {

class Checkpoint;

using WeightMap = std::map<std::string, at::Tensor>;

enum class Init { kNormal, kZeros, kOnes };

struct TensorSpec {
  std::string name;            // canonical name, as in transformers' state dict
  std::vector<int64_t> shape;  // expected shape
  Init init = Init::kNormal;   // for random weights
};

// How checkpoint names map onto an architecture's canonical names.
struct NameRules {
  // Checkpoint keys are canonical after removing one of these prefixes (e.g. older GPT-2 files
  // store "h.0..." where transformers now saves "transformer.h.0...").
  std::function<std::string(const std::string&)> canonical;
  // Keys that are buffers or tied copies, tolerated in a checkpoint and not loaded.
  std::function<bool(const std::string&)> ignorable;
};

struct LoadOptions {
  at::ScalarType dtype = at::kFloat;
  c10::Device device = c10::Device(c10::kCPU);
  // How the decoder computes (ModelConfig::fused): fused projections and one-kernel forms (true),
  // or transformers' op-by-op formulation (false), kept for parity checks.
  bool fused = true;
  // Refuse a checkpoint tensor holding NaN or infinite values (or values the target dtype cannot
  // hold), naming the tensor and its file, and random weights drawn too wide for the dtype: one
  // pass over each tensor as it is loaded. false loads such weights as they are (experiment key
  // model.check_weights).
  bool check_weights = true;
  // Weight-only quantization of the linear layers (ModelConfig::weights; the fused form only).
  WeightFormat weights;
};

// "[576, 49152]": a shape as errors about weights write it.
std::string shape_str(at::IntArrayRef s);

// Loads exactly `specs` from `ckpt`: a missing tensor, an unexpected one, or a shape that differs
// is an error naming the tensor and the file, and so is a non-finite value (options.check_weights).
// Converts to options.dtype/device one tensor at a time, so peak host memory stays near one copy of
// the weights.
WeightMap load_weights(const Checkpoint& ckpt, const std::vector<TensorSpec>& specs,
                       const NameRules& rules, const LoadOptions& options);

// Random weights: normal(0, std) for kNormal, zeros/ones otherwise, from a fixed seed. A draw that
// overflows the dtype (an absurd std) is an error naming the tensor (options.check_weights).
WeightMap random_weights(const std::vector<TensorSpec>& specs, double std, uint64_t seed,
                         const LoadOptions& options);

}  // namespace gengraph

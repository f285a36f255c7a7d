// A GGUF file as a gengraph model: its metadata as the config.json document of the architecture
// it names, its tensors under that architecture's names (docs/gguf.md).
//
//   general.architecture   model_type      notes
//   llama                  llama           q and k rows un-permuted (llama.cpp's converter
//                                          interleaves the rotary halves; this undoes it)
//   qwen2                  qwen2
//   gpt2                   gpt2            the Conv1D weights transposed back to [in, out]
//
// Mistral and SmolLM2 files are written as llama. Any other architecture is refused naming the
// supported ones.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "framework/model/gguf.h"
#include "framework/model/model_registry.h"
#include "framework/model/stored_weights.h"
#include "framework/model/weights.h"

namespace gengraph {

// The config.json document (transformers' keys for the model type) that the file's metadata
// says: shapes, norm epsilon, rotary base and scaling, context length, special token ids, whether
// the head is tied (no output.weight). A key the architecture needs and the file lacks, or a value
// gengraph cannot run (an unknown rotary scaling, a partial rotary dimension), is an Error naming
// the file and the key.
nlohmann::json gguf_config_document(const GgufFile& file);

// Every weight `specs` names, from the file's tensors: dequantized to float32 (GgufFile::to_float),
// laid out as transformers' checkpoint would hold it, shape-checked, checked finite
// (options.check_weights), then in options.dtype on options.device. A tensor the architecture
// needs and the file lacks, or one the file holds and no spec takes, is an Error naming it.
// With options.weights int4 in groups of 32, the Q4_0 and Q4_1 tensors' levels, scales and zeros
// also go to `stored` (when given) under their canonical names, so that the projections take
// them as they are (Q4_1: value = q x d + m; Q4_0: q x d - 8 d), bit for bit the file's values;
// with int8 in blocks of 32 (group_size 32), the Q8_0 tensors' (q x d).
WeightMap gguf_weights(const GgufFile& file, const ModelConfig& config,
                       const std::vector<TensorSpec>& specs, const LoadOptions& options,
                       StoredWeights* stored = nullptr);

// "llama: 272 tensors (Q4_1 210, F32 61, Q8_0 1)": what describe() and the load report show.
std::string gguf_summary(const GgufFile& file);

}  // namespace gengraph

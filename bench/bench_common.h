// Shared pieces of the benchmark binary: cached models and the size grid.
#pragma once

#include <c10/core/Device.h>

#include <memory>
#include <string>
#include <vector>

#include "framework/model/causal_lm.h"

namespace gengraph::bench {

// The device models are built on: GENGRAPH_BENCH_DEVICE (cpu, cuda, cuda:N), default cpu.
c10::Device bench_device();

// A random-weight model for a preset (cached: built once per process).
// The preset's random-weight model on the bench device, built once per (preset, form).
std::shared_ptr<const CausalLM> preset_model(const std::string& preset, bool fused = true);

// True under GENGRAPH_BENCH_SMOKE=1: the CI smoke run, which shrinks every grid.
bool bench_smoke();

// True under GENGRAPH_BENCH_OP_NAMES=1: benchmarks that count operators also print them by name
// (per step, to stderr), to see where a count comes from.
bool bench_op_names();

// Model presets the benchmarks sweep ("gpt2-tiny" only under GENGRAPH_BENCH_SMOKE=1).
std::vector<std::string> bench_presets();

void register_backend_benchmarks();

// loop/<strategy>: the decoding loop's own cost per token, over a fixed-logits backend
// (bench/bench_loop.cpp).
void register_loop_benchmarks();

// kernels/<format>/<shape>: one projection per weight format on decode shapes
// (bench/bench_kernels.cpp).
void register_kernel_benchmarks();

// processor/<name>, processor/chain_sampling_default and strategy_step/<strategy> on CPU, over
// vocab x rows (bench/bench_decoding.cpp).
void register_decoding_benchmarks();

// text/*: the native tokenizer against the Python tokenizer path, on the real model's tokenizer
// (bench/bench_text.cpp); not registered when the real model is not set up.
void register_text_benchmarks();

// serving/*: the scheduler's step with the batch-invariant kernels and the fastest ones, on a
// SmolLM2-135M-shaped model (bench/bench_serving.cpp).
void register_serving_benchmarks();

}  // namespace gengraph::bench

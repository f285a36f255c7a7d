#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repository root, with gpu_carry/ carried (see gpu_prepare.sh).
# Usage: bash scripts/gpu_check.sh [STAGE...]   (default: tests seed gpt2 bench, about 5 minutes)
# Stages, each time-boxed and writing its results to $OUT as it ends, so a stage cut short costs
# only itself, and a rerun can name just the stages that need it:
#   tests    the GPU test suite: replay bit-identical to the uncaptured step (float32, bfloat16;
#            the whole-step graph too; int8, int4 and bfloat16 weights), the int4 kernel's
#            product against its weight's,
#            every backend's tokens equal to eager in float32, bfloat16 logits as close to eager's
#            as bfloat16 eager's are to float32; continuous batching on cuda_graph
#            (CudaGraphRaggedGpu*: the scheduler's steps captured per bucket of tokens, replay
#            bit-identical to the uncaptured padded step, greedy tokens equal to eager's, a new
#            pool captured again; paged_attention captured and following its inputs) (90 s)
#   seed     the seed's workload: GPT-J-6B shape, bf16, 4 beams, 32 in / 32 out, on every gengraph
#            backend beside transformers' generate() eager and jit-traced (the seed PR's two
#            figures); 1 warm-up, 3 repeats (210 s)
#   gpt2     decode latency per token, GPT-2-small shape, batch 1 and 8: eager, trace, cuda_graph
#            and transformers' generate(), in one run, with the share of read and copy bandwidth (70 s)
#   bench    Google Benchmark prefill/decode-step and loop entries on CUDA (60 s; 40 s on the H200 without loop/)
#   compile  not in the default: the seed's workload on eager and cuda_graph beside transformers'
#            static cache + torch.compile (compiling GPT-J-6B takes minutes; 290 s)
#   aoti     not in the default: GPT-2-small shape, batch 1 and 8, on aoti and cuda_graph with
#            step: aoti beside eager and cuda_graph; exporting and compiling the package (Triton)
#            comes first, once (300 s)
#   quant    not in the default: the seed's workload with weight-only int8, int4 (groups of 32)
#            and bfloat16 weights (model.weights, docs/quantization.md) beside the float rows, on
#            eager, eager-static and cuda_graph (captured), one sweep; the int8 and int4 products
#            are LibTorch's _weight_int8pack_mm and _weight_int4pack_mm on CUDA (300 s)
#   spec     not in the default: speculative decoding (prompt lookup) on eager and cuda_graph,
#            whose verify graphs (one per bucket of positions, captured on first use) have not
#            run on a GPU yet, beside plain greedy; GPT-2-small shape, batch 1 (120 s)
# A stage's limit can be changed for a rerun: T_TESTS, T_SEED, T_GPT2, T_BENCH, T_COMPILE, T_AOTI,
# T_QUANT, T_SPEC
# (seconds).
# With 15 device-minutes a session, the default pass leaves room for a rerun or for `compile`.
# Everything lands in $OUT (at most 8 files come back): gpu_check.log and the results/PNGs.
set -uo pipefail
OUT="${OUT:-/tmp/gengraph_gpu_out}"
mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
exec > >(tee "$LOG") 2>&1
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
TORCH_LIB="$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')"
NV_LIBS="$(python3 - <<'PY'
import glob, os, site
dirs = set()
for sp in site.getsitepackages():
    for f in glob.glob(os.path.join(sp, "nvidia", "**", "lib", "*.so*"), recursive=True):
        dirs.add(os.path.dirname(f))
print(":".join(sorted(dirs)))
PY
)"
export LD_LIBRARY_PATH="$ROOT/gpu_carry/lib:$TORCH_LIB:$NV_LIBS:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export GENGRAPH_ROOT="$ROOT" GENGRAPH_PYTHON=python3 GENGRAPH_FIXTURES_DIR="$ROOT/tests/fixtures"
BIN="$ROOT/gpu_carry/bin"
stage() { echo; echo "=== $1 ($(date -u +%H:%M:%S))"; }
# The new results beside the committed ones (docs/results/), row by row: what changed since the
# last GPU run (machine drift included; a transformers peer's row shows it).
compare_with_committed() {
  if [ -f "docs/results/$1.json" ] && [ -f "$OUT/$1.json" ]; then
    echo "--- $1: committed (before) vs this run (after)"
    "$BIN/gengraph" compare "docs/results/$1.json" "$OUT/$1.json" || echo "(compare failed: exit $?)"
  fi
}

stage "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
ldd "$BIN/gengraph_tests" | grep -E "torch|c10|yaml|benchmark|not found"
"$BIN/gengraph" backends

STAGES=("$@")
[ ${#STAGES[@]} -eq 0 ] && STAGES=(tests seed gpt2 bench)
for st in "${STAGES[@]}"; do
  case "$st" in
  tests)
    stage "tests: the GPU test suite"
    # cuBLAS is bit-reproducible across streams (capture runs on a side stream) only with a fixed
    # workspace configuration (NVIDIA's cuBLAS docs, "Results reproducibility").
    CUBLAS_WORKSPACE_CONFIG=:4096:8 timeout "${T_TESTS:-90}" "$BIN/gengraph_tests" --gtest_filter='*CudaGraph*:WholeStepCuda*:QuantizationGpu*' --gtest_brief=1
    echo "gpu tests exit: $?" ;;
  seed)
    stage "seed: GPT-J-6B shape, bf16, beam 4, 32/32"
    timeout "${T_SEED:-210}" "$BIN/gengraph" run configs/seed_gptj6b_beam4.yaml --output "$OUT/seed_gptj6b_beam4.json" \
      --set plot="$OUT/seed_gptj6b_beam4.png" --set 'peers=[hf_eager, hf_jit_trace]' \
      --set run.warmup=1 --set run.repeats=3 --set run.peer_timeout_s=60
    echo "seed exit: $? (3: results written, some peer failed or timed out)"
    compare_with_committed seed_gptj6b_beam4 ;;
  gpt2)
    stage "gpt2: decode latency, GPT-2-small shape, batch 1 and 8"
    timeout "${T_GPT2:-70}" "$BIN/gengraph" run configs/gpu_decode_gpt2.yaml --output "$OUT/gpu_decode_gpt2.json" \
      --set plot="$OUT/gpu_decode_gpt2.png" --set 'peers=[hf_eager]' --set run.repeats=5 \
      --set run.peer_timeout_s=25
    echo "gpu_decode_gpt2 exit: $? (3: results written, some peer failed or timed out)"
    compare_with_committed gpu_decode_gpt2 ;;
  bench)
    stage "bench: Google Benchmark on CUDA"
    GENGRAPH_BENCH_DEVICE=cuda timeout "${T_BENCH:-60}" "$BIN/gengraph_bench" --benchmark_filter='^(prefill|decode_step)/gpt2|^loop/' \
      --benchmark_min_time=0.05 --benchmark_out="$OUT/bench_gpu.json" --benchmark_out_format=json
    echo "bench exit: $?" ;;
  compile)
    stage "compile: the seed's workload beside static cache + torch.compile"
    timeout "${T_COMPILE:-290}" "$BIN/gengraph" run configs/seed_gptj6b_beam4.yaml --output "$OUT/seed_gptj6b_beam4_compile.json" \
      --set plot="$OUT/seed_gptj6b_beam4_compile.png" --set 'backends=[eager, cuda_graph]' \
      --set 'peers=[hf_static_compile]' --set baseline=eager --set run.warmup=1 --set run.repeats=3 \
      --set run.peer_timeout_s=250
    echo "compile exit: $? (3: results written, the peer failed or timed out)" ;;
  aoti)
    stage "aoti: GPT-2-small shape, the AOTInductor package, batch 1 and 8"
    timeout "${T_AOTI:-300}" "$BIN/gengraph" run configs/gpu_decode_gpt2.yaml --output "$OUT/gpu_decode_gpt2_aoti.json" \
      --set plot="$OUT/gpu_decode_gpt2_aoti.png" \
      --set 'backends=[eager, cuda_graph, aoti, {name: cuda_graph, label: cuda_graph-aoti, options: {step: aoti}}]' \
      --set 'peers=[]' --set run.repeats=5
    echo "aoti exit: $?" ;;
  quant)
    stage "quant: the seed's workload with int8, int4 and bfloat16 weights"
    timeout "${T_QUANT:-300}" "$BIN/gengraph" run configs/seed_gptj6b_beam4.yaml --output "$OUT/seed_gptj6b_beam4_quant.json" \
      --set plot="$OUT/seed_gptj6b_beam4_quant.png" \
      --set 'backends=[eager, {name: eager, label: eager-static, options: {cache: static}}, cuda_graph]' \
      --set 'peers=[]' --set baseline=eager --set 'sweep={model.weights: [float, int8, int4, bfloat16]}' \
      --set run.warmup=1 --set run.repeats=3
    echo "quant exit: $?" ;;
  spec)
    stage "spec: speculative decoding, eager and cuda_graph verify graphs"
    timeout "${T_SPEC:-120}" "$BIN/gengraph" run configs/gpu_speculative.yaml --output "$OUT/gpu_speculative.json"
    echo "spec exit: $?" ;;
  *) echo "unknown stage '$st' (tests, seed, gpt2, bench, compile, aoti, quant, spec)"; exit 2 ;;
  esac
done
stage "done"

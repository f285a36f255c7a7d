#!/usr/bin/env bash
# Run ON THE GPU MACHINE from the repository root, with gpu_carry/ carried (see gpu_prepare.sh).
# One pass, each stage time-boxed so that the whole stays inside one 600 s device call; stages run
# in order of what the open issues need most, and each writes its results to $OUT as it ends, so a
# stage cut short costs only itself:
#   1. the GPU test suite: replay bit-identical to the uncaptured step (float32, bfloat16), every
#      backend's tokens equal to eager in float32, bfloat16 logits as close as bfloat16 eager's
#   2. the seed's workload: GPT-J-6B shape, bf16, 4 beams, 32 in / 32 out, with the three
#      transformers peers (each stopped after run.peer_timeout_s and recorded as failed if so)
#   3. decode latency per token, GPT-2-small shape, batch 1 and 8: eager, trace, cuda_graph and
#      transformers' generate() (eager and static-cache + torch.compile), in one run
#   4. Google Benchmark prefill/decode-step entries on CUDA
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

stage "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
ldd "$BIN/gengraph_tests" | grep -E "torch|c10|yaml|benchmark|not found"
"$BIN/gengraph" backends

stage "1. GPU tests"
timeout 110 "$BIN/gengraph_tests" --gtest_filter='*CudaGraph*' --gtest_brief=1
echo "gpu tests exit: $?"

stage "2. the seed's workload (GPT-J-6B shape, bf16, beam 4, 32/32)"
timeout 300 "$BIN/gengraph" run configs/seed_gptj6b_beam4.yaml --output "$OUT/seed_gptj6b_beam4.json" \
  --set plot="$OUT/seed_gptj6b_beam4.png" --set run.peer_timeout_s=70
echo "seed exit: $? (3: results written, some peer failed or timed out)"

stage "3. decode latency, GPT-2-small shape, batch 1 and 8"
timeout 130 "$BIN/gengraph" run configs/gpu_decode_gpt2.yaml --output "$OUT/gpu_decode_gpt2.json" \
  --set plot="$OUT/gpu_decode_gpt2.png" --set run.peer_timeout_s=45
echo "gpu_decode_gpt2 exit: $? (3: results written, some peer failed or timed out)"

stage "4. Google Benchmark on CUDA"
GENGRAPH_BENCH_DEVICE=cuda timeout 35 "$BIN/gengraph_bench" --benchmark_filter='^(prefill|decode_step)/gpt2' \
  --benchmark_min_time=0.1 --benchmark_out="$OUT/bench_gpu.json" --benchmark_out_format=json
echo "bench exit: $?"
stage "done"

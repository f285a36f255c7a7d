#!/usr/bin/env bash
# The soak: GENERATIONS (default 10000) generations in one process through the public Engine,
# mixing tiny GPT-2, LLaMA and GPT-J models, the eager (growing and static cache), trace and
# cuda_graph (uncaptured) backends, and greedy, sampling, beam, beam-sample, diverse-beam and
# penalised strategies; resident memory is recorded every 100 generations, plotted, and judged
# (tools/plot_soak.py: flat after the warm-up, or exit 1). Not part of the test command: minutes.
# Usage: scripts/soak.sh [GENERATIONS] [OUT_PREFIX]   (default docs/results/soak)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
N="${1:-10000}"; OUT="${2:-$ROOT/docs/results/soak}"
"$ROOT/scripts/setup.sh" gengraph_soak >/dev/null
mkdir -p "$(dirname "$OUT")"
"$ROOT/build/bench/gengraph_soak" "$N" "$OUT.csv"
"$ROOT/.venv/bin/python" "$ROOT/tools/plot_soak.py" "$OUT.csv" "$OUT.png"

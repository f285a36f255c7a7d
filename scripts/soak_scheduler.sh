#!/usr/bin/env bash
# The scheduler's soak: REQUESTS (default 10000) requests through one gengraph::Scheduler in one
# process, from 4 threads, mixed settings, cancels and stopping streams, a pool small enough to
# preempt, prefix sharing on; resident memory and blocks in use recorded every 100 finished
# requests, plotted and judged (tools/plot_soak.py: flat after the warm-up, or exit 1); the
# program itself exits 1 when a block is left in use or a request failed. Not part of the test
# command: minutes.
# Usage: scripts/soak_scheduler.sh [REQUESTS] [OUT_PREFIX]   (default docs/results/soak_scheduler)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
N="${1:-10000}"; OUT="${2:-$ROOT/docs/results/soak_scheduler}"
"$ROOT/scripts/setup.sh" gengraph_soak_scheduler >/dev/null
mkdir -p "$(dirname "$OUT")"
"$ROOT/build/bench/gengraph_soak_scheduler" "$N" "$OUT.csv"
"$ROOT/.venv/bin/python" "$ROOT/tools/plot_soak.py" "$OUT.csv" "$OUT.png"

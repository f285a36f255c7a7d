#!/usr/bin/env bash
# Compares two gengraph_bench JSON outputs (--benchmark_out=FILE --benchmark_out_format=json) with
# Google Benchmark's own compare.py, from Debian's libbenchmark-tools (scripts/setup.sh installs
# it, with the Debian scipy it needs). Prints, per entry, the relative change of time from BEFORE
# to AFTER (negative: faster) and, with --benchmark_repetitions >= 2 in both runs, a Mann-Whitney
# U test of whether the difference is more than noise.
# Usage: scripts/bench_compare.sh BEFORE.json AFTER.json [compare.py options, e.g. -a]
set -euo pipefail
TOOL=/usr/share/benchmark/compare.py
if [ $# -lt 2 ]; then
  echo "usage: scripts/bench_compare.sh BEFORE.json AFTER.json [compare.py options]" >&2
  exit 2
fi
BEFORE="$1"; AFTER="$2"; shift 2
for f in "$BEFORE" "$AFTER"; do
  [ -f "$f" ] || { echo "bench_compare: '$f' does not exist" >&2; exit 1; }
  /usr/bin/python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert "benchmarks" in d' "$f" 2>/dev/null ||
    { echo "bench_compare: '$f' is not a Google Benchmark JSON output (no 'benchmarks' list)" >&2; exit 1; }
done
[ -f "$TOOL" ] || { echo "bench_compare: $TOOL is missing; run scripts/setup.sh (it installs libbenchmark-tools)" >&2; exit 1; }
exec /usr/bin/python3 "$TOOL" --no-color "$@" benchmarks "$BEFORE" "$AFTER"

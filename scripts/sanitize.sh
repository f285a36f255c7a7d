#!/usr/bin/env bash
# gengraph's code under AddressSanitizer + UndefinedBehaviorSanitizer (LibTorch stays as shipped):
# builds build-sanitize/ (the libraries, the CLI and the test binary; no benchmarks) at -O1 -g1 (the
# kernels at -O2; the tests' own code with AddressSanitizer only: tests/CMakeLists.txt) and runs the
# unit, parity, CLI and hostile-input tests there in two shards at once, the native tokenizer's
# included. Left out, and why: the tests that spawn the Python tools for gengraph's own work
# (peers, the Python tokenizer fallback and chat templates, Python traces: they test Python, and
# take minutes), the SentencePiece model (its module needs RTLD_DEEPBIND, which AddressSanitizer
# refuses), and the CUDA tests (no GPU). Run by scripts/test.sh before the main suite;
# GENGRAPH_SANITIZERS=0 skips. docs/reliability.md has its cost.
# Usage: scripts/sanitize.sh [extra gtest filter]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${GENGRAPH_SANITIZE_BUILD_DIR:-$ROOT/build-sanitize}"
export CCACHE_BASEDIR="$ROOT"
export CCACHE_SLOPPINESS="pch_defines,time_macros,include_file_mtime,include_file_ctime"
export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-8G}"
# -g puts the build folder into the objects, and ccache then keys them by it; a fresh clone in
# another folder would miss every one. The debug paths are relative (CCACHE_BASEDIR) anyway.
export CCACHE_NOHASHDIR=1
TORCH_PREFIX="$("$ROOT/.venv/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
# -O1 -g1: line numbers in every report at a fraction of -O2 -g's compile time (the times and the
# kernels' -O2: CMakeLists.txt). Configured every time: a folder configured with other flags is
# brought to these.
echo "[sanitize] configuring $BUILD (address,undefined; -O1 -g1)" >&2
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
      -DGENGRAPH_SANITIZE=address,undefined -DGENGRAPH_BUILD_BENCH=OFF -DGENGRAPH_BUILD_PYTHON=OFF \
      -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" >/dev/null
echo "[sanitize] building" >&2
cmake --build "$BUILD" -j "${GENGRAPH_JOBS:-2}" --target gengraph_tests gengraph_cli
# LibTorch is not instrumented: its containers carry no annotations (container-overflow would be a
# false alarm) and it keeps allocations for the process's life (leak reports would be its own).
export ASAN_OPTIONS="detect_leaks=0:detect_container_overflow=0:abort_on_error=0:halt_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
FILTER="-*Peer*:*peer*:Cli.Text*:Cli.ATokenizer*:*PythonTokenizer*:HostileChatTemplate.A*:*SentencePiece*:*Interrupt*:*PythonTrace*:*CudaGraphGpu*${1:+:$1}"
cd "$BUILD/tests"
# The tests run in GENGRAPH_JOBS shards at once (GoogleTest's sharding: each test in exactly one),
# each shard's output in a log of its own, shown when that shard fails.
SHARDS="${GENGRAPH_JOBS:-2}"
LOGS="$(mktemp -d)"
trap 'rm -rf "$LOGS"' EXIT
echo "[sanitize] gengraph_tests --gtest_filter='$FILTER' in $SHARDS shards" >&2
PIDS=()
for ((i = 0; i < SHARDS; i++)); do
  GENGRAPH_ROOT="$ROOT" GTEST_TOTAL_SHARDS="$SHARDS" GTEST_SHARD_INDEX="$i" \
    ./gengraph_tests --gtest_filter="$FILTER" --gtest_brief=1 \
    --gtest_output="json:$LOGS/shard$i.json" >"$LOGS/shard$i.log" 2>&1 &
  PIDS+=($!)
done
FAILED=0
for ((i = 0; i < SHARDS; i++)); do
  if wait "${PIDS[$i]}"; then
    grep -E "^\[(==========|  PASSED  |  SKIPPED )\] [0-9]+ tests?[ ,.]" "$LOGS/shard$i.log" |
      sed "s/^/[sanitize] shard $i: /" >&2 || true
  else
    echo "[sanitize] shard $i of $SHARDS failed; its output:" >&2
    cat "$LOGS/shard$i.log" >&2
    FAILED=1
  fi
done
# The slowest tests here, for whoever trims this stage's time next.
python3 - "$LOGS" >&2 <<'PY' || true
import glob, json, sys
times = []
for path in glob.glob(sys.argv[1] + "/shard*.json"):
    for suite in json.load(open(path)).get("testsuites", []):
        for t in suite.get("testsuite", []):
            if t.get("status") == "RUN":  # not the disabled ones
                seconds = float(t.get("time", "0s").rstrip("s"))
                times.append((seconds, suite["name"] + "." + t["name"]))
times.sort(reverse=True)
print("[sanitize] %d tests, %.0f s in all; the slowest:" % (len(times), sum(t for t, _ in times)))
for t, name in times[:8]:
    print("[sanitize]   %6.1f s  %s" % (t, name))
PY
exit "$FAILED"

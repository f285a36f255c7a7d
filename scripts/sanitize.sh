#!/usr/bin/env bash
# gengraph's code under AddressSanitizer + UndefinedBehaviorSanitizer (LibTorch stays as shipped):
# builds build-sanitize/ (the libraries, the CLI and the test binary; no benchmarks) and runs the
# unit, parity, CLI and hostile-input tests there, the native tokenizer's included. Left out, and
# why: the tests that spawn the Python tools for gengraph's own work (peers, the Python tokenizer
# fallback and chat templates, Python traces: they test Python, and take minutes), the SentencePiece model (its module
# needs RTLD_DEEPBIND, which AddressSanitizer refuses), and the CUDA tests (no GPU). Run by
# scripts/test.sh before the main suite; GENGRAPH_SANITIZERS=0 skips.
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
if [ ! -f "$BUILD/build.ninja" ]; then
  echo "[sanitize] configuring $BUILD (address,undefined)" >&2
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DGENGRAPH_SANITIZE=address,undefined -DGENGRAPH_BUILD_BENCH=OFF -DGENGRAPH_BUILD_PYTHON=OFF \
        -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" >/dev/null
fi
echo "[sanitize] building" >&2
cmake --build "$BUILD" -j "${GENGRAPH_JOBS:-2}" --target gengraph_tests gengraph_cli
# LibTorch is not instrumented: its containers carry no annotations (container-overflow would be a
# false alarm) and it keeps allocations for the process's life (leak reports would be its own).
export ASAN_OPTIONS="detect_leaks=0:detect_container_overflow=0:abort_on_error=0:halt_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
FILTER="-*Peer*:*peer*:Cli.Text*:Cli.ATokenizer*:*PythonTokenizer*:HostileChatTemplate.A*:*SentencePiece*:*Interrupt*:*PythonTrace*:*CudaGraphGpu*${1:+:$1}"
cd "$BUILD/tests"
echo "[sanitize] gengraph_tests --gtest_filter='$FILTER'" >&2
GENGRAPH_ROOT="$ROOT" ./gengraph_tests --gtest_filter="$FILTER" --gtest_brief=1

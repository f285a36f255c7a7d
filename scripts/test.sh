#!/usr/bin/env bash
# The whole test suite: set-up (installs what is missing, builds), then every test through CTest:
# the GoogleTest suite (parity with transformers, backend conformance, bad-input errors, CLI), the
# fixture reproducibility check, the extension example and a smoke run of the benchmarks.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${GENGRAPH_BUILD_DIR:-$ROOT/build}"
"$ROOT/scripts/setup.sh"
export CCACHE_BASEDIR="$ROOT"
export CCACHE_SLOPPINESS="pch_defines,time_macros,include_file_mtime,include_file_ctime"
ctest --test-dir "$BUILD" -j "${GENGRAPH_JOBS:-2}" --output-on-failure "$@"

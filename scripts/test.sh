#!/usr/bin/env bash
# The whole test suite: set-up (installs what is missing, builds), then
#   1. gengraph's code under AddressSanitizer + UndefinedBehaviorSanitizer (scripts/sanitize.sh:
#      unit, parity, CLI and hostile-input tests in build-sanitize/; GENGRAPH_SANITIZERS=0 skips),
#   2. every test through CTest: the GoogleTest suite (parity with transformers, backend
#      conformance, bad-input errors, CLI, Slurm, the fuzz corpus), the fixture reproducibility
#      check, the extension and embedding examples, a real one-node Slurm cluster, the format
#      check and a smoke run of the benchmarks.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${GENGRAPH_BUILD_DIR:-$ROOT/build}"
"$ROOT/scripts/setup.sh"
export CCACHE_BASEDIR="$ROOT"
export CCACHE_SLOPPINESS="pch_defines,time_macros,include_file_mtime,include_file_ctime"
if [ "${GENGRAPH_SANITIZERS:-1}" != 0 ]; then
  "$ROOT/scripts/sanitize.sh"
fi
ctest --test-dir "$BUILD" -j "${GENGRAPH_JOBS:-2}" --output-on-failure "$@"

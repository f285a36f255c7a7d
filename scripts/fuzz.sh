#!/usr/bin/env bash
# Fuzzes gengraph's readers of untrusted input with libFuzzer (clang, with AddressSanitizer and
# UndefinedBehaviorSanitizer over gengraph's code): builds build-fuzz/ and runs each target for
# SECONDS (default 120), starting from tests/fuzz/corpus/<target>/. New inputs that reach new code
# are kept in build-fuzz/corpus/<target>/; crashes are written there as crash-*. Add what is worth
# keeping to tests/fuzz/corpus/ (the test suite replays it). Not part of the test command.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build-fuzz"
SECONDS_EACH="${1:-120}"; shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(safetensors_file safetensors_index experiment_yaml results_json trace_metadata
                                 job_json aoti_package tokenizer_json tokenizer_text chat_template
                                 gguf_file)
command -v clang++ >/dev/null || { echo "fuzz.sh needs clang++ (Debian: clang)" >&2; exit 1; }
export CCACHE_BASEDIR="$ROOT"
export CCACHE_SLOPPINESS="pch_defines,time_macros,include_file_mtime,include_file_ctime"
TORCH_PREFIX="$("$ROOT/.venv/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DCMAKE_CXX_COMPILER=clang++ -DGENGRAPH_FUZZ=ON -DGENGRAPH_BUILD_BENCH=OFF \
        -DGENGRAPH_SANITIZE=address,undefined,fuzzer-no-link -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" >/dev/null
fi
cmake --build "$BUILD" -j "${GENGRAPH_JOBS:-2}" --target $(printf 'fuzz_%s ' "${TARGETS[@]}")
export ASAN_OPTIONS="detect_leaks=0:detect_container_overflow=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
for t in "${TARGETS[@]}"; do
  mkdir -p "$BUILD/corpus/$t"
  echo "== $t: ${SECONDS_EACH} s" >&2
  (cd "$BUILD/corpus/$t" && "$BUILD/tests/fuzz_$t" -max_total_time="$SECONDS_EACH" -rss_limit_mb=4096 \
      -timeout=10 -max_len=65536 -print_final_stats=1 "$BUILD/corpus/$t" "$ROOT/tests/fuzz/corpus/$t") \
      2>&1 | tee "$BUILD/fuzz_$t.log" | grep -E "^#[0-9]+ +(INITED|DONE)|stat::|ERROR|crash|SUMMARY" || true
done

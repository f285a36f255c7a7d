#!/usr/bin/env bash
# Run HERE (no GPU needed): builds gengraph and gathers what the GPU machine lacks into gpu_carry/
# (git-ignored): the binaries, libgengraph_core and libgengraph_experiments, and the Debian libraries they need (yaml-cpp, Google
# Benchmark). LibTorch itself is the GPU machine's own (the same torch 2.11.0+cu130).
# Then call the device tool:  run(command="bash scripts/gpu_check.sh", carry=["gpu_carry"], timeout_s=420)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh" gengraph_cli gengraph_tests gengraph_bench
C="$ROOT/gpu_carry"
rm -rf "$C" && mkdir -p "$C/bin" "$C/lib"
cp "$ROOT/build/gengraph" "$ROOT/build/tests/gengraph_tests" "$ROOT/build/bench/gengraph_bench" "$C/bin/"
cp "$ROOT/build/libgengraph_core.so" "$ROOT/build/libgengraph_experiments.so" "$C/lib/"
for lib in libyaml-cpp.so.0.7 libbenchmark.so.1debian; do
  cp "$(ldconfig -p | awk -v l="$lib" '$1 == l {print $NF; exit}')" "$C/lib/"
done
du -sh "$C"

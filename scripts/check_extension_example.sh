#!/usr/bin/env bash
# Installs gengraph into BUILD/install, builds tests/extension_example (a backend, a processor, a
# stopping criterion and a strategy) against the installed
# package, and runs its tests. Usage: check_extension_example.sh BUILD_DIR SOURCE_DIR TORCH_PREFIX
set -euo pipefail
BUILD="$1"; SRC="$2"; TORCH_PREFIX="$3"
cmake --install "$BUILD" --prefix "$BUILD/install" >/dev/null
cmake -S "$SRC/tests/extension_example" -B "$BUILD/extension_example" -G Ninja \
      -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$BUILD/install;$TORCH_PREFIX" >/dev/null
cmake --build "$BUILD/extension_example" -j "${GENGRAPH_JOBS:-2}"
ctest --test-dir "$BUILD/extension_example" --output-on-failure

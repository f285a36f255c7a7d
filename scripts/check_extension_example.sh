#!/usr/bin/env bash
# Installs gengraph into a fresh BUILD/install, builds tests/extension_example (a backend, a
# processor, a stopping criterion and a strategy) against the installed package, and runs its
# tests. The example includes gengraph's headers as <gengraph/...> only, and the install holds
# the public headers alone (the extension surface under include/gengraph/ext/), no internal one:
# an example that needed an internal header would not compile. Usage:
# check_extension_example.sh BUILD_DIR SOURCE_DIR TORCH_PREFIX
set -euo pipefail
BUILD="$1"; SRC="$2"; TORCH_PREFIX="$3"
fail() { echo "extension example: $*" >&2; exit 1; }
bad=$(grep -nE '^#include "(framework|backends|engine|experiments)/' \
      "$SRC"/tests/extension_example/*.{h,cpp} || true)
[ -z "$bad" ] || fail "includes gengraph's internal headers by path (use <gengraph/...>):
$bad"
rm -rf "$BUILD/install"
cmake --install "$BUILD" --prefix "$BUILD/install" >/dev/null
H="$BUILD/install/include/gengraph"
for public in gengraph.h extension.h cli.h plugin.h error.h ext/backend.h ext/decoding.h \
              ext/registry.h ext/model.h ext/cache.h ext/token_history.h; do
  [ -f "$H/$public" ] || fail "the public header $public is not installed"
done
for internal in framework backends engine experiments; do
  [ ! -e "$H/$internal" ] || fail "the internal folder $internal is installed (only public are)"
done
echo "installed headers: $(find "$H" -name '*.h' | wc -l), all public" \
     "($(find "$H/ext" -name '*.h' | wc -l) of them under ext/)"
cmake -S "$SRC/tests/extension_example" -B "$BUILD/extension_example" -G Ninja \
      -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$BUILD/install;$TORCH_PREFIX" >/dev/null
cmake --build "$BUILD/extension_example" -j "${GENGRAPH_JOBS:-2}"
ctest --test-dir "$BUILD/extension_example" --output-on-failure

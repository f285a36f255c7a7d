#!/usr/bin/env bash
# A stand-alone install: gengraph installed to a prefix, the prefix copied and the original
# removed, and the copy run without GENGRAPH_ROOT or GENGRAPH_PYTHON. It must find its Python tools
# in its own share/gengraph and their Python from the install's record (`gengraph paths`), decode
# text through the Python tokenizer (tools/hf_tokenizer.py), export an aoti package with
# tools/export_aoti.py, and build and run docs/embedding.md's two programs against the copy. A
# newcomer's steps pass on the copy (scripts/check_newcomer.sh: chat from Python, help for every
# command, and the extension example the install carries built from there with the copy alone in
# CMAKE_PREFIX_PATH: the package finds the LibTorch gengraph was built with); where that LibTorch
# is gone, find_package(gengraph) says what to set.
# Usage: check_install.sh BUILD_DIR SOURCE_DIR TORCH_PREFIX
set -euo pipefail
BUILD=$(cd "$1" && pwd); SRC=$(cd "$2" && pwd); TORCH_PREFIX="$3"
WORK="$BUILD/standalone_install"
rm -rf "$WORK"; mkdir -p "$WORK"
fail() { echo "standalone install: $*" >&2; exit 1; }

cmake --install "$BUILD" --prefix "$WORK/prefix" >/dev/null
cp -a "$WORK/prefix" "$WORK/copy"
rm -rf "$WORK/prefix"
COPY=$(cd "$WORK/copy" && pwd -P)
G="$COPY/bin/gengraph"
unset GENGRAPH_ROOT GENGRAPH_PYTHON

paths=$("$G" paths)
echo "$paths"
python=$(head -n1 "$COPY/share/gengraph/python")
grep -qxF "tools: $COPY/share/gengraph/tools (this install's own)" <<<"$paths" ||
  fail "the tools are not the copy's own"
grep -qxF "python: $python (this install's record, $COPY/share/gengraph/python)" <<<"$paths" ||
  fail "the Python is not the install's record"
[[ "$python" != "$SRC"/* ]] || fail "the recorded Python '$python' lies inside the checkout"

# Text in and out through the Python tokenizer (the real model, where it is set up here).
if "$G" models | grep -q "set up here:"; then
  "$G" generate --model smollm2-135m --text "The capital of France is" --tokenizer python \
      --max-new-tokens 4 > "$WORK/text.txt"
  cat "$WORK/text.txt"
  grep -q "text" "$WORK/text.txt" || fail "generate --text printed no text"
else
  echo "smollm2-135m is not set up here: the text check is skipped"
fi

# An aoti package exported by the install's tools (a fresh cache, so that it is built now).
GENGRAPH_AOTI_CACHE="$WORK/aoti" "$G" generate --model gpt2-tiny --prompt 1,2,3 --backend aoti \
    --max-new-tokens 4 --quiet --output "$WORK/aoti.json" >/dev/null
find "$WORK/aoti" -name '*.pt2' | grep -q . || fail "no aoti package was exported"
echo "aoti: exported $(find "$WORK/aoti" -name '*.pt2' | head -n1)"

# The embedding examples, built against the copy and compared with its CLI.
GENGRAPH_INSTALL_PREFIX="$COPY" bash "$SRC/scripts/check_embedding.sh" "$BUILD" "$SRC" "$TORCH_PREFIX"

# A newcomer's steps on the copy (scripts/check_newcomer.sh): chat from Python, help for every
# command, and the installed extension example configured with gengraph's prefix only (no Torch
# path), built and tested.
bash "$SRC/scripts/check_newcomer.sh" "$BUILD" "$SRC" "$COPY"

# A LibTorch that is gone: a clear error naming Torch_DIR and CMAKE_PREFIX_PATH.
mkdir -p "$WORK/no_torch/cmake" "$WORK/no_torch/project"
cp -a "$COPY/lib/cmake/gengraph" "$WORK/no_torch/cmake/"
sed -i 's|^set(GENGRAPH_TORCH_DIR ".*")$|set(GENGRAPH_TORCH_DIR "/nonexistent/torch")|' \
    "$WORK/no_torch/cmake/gengraph/gengraphConfig.cmake"
printf 'cmake_minimum_required(VERSION 3.25)\nproject(p LANGUAGES CXX)\nfind_package(gengraph REQUIRED)\n' \
    > "$WORK/no_torch/project/CMakeLists.txt"
if env -u CMAKE_PREFIX_PATH -u Torch_DIR cmake -S "$WORK/no_torch/project" -B "$WORK/no_torch/build" \
    -Dgengraph_DIR="$WORK/no_torch/cmake/gengraph" > "$WORK/no_torch/log" 2>&1; then
  fail "find_package(gengraph) succeeded without a LibTorch"
fi
said=$(tr -s ' \n' ' ' < "$WORK/no_torch/log")  # CMake wraps its messages' lines
grep -qF "gengraph needs LibTorch, and found none: not at '/nonexistent/torch'" <<<"$said" &&
  grep -qF "Set Torch_DIR to the folder holding TorchConfig.cmake, or add torch's prefix to CMAKE_PREFIX_PATH" <<<"$said" ||
  fail "no clear error without a LibTorch: $said"
echo "standalone install: tools, Python, text, aoti export, embedding and the extension example" \
     "from a copy of the prefix"

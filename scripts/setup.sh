#!/usr/bin/env bash
# Installs whatever is missing, then builds. Safe to run again: every step checks first.
#   1. Debian packages (compiler tools, yaml-cpp, nlohmann-json, GoogleTest, Google Benchmark and
#      its compare.py with the Debian scipy it needs, ccache, clang-format for the format check,
#      slurm-wlm and munge for the one-node Slurm cluster the tests start)
#   2. the Python environment (torch, transformers, ...) from tools/requirements.txt, kept under
#      ~/.cache/gengraph/venv-<hash of requirements> and linked as .venv, so fresh clones reuse it
#   3. the CMake configure (LibTorch found through torch.utils.cmake_prefix_path) and the build
# Usage: scripts/setup.sh [cmake targets...]   (default: everything)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${GENGRAPH_CACHE:-$HOME/.cache/gengraph}"
BUILD="${GENGRAPH_BUILD_DIR:-$ROOT/build}"
log() { echo "[setup] $*" >&2; }

# --- 1. Debian packages -------------------------------------------------------------------------
PKGS=(build-essential cmake ninja-build ccache git python3 python3-venv libyaml-cpp-dev
      nlohmann-json3-dev googletest libgtest-dev libgmock-dev libbenchmark-dev
      libbenchmark-tools python3-scipy python3-numpy clang-format slurm-wlm munge)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# --- 2. Python environment ------------------------------------------------------------------------
REQ="$ROOT/tools/requirements.txt"
HASH="$(sha256sum "$REQ" | cut -c1-12)"
VENV="$CACHE/venv-$HASH"
if [ ! -f "$VENV/.complete" ]; then
  log "creating Python environment $VENV (torch, transformers; first time only)"
  rm -rf "$VENV"
  mkdir -p "$CACHE"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q -r "$REQ"
  touch "$VENV/.complete"
fi
if [ "$(readlink "$ROOT/.venv" 2>/dev/null)" != "$VENV" ]; then
  rm -rf "$ROOT/.venv"
  ln -s "$VENV" "$ROOT/.venv"
fi

# The group-beam-search oracle (transformers 4.55.4, see tools/requirements-groupbeam.txt).
GB_REQ="$ROOT/tools/requirements-groupbeam.txt"
GB="$CACHE/groupbeam-$(sha256sum "$GB_REQ" | cut -c1-12)"
if [ ! -f "$GB/.complete" ]; then
  log "installing the group-beam-search oracle into $GB"
  rm -rf "$GB"
  "$VENV/bin/pip" install -q --no-deps --target "$GB" -r "$GB_REQ"
  touch "$GB/.complete"
fi
if [ "$(readlink "$ROOT/.oracle-groupbeam" 2>/dev/null)" != "$GB" ]; then
  rm -rf "$ROOT/.oracle-groupbeam"
  ln -s "$GB" "$ROOT/.oracle-groupbeam"
fi

# --- 3. Configure and build -----------------------------------------------------------------------
export CCACHE_BASEDIR="$ROOT"  # relative paths in the cache key: another clone hits the same cache
export CCACHE_SLOPPINESS="pch_defines,time_macros,include_file_mtime,include_file_ctime"
export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-8G}"
TORCH_PREFIX="$("$VENV/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
if [ ! -f "$BUILD/build.ninja" ] || ! grep -q "$TORCH_PREFIX" "$BUILD/CMakeCache.txt" 2>/dev/null; then
  log "configuring $BUILD"
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" >/dev/null
fi
log "building (${*:-all targets})"
if (($#)); then
  cmake --build "$BUILD" -j "${GENGRAPH_JOBS:-2}" --target "$@"
else
  cmake --build "$BUILD" -j "${GENGRAPH_JOBS:-2}"
fi

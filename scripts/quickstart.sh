#!/usr/bin/env bash
# The main job on the built-in default: set-up (installs what is missing, builds), then
# `gengraph run configs/quickstart.yaml`. Extra arguments go to `gengraph run`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${GENGRAPH_BUILD_DIR:-$ROOT/build}"
"$ROOT/scripts/setup.sh" gengraph_cli
cd "$ROOT"
exec "$BUILD/gengraph" run configs/quickstart.yaml "$@"

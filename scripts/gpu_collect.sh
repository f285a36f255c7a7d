#!/usr/bin/env bash
# Run HERE after a GPU check: copies what scripts/gpu_check.sh left in the device tool's files
# folder into docs/results/ and writes each results file's table beside it (.txt), as for the
# CPU results. Usage: scripts/gpu_collect.sh FILES_AT...   (the `files_at` folders of the device
# replies, oldest first: a later run's files replace an earlier one's of the same name, as a rerun
# of a stage replaces that stage's results; every run's log is kept, as gpu_check_<i>.log)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ $# -ge 1 ] || { echo "usage: scripts/gpu_collect.sh FILES_AT... (the folders the device tool returned, oldest first)" >&2; exit 2; }
for SRC in "$@"; do
  [ -d "$SRC" ] || { echo "gpu_collect: '$SRC' is not a folder" >&2; exit 1; }
  [ -f "$SRC/gpu_check.log" ] || { echo "gpu_collect: '$SRC' has no gpu_check.log; is it a gpu_check.sh output?" >&2; exit 1; }
done
[ -x "$ROOT/build/gengraph" ] || { echo "gpu_collect: build/gengraph is missing; run scripts/setup.sh first" >&2; exit 1; }
DEST="$ROOT/docs/results"
mkdir -p "$DEST"
i=0
for SRC in "$@"; do
i=$((i + 1))
for f in "$SRC"/*; do
  name="$(basename "$f")"
  case "$name" in
    gpu_check.log) cp "$f" "$DEST/gpu_check_$i.log" ;;
    bench_gpu.json) cp "$f" "$DEST/bench_gpu.json" ;;
    *.json)
      cp "$f" "$DEST/$name"
      # The table as `gengraph run` printed it; the plot line names the PNG beside it.
      { [ -f "${f%.json}.png" ] && echo "wrote docs/results/${name%.json}.png"
        "$ROOT/build/gengraph" show "$DEST/$name"; } > "$DEST/${name%.json}.txt" ;;
    *.png) cp "$f" "$DEST/$name" ;;
    *) echo "gpu_collect: skipping $name" ;;
  esac
done
done
ls -l "$DEST"

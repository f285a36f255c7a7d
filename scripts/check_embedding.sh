#!/usr/bin/env bash
# The ten-line program of docs/embedding.md, extracted from the page, built against the installed
# package (gengraph::core only) and run. It must print the CLI's tokens for the same model and
# settings, and its shared-library needs must name neither yaml-cpp nor the experiments layer.
# Usage: check_embedding.sh BUILD_DIR SOURCE_DIR TORCH_PREFIX
set -euo pipefail
BUILD="$1"; SRC="$2"; TORCH_PREFIX="$3"
DOC="$SRC/docs/embedding.md"
WORK="$BUILD/embedding_example"
rm -rf "$WORK"; mkdir -p "$WORK"
extract() {  # the fenced block between <!-- NAME: begin --> and <!-- NAME: end -->
  awk -v name="$1" '
    $0 == "<!-- " name ": begin -->" { inside = 1; next }
    $0 == "<!-- " name ": end -->"   { inside = 0 }
    inside && !/^```/ { print }' "$DOC"
}
extract embedding-example > "$WORK/main.cpp"
extract embedding-cmake > "$WORK/CMakeLists.txt"
lines=$(grep -c . "$WORK/main.cpp")
[ -s "$WORK/CMakeLists.txt" ] || { echo "no embedding-cmake block in $DOC" >&2; exit 1; }
echo "program from $DOC: $lines non-empty lines"
[ "$lines" -le 10 ] || { echo "the program has $lines non-empty lines, more than ten" >&2; exit 1; }

cmake --install "$BUILD" --prefix "$BUILD/install" >/dev/null
cmake -S "$WORK" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$BUILD/install;$TORCH_PREFIX" >/dev/null
cmake --build "$WORK/build" >/dev/null

needed=$(readelf -d "$WORK/build/embed" | awk '/NEEDED/ {print $NF}' | tr -d '[]' | tr '\n' ' ')
echo "embed needs: $needed"
for lib in yaml-cpp gengraph_experiments; do
  if [[ " $needed" == *"$lib"* ]]; then echo "the core consumer links $lib" >&2; exit 1; fi
done
[[ " $needed" == *"libgengraph_core.so"* ]] || { echo "embed does not link libgengraph_core" >&2; exit 1; }

got=$("$WORK/build/embed" gpt2-tiny)
"$BUILD/gengraph" generate --model gpt2-tiny --prompt 101,202,303 --max-new-tokens 8 \
    --set generation.num_beams=2 --quiet --output "$WORK/cli.json" >/dev/null
want=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(" ".join(map(str, d["runs"][0]["outputs"][0]["sequences"][0]["tokens"])))' "$WORK/cli.json")
echo "embed: $got"
echo "cli:   $want"
[ "$(echo $got)" == "$(echo $want)" ] || { echo "the embedded program's tokens differ from the CLI's" >&2; exit 1; }
[ -n "$(echo $got)" ] || { echo "no tokens" >&2; exit 1; }
echo "embedding example: same tokens as the CLI"

#!/usr/bin/env bash
# The ten-line program of docs/embedding.md, extracted from the page, built against the installed
# package (gengraph::core only) and run. It must print the CLI's tokens for the same model and
# settings, and its shared-library needs must name neither yaml-cpp nor the experiments layer.
# The page's second program (streaming, stopped after four tokens, with log-probabilities) is
# built beside it; its tokens and log-probabilities must be the CLI's output_scores run's first
# four, and its partial result must hold those four with their summed score.
# Usage: check_embedding.sh BUILD_DIR SOURCE_DIR TORCH_PREFIX
set -euo pipefail
# GENGRAPH_INSTALL_PREFIX: build against that install (and compare with its CLI) instead of
# installing BUILD_DIR to BUILD_DIR/install (scripts/check_install.sh).
BUILD=$(cd "$1" && pwd); SRC=$(cd "$2" && pwd); TORCH_PREFIX="$3"
DOC="$SRC/docs/embedding.md"
PREFIX="${GENGRAPH_INSTALL_PREFIX:-}"
WORK="$BUILD/embedding_example${PREFIX:+_installed}"
CLI="${PREFIX:-$BUILD}"/${PREFIX:+bin/}gengraph
rm -rf "$WORK"; mkdir -p "$WORK"
extract() {  # the fenced block between <!-- NAME: begin --> and <!-- NAME: end -->
  awk -v name="$1" '
    $0 == "<!-- " name ": begin -->" { inside = 1; next }
    $0 == "<!-- " name ": end -->"   { inside = 0 }
    inside && !/^```/ { print }' "$DOC"
}
extract embedding-example > "$WORK/main.cpp"
extract embedding-cmake > "$WORK/CMakeLists.txt"
extract stream-example > "$WORK/stream.cpp"
[ -s "$WORK/stream.cpp" ] || { echo "no stream-example block in $DOC" >&2; exit 1; }
printf 'add_executable(stream stream.cpp)\ntarget_link_libraries(stream PRIVATE gengraph::core)\n' \
    >> "$WORK/CMakeLists.txt"
lines=$(grep -c . "$WORK/main.cpp")
[ -s "$WORK/CMakeLists.txt" ] || { echo "no embedding-cmake block in $DOC" >&2; exit 1; }
echo "program from $DOC: $lines non-empty lines"
[ "$lines" -le 10 ] || { echo "the program has $lines non-empty lines, more than ten" >&2; exit 1; }

if [ -z "$PREFIX" ]; then
  cmake --install "$BUILD" --prefix "$BUILD/install" >/dev/null
  PREFIX="$BUILD/install"
fi
cmake -S "$WORK" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$PREFIX;$TORCH_PREFIX" >/dev/null
cmake --build "$WORK/build" >/dev/null

needed=$(readelf -d "$WORK/build/embed" | awk '/NEEDED/ {print $NF}' | tr -d '[]' | tr '\n' ' ')
echo "embed needs: $needed"
for lib in yaml-cpp gengraph_experiments; do
  if [[ " $needed" == *"$lib"* ]]; then echo "the core consumer links $lib" >&2; exit 1; fi
done
[[ " $needed" == *"libgengraph_core.so"* ]] || { echo "embed does not link libgengraph_core" >&2; exit 1; }

got=$("$WORK/build/embed" gpt2-tiny)
"$CLI" generate --model gpt2-tiny --prompt 101,202,303 --max-new-tokens 8 \
    --set generation.num_beams=2 --quiet --output "$WORK/cli.json" >/dev/null
want=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(" ".join(map(str, d["runs"][0]["outputs"][0]["sequences"][0]["tokens"])))' "$WORK/cli.json")
echo "embed: $got"
echo "cli:   $want"
[ "$(echo $got)" == "$(echo $want)" ] || { echo "the embedded program's tokens differ from the CLI's" >&2; exit 1; }
[ -n "$(echo $got)" ] || { echo "no tokens" >&2; exit 1; }
echo "embedding example: same tokens as the CLI"

# The streaming program against the CLI's scores for the same prompt and settings.
"$WORK/build/stream" gpt2-tiny > "$WORK/stream.txt"
"$CLI" generate --model gpt2-tiny --prompt 101,202,303 --max-new-tokens 8 \
    --set generation.output_scores=true --quiet --output "$WORK/cli_scores.json" >/dev/null
cat "$WORK/stream.txt"
python3 - "$WORK/stream.txt" "$WORK/cli_scores.json" <<'PY'
import json, re, sys
lines = open(sys.argv[1]).read().splitlines()
seq = json.load(open(sys.argv[2]))["runs"][0]["outputs"][0]["sequences"][0]
streamed = [re.fullmatch(r"token (\d+) logprob (\S+)( \(last\))?", l) for l in lines[:-1]]
if len(streamed) != 4 or not all(streamed):
    sys.exit("expected four 'token T logprob L' lines, found: %r" % lines)
tokens = [int(m.group(1)) for m in streamed]
logprobs = [float(m.group(2)) for m in streamed]
if tokens != seq["tokens"][:4]:
    sys.exit("streamed tokens %s, the CLI's first four %s" % (tokens, seq["tokens"][:4]))
for got, want in zip(logprobs, seq["token_scores"][:4]):
    if abs(got - want) > 1e-5:
        sys.exit("streamed log-probabilities %s, the CLI's %s" % (logprobs, seq["token_scores"][:4]))
kept = re.fullmatch(r"kept (\d+) tokens, score (\S+)", lines[-1])
if not kept or int(kept.group(1)) != 4 or abs(float(kept.group(2)) - sum(logprobs)) > 1e-4:
    sys.exit("expected 'kept 4 tokens, score %.6f', found %r" % (sum(logprobs), lines[-1]))
print("stream example: the CLI's first four tokens and log-probabilities; stopped with four kept")
PY

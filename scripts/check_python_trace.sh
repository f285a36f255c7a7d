#!/usr/bin/env bash
# The seed's workflow end to end: trace transformers models in Python (tools/trace_hf.py), run the
# files through the trace backend, and require the same tokens as eager for greedy and beam search.
# Usage: check_python_trace.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
BUILD="$1"; SRC="$2"
PY="$SRC/.venv/bin/python"
OUT="$BUILD/python_trace_check"
mkdir -p "$OUT"
status=0
for model in gpt2-a llama-a gptj-a; do
  for search in greedy beam; do
    rows=2; extra=""
    if [ "$search" = beam ]; then rows=6; extra=", num_beams: 3, num_return_sequences: 2"; fi
    OMP_NUM_THREADS=1 "$PY" "$SRC/tools/trace_hf.py" --model "$SRC/tests/fixtures/models/$model" \
      --rows "$rows" --prompt-length 5 --max-length 15 --out "$OUT/$model-$search.pt" > /dev/null 2>&1
    cat > "$OUT/$model-$search.yaml" <<YAML
model: {path: "$SRC/tests/fixtures/models/$model"}
backends: [eager, {name: trace, label: python-trace, options: {file: "$OUT/$model-$search.pt"}}]
inputs: {prompts: [[3, 14, 15, 42, 65], [35, 89]]}
generation: {max_new_tokens: 10$extra}
run: {warmup: 0, repeats: 1}
YAML
    "$BUILD/gengraph" run "$OUT/$model-$search.yaml" --output "$OUT/$model-$search.json" --quiet > /dev/null
    # Tokens must be identical; beam scores may differ in the last float bits.
    if "$PY" - "$OUT/$model-$search.json" <<'PY'
import json, sys
a, b = (r["outputs"] for r in json.load(open(sys.argv[1]))["runs"])
ok = all(x["tokens"] == y["tokens"] and abs(x.get("score", 0) - y.get("score", 0)) < 1e-4
         for i, j in zip(a, b) for x, y in zip(i["sequences"], j["sequences"]))
ok = ok and all(len(i["sequences"]) == len(j["sequences"]) for i, j in zip(a, b))
sys.exit(0 if ok and len(a) == len(b) else 1)
PY
    then
      echo "python trace $model $search: same tokens as eager"
    else
      echo "python trace $model $search: DIFFERENT tokens from eager (see $OUT/$model-$search.json)"
      status=1
    fi
  done
done
exit $status

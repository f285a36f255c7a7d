#!/usr/bin/env bash
# A newcomer's first steps with gengraph (issue 55), repeated as the README and docs give them:
#   1. chat from Python as docs/python.md#chat shows it: Engine.generate(chat=True), Engine.chat
#      (one conversation, and its stream) and apply_chat_template, on smollm2-135m where it is set
#      up, else on a small model folder with a short template (tests/fixtures/models/gpt2-b);
#   2. `gengraph CMD --help`, `gengraph CMD -h` and `gengraph help CMD` for every command that
#      `gengraph --help` lists: each exits 0 and prints that command's usage;
#   3. the extension example an install carries (PREFIX/share/gengraph/examples/extension_example)
#      configured with gengraph's prefix alone in CMAKE_PREFIX_PATH (no Torch path: the package
#      finds the LibTorch it was built with), built, and its tests run.
# Usage: check_newcomer.sh BUILD_DIR SOURCE_DIR [PREFIX]
#   PREFIX: an installed gengraph (scripts/check_install.sh passes its stand-alone copy); without
#   it BUILD_DIR is installed into BUILD_DIR/newcomer/prefix first.
set -euo pipefail
BUILD=$(cd "$1" && pwd); SRC=$(cd "$2" && pwd)
WORK="$BUILD/newcomer"
fail() { echo "newcomer: $*" >&2; exit 1; }
rm -rf "$WORK"; mkdir -p "$WORK"
if [ $# -ge 3 ]; then
  PREFIX=$(cd "$3" && pwd)
else
  PREFIX="$WORK/prefix"
  cmake --install "$BUILD" --prefix "$PREFIX" >/dev/null
fi
G="$PREFIX/bin/gengraph"
PYTHON="${GENGRAPH_PYTHON:-$SRC/.venv/bin/python}"

# 1. Chat from Python (the build's package, as scripts/setup.sh makes the environment import it).
PYTHONPATH="$BUILD/python" "$PYTHON" - "$SRC" "$WORK" <<'EOF' || fail "chat from Python failed"
import json, pathlib, shutil, sys
import gengraph

src, work = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
if any(m["name"] == "smollm2-135m" and m["ready"] for m in gengraph.models()):
    model, generation_prompt = "smollm2-135m", "<|im_start|>assistant\n"
else:  # a small folder (96 positions) reading text a character a token, and a short template
    model = work / "chat-model"
    shutil.copytree(src / "tests" / "fixtures" / "models" / "gpt2-b", model)
    vocab = {"<eos>": 0, "<unk>": 1, "\n": 2, **{chr(c): c - 29 for c in range(32, 127)}}
    vocab.update({f"<t{i}>": i for i in range(len(vocab), 160)})
    (model / "tokenizer.json").write_text(json.dumps({
        "version": "1.0", "normalizer": None, "pre_tokenizer": None, "post_processor": None,
        "decoder": None,
        "added_tokens": [{"id": 0, "content": "<eos>", "special": True, "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": False}],
        "model": {"type": "BPE", "vocab": vocab, "merges": [], "unk_token": "<unk>"}}))
    (model / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<eos>", "unk_token": "<unk>"}))
    (model / "chat_template.jinja").write_text(
        "{% for m in messages %}{{ m['role'][0] }}:{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}a:{% endif %}")
    model, generation_prompt = str(model), "a:"
# docs/python.md#chat, word for word but the model.
real = gengraph.Engine(model)
print(real.generate(["What is 2+2?"], chat=True, max_new_tokens=8).texts[0][0])
conversation = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": "What is the capital of France?"}]
answer = real.chat(conversation, max_new_tokens=8).texts[0][0]
print(answer)
prompt = real.apply_chat_template(conversation)[0]
print(prompt)  # the prompt it generated from
streamed = ""
for piece in real.chat(conversation, stream=True, max_new_tokens=8):
    streamed += piece.text
assert "What is the capital of France?" in prompt and prompt.endswith(generation_prompt), prompt
assert streamed == answer, (streamed, answer)
print(f"newcomer: chat from Python on {model}: generate(chat=True), chat, its stream and "
      "apply_chat_template")
EOF

# 2. Help for every command.
commands=$("$G" --help | sed -n '/^commands:/,/^gengraph COMMAND/p' | awk 'NF > 1 && $1 != "commands:" && $1 != "gengraph" {print $1}')
[ "$(wc -w <<<"$commands")" -ge 10 ] || fail "gengraph --help lists too few commands: $commands"
for cmd in $commands; do
  for ask in "$cmd --help" "$cmd -h" "help $cmd"; do
    # shellcheck disable=SC2086  # two words on purpose
    out=$("$G" $ask) || fail "gengraph $ask exited $?"
    grep -q "^usage: gengraph $cmd\b" <<<"$out" || fail "gengraph $ask does not print $cmd's usage"
  done
done
echo "newcomer: --help, -h and help for each of $(wc -w <<<"$commands") commands"

# 3. The installed extension example, with gengraph's prefix alone.
EXAMPLE="$PREFIX/share/gengraph/examples/extension_example"
[ -f "$EXAMPLE/CMakeLists.txt" ] || fail "the extension example is not installed at $EXAMPLE"
env -u CMAKE_PREFIX_PATH -u Torch_DIR cmake -S "$EXAMPLE" -B "$WORK/extension_example" -G Ninja \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PREFIX" >/dev/null ||
  fail "the installed extension example does not configure with CMAKE_PREFIX_PATH=$PREFIX alone"
cmake --build "$WORK/extension_example" -j "${GENGRAPH_JOBS:-2}" >/dev/null
ctest --test-dir "$WORK/extension_example" --output-on-failure
echo "newcomer: chat from Python, help per command, and the extension example built with" \
     "gengraph's prefix alone"

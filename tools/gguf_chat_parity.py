#!/usr/bin/env python3
"""gengraph's chat prompt ids on a GGUF file against llama.cpp's on the same file (opt-in: needs the
file and the peers' llama-cpp-python build).

    gguf_chat_parity.py --gguf FILE [--template NAME] [--output OUT.json]

For each of a few single-message conversations, gengraph renders the chat prompt natively
(`gengraph generate --chat`, the file's template, or for a Gemma file without one Gemma's turn
format) and encodes it; llama.cpp applies its built-in template NAME (default: "gemma") with
llama_chat_apply_template and tokenizes the text with BOS and special tokens parsed, as its
server does. The two id lists must be equal. Prints one JSON object with each conversation's ids
from both and whether they are equal; exits 1 when any differs.
"""
import argparse
import ctypes
import glob
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXTS = ["What is 2+2?", "  Tell me a joke. ", "Translate 'good morning' into French.\n",
         "Écris une phrase avec « guillemets » et un emoji 😀.", "List three prime numbers"]


def llama_site():
    base = os.environ.get("GENGRAPH_CACHE", os.path.expanduser("~/.cache/gengraph"))
    found = sorted(glob.glob(os.path.join(base, "peers", "llama-cpp-python-0.3.36-py*", "site")))
    if not found:
        sys.exit("gguf_chat_parity: llama-cpp-python is not built in the peers cache; run an experiment "
                 "with a llama_cpp peer first")
    return found[-1]


def llama_ids(gguf, template, texts):
    sys.path.append(llama_site())
    import llama_cpp as L
    llm = L.Llama(model_path=gguf, vocab_only=True, verbose=False)
    out = []
    for text in texts:
        msgs = (L.llama_chat_message * 1)(L.llama_chat_message(role=b"user", content=text.encode()))
        buf = ctypes.create_string_buffer(1 << 16)
        n = L.llama_chat_apply_template(template.encode(), msgs, 1, True, buf, len(buf))
        if n < 0:
            sys.exit(f"gguf_chat_parity: llama.cpp does not know the template '{template}'")
        prompt = buf.raw[:n].decode()
        out.append({"text": prompt, "ids": llm.tokenize(prompt.encode(), add_bos=True, special=True)})
    return out


def gengraph_ids(gguf, texts):
    exe = os.path.join(os.environ.get("GENGRAPH_BUILD_DIR", os.path.join(ROOT, "build")), "gengraph")
    with tempfile.TemporaryDirectory() as tmp:
        res = os.path.join(tmp, "r.json")
        args = [exe, "generate", "--model", gguf, "--chat", "--max-new-tokens", "1", "--quiet", "--output", res]
        for t in texts:
            args += ["--text", t]
        subprocess.run(args, check=True, capture_output=True)
        doc = json.load(open(res))
    return [{"text": t, "ids": ids} for t, ids in zip(doc["inputs"]["chat_prompts"], doc["inputs"]["prompts"])]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--template", default="gemma")
    ap.add_argument("--output")
    a = ap.parse_args()
    ours, theirs = gengraph_ids(a.gguf, TEXTS), llama_ids(a.gguf, a.template, TEXTS)
    rows = [{"message": t, "gengraph": o, "llama.cpp": l, "equal": o["ids"] == l["ids"]}
            for t, o, l in zip(TEXTS, ours, theirs)]
    doc = {"gguf": a.gguf, "template": a.template, "conversations": rows,
           "equal": sum(r["equal"] for r in rows), "of": len(rows)}
    s = json.dumps(doc, indent=1, ensure_ascii=False)
    print(s)
    if a.output:
        with open(a.output, "w") as f:
            f.write(s + "\n")
    return 0 if doc["equal"] == doc["of"] else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""llama.cpp's perplexity of a GGUF file on the windows `gengraph quality` scores, and its greedy
tokens on the quality prompts: what a GGUF row of gengraph is compared with (docs/gguf.md).

    llama_cpp_perplexity.py --gguf FILE --quality RESULTS.json [--threads N] [--output OUT.json]

RESULTS.json is what `gengraph quality --model FILE --output RESULTS.json` wrote: its text file,
window count and length, prompts and new-token count are read from it, so both score the same
windows. The text is tokenized by llama.cpp itself (llama_tokenize, no BOS), cut into windows
exactly as gengraph's quality does (evenly spread: stride = (tokens - window) / (windows - 1)),
and each window evaluated teacher-forced in one llama_decode with every position's logits; the
perplexity is exp of the mean negative log-likelihood of positions 1..window-1. Greedy: each
prompt (tokenized with BOS, as llama.cpp does for a file whose add_bos_token is true) and
new-tokens steps of llama.cpp's own argmax, with the logit margin between its first and second
choice at each step (where two engines part, a small margin is a near-tie).

Prints one JSON object (and writes it with --output): perplexity, windows, tokens, greedy ids.
llama-cpp-python is the peers cache's build (tools/peer_llama_cpp.py installs it).
"""
import argparse
import glob
import json
import math
import os
import sys


def emit(doc, output):
    """Prints `doc` as JSON, and writes it to `output` when given."""
    s = json.dumps(doc, indent=1)
    print(s)
    if output:
        with open(output, "w") as f:
            f.write(s + "\n")


def site_dir():
    base = os.environ.get("GENGRAPH_CACHE", os.path.expanduser("~/.cache/gengraph"))
    found = sorted(d for d in glob.glob(os.path.join(base, "peers", "llama-cpp-python-0.3.36-py*", "site"))
                   if os.path.isdir(d))
    if not found:
        sys.exit("llama_cpp_perplexity: llama-cpp-python is not built in the peers cache; run an "
                 "experiment with a llama_cpp peer first")
    return found[-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--quality", required=True, help="gengraph quality's results JSON")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv", choices=["f32", "f16"], default="f32",
                    help="llama.cpp's KV cache type (f32: gengraph's float32 cache; flash attention off, as "
                         "llama-cpp-python's default leaves it)")
    ap.add_argument("--output")
    a = ap.parse_args()
    q = json.load(open(a.quality))
    windows, window = int(q["windows"]), int(q["window"])
    sys.path.insert(0, site_dir())
    import numpy as np
    from llama_cpp import Llama
    llm = Llama(model_path=a.gguf, n_ctx=max(window, 512), n_batch=window, n_ubatch=window,
                logits_all=True, n_threads=a.threads, n_threads_batch=a.threads, verbose=False,
                type_k={"f32": 0, "f16": 1}[a.kv], type_v={"f32": 0, "f16": 1}[a.kv],
                flash_attn=False)
    text = open(q["text_file"], "rb").read()
    ids = llm.tokenize(text, add_bos=False, special=False)
    if len(ids) < windows * window:
        sys.exit(f"llama_cpp_perplexity: {len(ids)} tokens, fewer than {windows} x {window}")
    stride = (len(ids) - window) // max(1, windows - 1)
    nll, count = 0.0, 0
    for r in range(windows):
        w = ids[r * stride: r * stride + window]
        llm.reset()
        llm.eval(w)
        logits = np.asarray(llm.scores[:window], dtype=np.float64)
        logits -= logits.max(axis=1, keepdims=True)
        logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
        nll -= sum(logp[t, w[t + 1]] for t in range(window - 1))
        count += window - 1
    greedy = []
    for p in q.get("prompts", []):
        llm.reset()
        toks = llm.tokenize(p.encode(), add_bos=True, special=False)
        out, margins = [], []
        for _ in range(int(q.get("new_tokens", 32))):
            llm.eval(toks if not out else [out[-1]])
            row = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64)
            top2 = np.sort(row)[-2:]
            out.append(int(np.argmax(row)))
            margins.append(float(top2[1] - top2[0]))
        greedy.append({"prompt_ids": toks, "tokens": out, "top2_logit_margin": margins})
    doc = {"gguf": a.gguf, "engine": "llama.cpp (llama-cpp-python 0.3.36)", "threads": a.threads, "kv": a.kv,
           "text_file": q["text_file"], "tokens": len(ids), "windows": windows, "window": window,
           "perplexity": math.exp(nll / count), "greedy": greedy}
    emit(doc, a.output)


if __name__ == "__main__":
    main()

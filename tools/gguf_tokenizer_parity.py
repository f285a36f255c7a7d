#!/usr/bin/env python3
"""gengraph's native GGUF tokenizer against llama.cpp's on the same GGUF file (opt-in: it needs the
file and llama-cpp-python from the peers cache, which tools/peer_llama_cpp.py builds).

    gguf_tokenizer_parity.py FILE.gguf [--lines 2000] [--seed 0] [--output REPORT.txt]
                             [--build build] [--show 10]

The lines: the first N of tools/make_tokenizer_corpus.py's corpus (seed S; bytes that are not UTF-8
become U+FFFD, as the tokenizer tests read it), then a few lines of chat turns, special tokens and
whitespace runs (EXTRA_LINES). For each line, llama.cpp's llama_tokenize (parse_special true) with
add_special false and true, and its llama_detokenize loop (remove_special false, unparse_special
true and false, without the clean_spaces pass: docs/text.md) over those ids. gengraph's side runs in
the test binary (GgufTokenizerOnFile.TokenizesTheLinesItIsGiven, which is skipped unless this script
sets GENGRAPH_GGUF_TOKENIZE): its load time of the vocabulary, and the same four results. The
report counts the lines whose ids or texts differ and shows the first few, and whether gengraph's
decoding gives each line back (a line holding U+2581, SentencePiece's own space mark, comes back
with a space there, from llama.cpp too: those are counted apart, not as differences). Exit 0 when everything is equal, 1 otherwise, 77 (a skip) without
llama-cpp-python.
"""
import argparse
import ctypes
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import make_tokenizer_corpus  # noqa: E402
from make_gguf_tokenizer_fixtures import load_llama_cpp  # noqa: E402

SPACE_MARK = "\u2581"  # SentencePiece's space

# Chat turns and the tokens a Gemma-style vocabulary types CONTROL or USER_DEFINED, byte tokens
# written out, and runs of spaces, tabs and newlines (vocabularies with whitespace-run tokens).
EXTRA_LINES = [
    "The capital of France is",
    "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n4<end_of_turn>\n",
    "<bos><start_of_turn>user\nHi<end_of_turn>", "<bos>", "<eos>", "<pad>", "<unk>", "<mask>",
    "<unused0> <unused99>", "<start_of_image><end_of_image>", "<0x41><0x0A>", "x<end_of_turn>y",
    "  two  spaces   three    four", "\t\ttabs\t\t\tand\n\n\nnewlines\n\n\n\n", " \n \n  \n\t \n",
    "                                a long run", "\n" * 40, " " * 33, "\t" * 17,
    "<start_of_turn", "start_of_turn>", "<<start_of_turn>>", "\u2581lower one eighth block",
    "<h1>Title</h1>\n<table><tr><td>x</td></tr></table>", "```python\ndef f():\n    return 1\n```",
]


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def host():
    try:
        with open("/proc/cpuinfo") as f:
            model = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        model = "unknown CPU"
    return f"{os.cpu_count()} CPUs, {model}"


def corpus(n, seed):
    lines = [b.decode("utf-8", errors="replace") for b in make_tokenizer_corpus.lines(n, seed)]
    return lines, EXTRA_LINES


def llama_side(path, lines):
    L = load_llama_cpp()
    quiet = L.llama_log_callback(lambda level, text, data: None)
    L.llama_log_set(quiet, ctypes.c_void_p(0))
    start = time.monotonic()
    llama = L.Llama(model_path=path, vocab_only=True, verbose=False)
    load_s = time.monotonic() - start
    vocab = L.llama_model_get_vocab(llama.model)
    meta = llama.metadata
    add_space_prefix = meta.get("tokenizer.ggml.add_space_prefix", "") == "true" or (
        meta.get("tokenizer.ggml.model") == "llama" and "tokenizer.ggml.add_space_prefix" not in meta)

    def detok(ids, unparse):
        out = b""
        for k, t in enumerate(ids):
            lstrip = 1 if k == 0 and add_space_prefix else 0
            buf = ctypes.create_string_buffer(256)
            n = L.llama_token_to_piece(vocab, t, buf, 256, lstrip, unparse)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = L.llama_token_to_piece(vocab, t, buf, -n, lstrip, unparse)
            out += buf.raw[:n]
        return out.decode("utf-8", errors="replace")

    r = {"load_s": load_s, "ids": [], "ids_special": [], "text": [], "text_skip": []}
    for line in lines:
        b = line.encode("utf-8")
        ids = llama.tokenize(b, add_bos=False, special=True)
        r["ids"].append(ids)
        r["ids_special"].append(llama.tokenize(b, add_bos=True, special=True))
        r["text"].append(detok(ids, True))
        r["text_skip"].append(detok(ids, False))
    return r


def gengraph_side(path, lines, build):
    binary = os.path.join(build, "tests", "gengraph_tests")
    with tempfile.TemporaryDirectory() as tmp:
        job, out = os.path.join(tmp, "job.json"), os.path.join(tmp, "out.json")
        with open(job, "w") as f:
            json.dump({"gguf": os.path.abspath(path),
                       "lines": [s.encode("utf-8").hex() for s in lines]}, f)
        env = dict(os.environ, GENGRAPH_GGUF_TOKENIZE=job, GENGRAPH_GGUF_TOKENIZE_OUT=out)
        r = subprocess.run([binary, "--gtest_filter=GgufTokenizerOnFile.TokenizesTheLinesItIsGiven"],
                           env=env, capture_output=True, text=True)
        if r.returncode != 0 or not os.path.exists(out):
            sys.exit(f"gengraph's side failed ({binary}):\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
        with open(out) as f:
            return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("gguf")
    ap.add_argument("--lines", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output")
    ap.add_argument("--build", default=os.environ.get("GENGRAPH_BUILD_DIR", os.path.join(ROOT, "build")))
    ap.add_argument("--show", type=int, default=10)
    a = ap.parse_args()
    base, extra = corpus(a.lines, a.seed)
    lines = base + extra
    ours = gengraph_side(a.gguf, lines, a.build)
    theirs = llama_side(a.gguf, lines)
    report = [f"$ {' '.join(['tools/gguf_tokenizer_parity.py'] + sys.argv[1:])}",
              f"file: {os.path.basename(a.gguf)}, SHA-256 {file_sha256(a.gguf)}",
              f"gengraph's tokenizer: {ours['describe'].split(', ')[0]}, "
              f"{ours['describe'].split(', ')[1]}",
              f"host: {host()}",
              f"lines: {len(base)} of make_tokenizer_corpus.py (seed {a.seed}) + {len(extra)} extra",
              f"vocabulary load: gengraph {ours['load_s']:.2f} s (GGUF open and tokenizer), "
              f"llama.cpp {theirs['load_s']:.2f} s (vocab_only model load)",
              f"gengraph encode+decode of all lines: {ours['encode_decode_s']:.2f} s"]
    shown = 0
    total = 0
    for part, rng in (("corpus", range(len(base))), ("extra", range(len(base), len(lines)))):
        counts = {k: 0 for k in ("ids", "ids_special", "text", "text_skip", "round_trip", "marker")}
        for i in rng:
            for k in ("ids", "ids_special", "text", "text_skip"):
                if ours[k][i] != theirs[k][i]:
                    counts[k] += 1
                    if shown < a.show:
                        shown += 1
                        report.append(f"  MISMATCH {k} line {i} {json.dumps(lines[i])[:300]}\n"
                                      f"    gengraph:  {json.dumps(ours[k][i])[:400]}\n"
                                      f"    llama.cpp: {json.dumps(theirs[k][i])[:400]}")
            if ours["text"][i] != lines[i]:
                # SentencePiece writes a space as U+2581, so a line holding U+2581 itself comes
                # back with a space there (llama.cpp's decoding does the same): counted apart.
                if ours["text"][i] == lines[i].replace(SPACE_MARK, " "):
                    counts["marker"] += 1
                    continue
                counts["round_trip"] += 1
                if shown < a.show:
                    shown += 1
                    report.append(f"  NO ROUND TRIP line {i} {json.dumps(lines[i])[:300]} -> "
                                  f"{json.dumps(ours['text'][i])[:300]}")
        total += sum(v for k, v in counts.items() if k != "marker")
        report.append(f"{part}: {len(rng)} lines; lines differing from llama.cpp: "
                      f"ids {counts['ids']}, ids with BOS {counts['ids_special']}, "
                      f"decoded text {counts['text']}, decoded skipping specials "
                      f"{counts['text_skip']}; lines gengraph does not decode back: "
                      f"{counts['round_trip']} (and {counts['marker']} holding U+2581 itself, "
                      "which comes back as a space, as from llama.cpp)")
    first = len(base)  # EXTRA_LINES[0], the example
    report.append(f"{json.dumps(lines[first])} with BOS: gengraph {ours['ids_special'][first]}, "
                  f"llama.cpp {theirs['ids_special'][first]}")
    n_ids = sum(len(x) for x in theirs["ids"])
    report.append(f"tokens compared: {n_ids} (llama.cpp's, without BOS)")
    report.append("RESULT: " + ("all equal" if total == 0 else f"{total} differences"))
    text = "\n".join(report) + "\n"
    sys.stdout.write(text)
    if a.output:
        with open(a.output, "w") as f:
            f.write(text)
    return 0 if total == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Records what the reference libraries make of a tokenizer corpus, for gengraph's native-tokenizer
token-exactness tests: the ids of every line and the text those ids decode back to.

    tokenizer_oracle.py --tokenizer PATH --corpus CORPUS --out OUT.json [--no-special]

PATH      a tokenizer.json (read with the `tokenizers` library's Tokenizer.from_file, exactly what
          the file says; not through transformers, whose tokenizer classes may rebuild parts of the
          pipeline) or a SentencePiece tokenizer.model (read with the `sentencepiece` library).
CORPUS    one line per text, each the lowercase hexadecimal of the text's raw bytes (as
          tools/make_tokenizer_corpus.py writes it); an empty line is the empty text.

Each line's bytes become text with Python's bytes.decode("utf-8", errors="replace"): every
maximal ill-formed subsequence becomes one U+FFFD (the Unicode "substitution of maximal subparts"
practice, which Rust's String::from_utf8_lossy follows too). That is the defined behaviour for
invalid UTF-8 that the native tokenizer copies.

tokenizer.json: ids = tok.encode(text, add_special_tokens=True).ids (False with --no-special: then
the post-processor adds nothing, e.g. no <s> / <|begin_of_text|>), decoded = tok.decode(ids,
skip_special_tokens=False).

tokenizer.model: ids = sp.encode(text, out_type=int, add_bos=True, add_eos=False) (add_bos=False
with --no-special). Adding BOS there means prepending the model's bos_id (when it has one), as
transformers' LlamaTokenizer does by default (add_bos_token true, add_eos_token false);
sentencepiece itself adds nothing unless asked. sentencepiece never matches "<s>" or other control
pieces in the text: they are split as ordinary characters. decoded = sp.decode(ids); sentencepiece
renders control pieces (BOS, EOS) as nothing and the unknown piece as " ⁇ ", whatever one asks.

OUT: {"tokenizer": PATH, "library": "tokenizers <version>" or "sentencepiece <version>",
      "add_special_tokens": bool, "corpus": CORPUS, "corpus_sha256": hex, "lines": n,
      "encode_seconds": s, "ids": [[...], ...], "decoded": ["...", ...]}
written to a temporary file beside OUT and renamed into place. Prints the time encoding took (one
call per line, as a caller encoding texts one by one would, and for tokenizer.json also one
encode_batch call over all lines, which uses several threads).
"""
import argparse
import hashlib
import json
import os
import sys
import tempfile
import time


def fail(message):
    print(f"tokenizer_oracle.py: {message}", file=sys.stderr)
    sys.exit(1)


def read_corpus(path):
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        fail(f"cannot read corpus '{path}': {e.strerror}")
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the file's final newline ends the last line; it does not start another
    texts = []
    for n, line in enumerate(lines, 1):
        if line.endswith(b"\r"):
            fail(f"corpus '{path}' line {n}: expected lowercase hexadecimal, found a carriage return "
                 f"(the file has CRLF line ends)")
        try:
            s = line.decode("ascii")
            if s != s.lower() or len(s) % 2:
                raise ValueError
            data = bytes.fromhex(s)
        except ValueError:
            fail(f"corpus '{path}' line {n}: expected lowercase hexadecimal of the line's bytes (even "
                 f"length, 0-9a-f), found {line[:40]!r}{'...' if len(line) > 40 else ''}")
        texts.append(data.decode("utf-8", errors="replace"))
    if not texts:
        fail(f"corpus '{path}' has no lines")
    return texts, hashlib.sha256(raw).hexdigest()


def run_tokenizers(path, texts, add_special):
    import tokenizers
    try:
        tok = tokenizers.Tokenizer.from_file(path)
    except Exception as e:  # the library raises plain Exception on a bad file
        fail(f"'{path}' is not a tokenizer.json the tokenizers library {tokenizers.__version__} can read: {e}")
    start = time.perf_counter()
    ids = [tok.encode(t, add_special_tokens=add_special).ids for t in texts]
    seconds = time.perf_counter() - start
    start = time.perf_counter()
    batch = [e.ids for e in tok.encode_batch(texts, add_special_tokens=add_special)]
    batch_seconds = time.perf_counter() - start
    if batch != ids:
        fail(f"'{path}': encode_batch and encode disagree (the library is not deterministic here)")
    decoded = [tok.decode(i, skip_special_tokens=False) for i in ids]
    timing = (f"encode (one call per line) {seconds:.3f} s, encode_batch {batch_seconds:.3f} s "
              f"({len(os.sched_getaffinity(0))} CPUs)")
    return ids, decoded, f"tokenizers {tokenizers.__version__}", seconds, timing


def run_sentencepiece(path, texts, add_special):
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor()
    try:
        sp.Load(path)
    except (OSError, RuntimeError) as e:
        fail(f"'{path}' is not a SentencePiece model the sentencepiece library {spm.__version__} can read: {e}")
    if add_special and sp.bos_id() < 0:
        fail(f"'{path}' has no BOS piece (bos_id -1); run with --no-special")
    start = time.perf_counter()
    ids = [sp.encode(t, out_type=int, add_bos=add_special, add_eos=False) for t in texts]
    seconds = time.perf_counter() - start
    decoded = [sp.decode(i) for i in ids]
    return ids, decoded, f"sentencepiece {spm.__version__}", seconds, f"encode (one call per line) {seconds:.3f} s"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--no-special", action="store_true", help="encode with add_special_tokens false")
    args = ap.parse_args()
    if not os.path.isfile(args.tokenizer):
        fail(f"tokenizer '{args.tokenizer}' does not exist (expected a tokenizer.json or tokenizer.model file)")
    texts, sha = read_corpus(args.corpus)
    add_special = not args.no_special
    if args.tokenizer.endswith(".model"):
        ids, decoded, library, seconds, timing = run_sentencepiece(args.tokenizer, texts, add_special)
    else:
        ids, decoded, library, seconds, timing = run_tokenizers(args.tokenizer, texts, add_special)
    out = {"tokenizer": args.tokenizer, "library": library, "add_special_tokens": add_special,
           "corpus": args.corpus, "corpus_sha256": sha, "lines": len(texts),
           "encode_seconds": round(seconds, 6), "ids": ids, "decoded": decoded}
    folder = os.path.dirname(os.path.abspath(args.out))
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".oracle.", suffix=".tmp")
    except OSError as e:
        fail(f"cannot write into '{folder}' for --out '{args.out}': {e.strerror}")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
            f.write("\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, args.out)
    except BaseException:
        os.unlink(tmp)
        raise
    tokens = sum(len(i) for i in ids)
    print(f"{args.tokenizer}: {len(texts)} lines, {tokens} tokens, {library}; {timing}; wrote {args.out}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes the fixtures of gengraph's GGUF tokenizer test (tests/framework/text/test_tokenizer_gguf.cpp):
small vocabulary-only GGUF files, one per tokenizer kind gengraph reads from GGUF metadata, and
llama.cpp's tokenization of a corpus with each (llama-cpp-python, the version tools/peer_llama_cpp.py
builds). Nothing is downloaded: the vocabularies are those tools/make_family_tokenizers.py trains,
turned into tokenizer.ggml.* metadata as llama.cpp's convert_hf_to_gguf.py lays it out (tokens by id;
token_type 3 CONTROL for special added tokens, 4 USER_DEFINED for other added tokens, 1 NORMAL, and
for SentencePiece the model's own piece types and scores).

    make_gguf_tokenizer_fixtures.py [--out tests/fixtures/gguf_tokenizer] [--check]

OUT/<name>.gguf for each file below and OUT/expected.json: the corpus lines (hex of their UTF-8
bytes) and, per file, the ids llama_tokenize gives with add_special false and parse_special true
for every line, with add_special true for the first lines, and the text llama_detokenize gives back
for those ids (llama_detokenize's loop with remove_special false, unparse_special true, and false:
"text_skip", but without its clean_spaces pass), recorded only where it differs from the line.
--check regenerates into a temporary folder and compares (exit 1 when they differ; 77, a skip,
where llama-cpp-python is not built).

gpt2      gpt2 family, tokenizer.ggml.pre "gpt-2"
default   gpt2 family, pre "default" (llama.cpp's four regular expressions), add_bos and add_eos
          true with <|endoftext|> as both
smollm    smollm2 family, pre "smollm" (SmolLM2's: digits one by one, then GPT-2's words)
llama3    llama3 family, pre "llama-bpe" (add_bos true, <|begin_of_text|>)
qwen2     qwen2 family, pre "qwen2"
llama     spm family (tokenizer.model, LLaMA 2's SentencePiece settings), model "llama"
mistral   as llama, with [INST] and [/INST] (CONTROL) and <|sep|> (USER_DEFINED) added after the
          pieces, as Mistral's instruction tokens (the space prefix after a special token)
gemma     as llama with Gemma 3's settings: no space prefix, <start_of_turn> and <end_of_turn>
          (CONTROL), and runs of newlines, spaces and tabs written as they are (USER_DEFINED), as
          Gemma's vocabulary holds them
"""
import argparse
import filecmp
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import make_tokenizer_corpus  # noqa: E402

CORPUS_LINES = 200   # drawn from make_tokenizer_corpus.py's generator (valid UTF-8 only)
CORPUS_SEED = 53
WITH_SPECIAL_LINES = 40  # lines also tokenized with add_special true

# Lines with the special and added tokens of the families, alone, glued and overlapping; then a
# few edge cases.
SPECIAL_LINES = [
    "<|endoftext|>", "a<|endoftext|>b", " <|endoftext|> ", "<|endoftext|><|endoftext|>",
    "<|im_start|>user\nHello, how are you?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|><|im_end|>", "<|im_start|>system\nYou are 42.<|im_end|>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>",
    "<|reserved_special_token_3|> x <|reserved_special_token_250|>", "<|eom_id|><|python_tag|>",
    "<s>[INST] What is 2+2? [/INST] 4</s>", "<s> <s>  </s>", "<unk>", "x<unk>y",
    "<tool_call>{\"a\": 1}</tool_call>", "<|fim_prefix|>def f():<|fim_suffix|>\n<|fim_middle|>",
    "<|repo_name|>r<|file_sep|>f.py\n", "<|sep|> a <|sep|>b", "<mask> <mask>x", "<pad><pad>",
    "<|endoftext|", "|endoftext|>", "<|im_start", "<<|endoftext|>>", "<0x41>", "\u2581hello \u0120world",
    # bytes some vocabularies have no token for (SmolLM2's 04 06 13 14 16 1D): llama.cpp cuts there
    "make\x00\x00\x1a\x00\x00\x14\x00, just", "never\x00\x00\x13\x00", "a\x06b \x04\x1d x",
    # what llama_detokenize's clean_spaces would change, digits, contractions, whitespace runs
    "Hello , world ! It 's 'll ' x . y ?", "1234567890 \u0661\u0662\u0663 \u00b2\u00b3 12,345.67",
    "don't DON'T it'S we'Re", "\t\tindent\n\n\n  x  ", "x\r\n\r\ny", "   ",
    # Gemma's chat turns and whitespace runs
    "<start_of_turn>user\nHi  there<end_of_turn>\n<start_of_turn>model\n",
    " a  b   c    d\n\n\ne\t\t\tf \n \n",
]


def bytes_of_tokens(doc):
    """(tokens by id, token types) of a tokenizer.json document, as convert_hf_to_gguf.py lays them out."""
    vocab = dict(doc["model"]["vocab"])
    added = {t["content"]: t for t in doc.get("added_tokens", [])}
    for t in doc.get("added_tokens", []):
        vocab.setdefault(t["content"], t["id"])
    size = max(vocab.values()) + 1
    by_id = [None] * size
    for tok, i in vocab.items():
        by_id[i] = tok
    types = []
    for i, tok in enumerate(by_id):
        if tok is None:
            by_id[i] = f"[PAD{i}]"
            types.append(5)
        elif tok in added:
            types.append(3 if added[tok].get("special", False) else 4)
        else:
            types.append(1)
    return by_id, types


def merges_of(doc):
    return [m if isinstance(m, str) else " ".join(m) for m in doc["model"]["merges"]]


def header(writer, n):
    # The few hyper-parameters llama.cpp reads before the vocabulary (vocab_only stops there).
    writer.add_context_length(2048)
    writer.add_embedding_length(64)
    writer.add_block_count(1)
    writer.add_feed_forward_length(128)
    writer.add_head_count(4)
    writer.add_head_count_kv(4)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(n)


def write_gguf(path, fill):
    import gguf
    w = gguf.GGUFWriter(path, "llama")
    fill(w, gguf)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def bpe_file(path, fam, pre, bos=None, eos=None, add_bos=None, add_eos=None):
    with open(os.path.join(fam, "tokenizer.json"), encoding="utf-8") as f:
        doc = json.load(f)
    tokens, types = bytes_of_tokens(doc)
    index = {t: i for i, t in enumerate(tokens)}

    def fill(w, gguf):
        header(w, len(tokens))
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(pre)
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges_of(doc))
        if bos is not None:
            w.add_bos_token_id(index[bos])
        if eos is not None:
            w.add_eos_token_id(index[eos])
        if add_bos is not None:
            w.add_add_bos_token(add_bos)
        if add_eos is not None:
            w.add_add_eos_token(add_eos)
    write_gguf(path, fill)


def spm_file(path, model_file, added=(), add_space_prefix=True):
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=model_file)
    tokens, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        tokens.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        types.append(2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 5 if sp.is_unused(i)
                     else 6 if sp.is_byte(i) else 1)
    for text, token_type in added:  # tokens a fine-tune adds after the model's pieces
        tokens.append(text)
        scores.append(0.0)
        types.append(token_type)

    def fill(w, gguf):
        header(w, len(tokens))
        w.add_tokenizer_model("llama")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_bos_token_id(sp.bos_id())
        w.add_eos_token_id(sp.eos_id())
        w.add_unk_token_id(sp.unk_id())
        w.add_add_bos_token(True)
        w.add_add_eos_token(False)
        w.add_add_space_prefix(add_space_prefix)
    write_gguf(path, fill)


def corpus():
    out = []
    for b in make_tokenizer_corpus.lines(CORPUS_LINES * 2, CORPUS_SEED):
        b = b if isinstance(b, bytes) else b.encode("utf-8")
        try:
            b.decode("utf-8")
        except UnicodeDecodeError:
            continue
        out.append(b)
        if len(out) == CORPUS_LINES:
            break
    return [s.encode("utf-8") for s in SPECIAL_LINES] + out


def record(path, lines):
    import ctypes
    L = load_llama_cpp()
    quiet = L.llama_log_callback(lambda level, text, data: None)
    L.llama_log_set(quiet, ctypes.c_void_p(0))
    record.keep = quiet  # the callback must outlive the calls
    llama = L.Llama(model_path=path, vocab_only=True, verbose=False)
    vocab = L.llama_model_get_vocab(llama.model)

    add_space_prefix = llama.metadata.get("tokenizer.ggml.add_space_prefix", "") == "true" or (
        llama.metadata.get("tokenizer.ggml.model") == "llama"
        and "tokenizer.ggml.add_space_prefix" not in llama.metadata)

    def detok(ids, unparse):
        # llama_detokenize's own loop (remove_special false): llama_token_to_piece for each token,
        # one leading space stripped from the first when the vocabulary adds a space prefix; its
        # clean_spaces pass is not applied (gengraph leaves it out; see tokenizer_gguf.cpp).
        out = b""
        for k, t in enumerate(ids):
            buf = ctypes.create_string_buffer(256)
            n = L.llama_token_to_piece(vocab, t, buf, 256, 1 if k == 0 and add_space_prefix else 0,
                                       unparse)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = L.llama_token_to_piece(vocab, t, buf, -n, 1 if k == 0 and add_space_prefix else 0,
                                           unparse)
            out += buf.raw[:n]
        return out.decode("utf-8", errors="replace")

    ids, ids_special, text, text_skip = [], [], {}, {}
    for k, line in enumerate(lines):
        got = llama.tokenize(line, add_bos=False, special=True)
        ids.append(got)
        if k < WITH_SPECIAL_LINES:
            ids_special.append(llama.tokenize(line, add_bos=True, special=True))
        s = line.decode("utf-8")
        for unparse, where in ((True, text), (False, text_skip)):
            back = detok(got, unparse)
            if back != s:
                where[str(k)] = back
    return {"ids": ids, "ids_special": ids_special, "text": text, "text_skip": text_skip}


def load_llama_cpp():
    import glob
    cache = os.environ.get("GENGRAPH_CACHE", os.path.expanduser("~/.cache/gengraph"))
    sites = sorted(glob.glob(os.path.join(cache, "peers", "llama-cpp-python-*-py3*", "site")))
    if not sites:
        print("no llama-cpp-python build under " + cache + "/peers (tools/peer_llama_cpp.py builds it)",
              file=sys.stderr)
        sys.exit(77)  # ctest's skip code
    sys.path.append(sites[-1])
    import llama_cpp
    return llama_cpp


def generate(out):
    os.makedirs(out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, os.path.join(HERE, "make_family_tokenizers.py"), tmp],
                       check=True, stdout=subprocess.DEVNULL)
        fam = lambda name: os.path.join(tmp, name)  # noqa: E731
        files = {
            "gpt2": lambda p: bpe_file(p, fam("gpt2"), "gpt-2"),
            "default": lambda p: bpe_file(p, fam("gpt2"), "default", "<|endoftext|>",
                                          "<|endoftext|>", True, True),
            "smollm": lambda p: bpe_file(p, fam("smollm2"), "smollm", "<|im_start|>", "<|im_end|>",
                                         False),
            "llama3": lambda p: bpe_file(p, fam("llama3"), "llama-bpe", "<|begin_of_text|>",
                                         "<|end_of_text|>", True),
            "qwen2": lambda p: bpe_file(p, fam("qwen2"), "qwen2", None, "<|endoftext|>", False),
            "llama": lambda p: spm_file(p, os.path.join(fam("spm"), "tokenizer.model")),
            "mistral": lambda p: spm_file(p, os.path.join(fam("spm"), "tokenizer.model"),
                                          [("[INST]", 3), ("[/INST]", 3), ("<|sep|>", 4)]),
            "gemma": lambda p: spm_file(p, os.path.join(fam("spm"), "tokenizer.model"),
                                        [("<start_of_turn>", 3), ("<end_of_turn>", 3), ("\n", 4),
                                         ("\n\n", 4), ("\n\n\n", 4), ("  ", 4), ("   ", 4),
                                         ("\t\t\t", 4)], add_space_prefix=False),
        }
        for name, make in files.items():
            make(os.path.join(out, name + ".gguf"))
    lines = corpus()
    expected = {"lines": [b.hex() for b in lines], "files": {}}
    for name in files:
        expected["files"][name] = record(os.path.join(out, name + ".gguf"), lines)
    with open(os.path.join(out, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, separators=(",", ":"), ensure_ascii=True)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(HERE, "..", "tests", "fixtures", "gguf_tokenizer"))
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    if not a.check:
        generate(a.out)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        generate(tmp)
        names = sorted(os.listdir(tmp))
        bad = [n for n in names if not filecmp.cmp(os.path.join(tmp, n), os.path.join(a.out, n), shallow=False)]
        if bad or sorted(os.listdir(a.out)) != names:
            print("differ from a fresh run:", bad or "the file list", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

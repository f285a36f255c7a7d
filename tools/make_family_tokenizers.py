#!/usr/bin/env python3
"""Writes small but real tokenizers whose structure copies the families gengraph's native tokenizer
reads, for its token-exactness tests (tools/tokenizer_oracle.py records what the `tokenizers` and
`sentencepiece` libraries make of them). Nothing is downloaded: each vocabulary is trained here
(the `tokenizers` library's BpeTrainer; the `sentencepiece` trainer for spm/) on text this script
generates (tools/make_tokenizer_corpus.py's generator with its own seed, plus English prose and
code), so the files are small (about 3,000 tokens) and the same on every run.

    make_family_tokenizers.py OUTDIR

writes OUTDIR/<family>/tokenizer.json for each family below and OUTDIR/spm/tokenizer.model. The
structures were taken from transformers 5.17's convert_slow_tokenizer.py (GPT2Converter,
Qwen2Converter, LlamaConverter legacy and non-legacy, TikTokenConverter) and from the published
tokenizer.json files of the models named; the vocabularies and merges are ours.

gpt2     GPT-2 (openai-community/gpt2): no normalizer; pre_tokenizer ByteLevel(add_prefix_space false,
         trim_offsets true, use_regex true: GPT-2's own pattern); BPE with continuing_subword_prefix ""
         and end_of_word_suffix "", no unk; post_processor ByteLevel(trim_offsets false); decoder
         ByteLevel; <|endoftext|> the last id, special. Merges in the older "a b" string form, as
         GPT-2's file has them. Added here beyond GPT-2: "<mask>", special with lstrip true (as
         RoBERTa, also byte-level, has it).
smollm2  SmolLM2 (HuggingFaceTB/SmolLM2-*, the set-up's real model): as gpt2 but pre_tokenizer
         Sequence[Digits(individual_digits true), ByteLevel(add_prefix_space false, use_regex true)];
         its 17 special tokens at ids 0..16 (in the vocabulary too); no BOS added. As in SmolLM2's
         vocabulary, the byte-level symbols of bytes 04 06 13 14 16 1D C0 C1 F1 F2 F5..FF are absent:
         the library drops characters it cannot spell (no unk token), and so must a native reader.
llama3   LLaMA 3 / 3.1 (tiktoken converted): no normalizer; pre_tokenizer Sequence[Split(the LLaMA-3
         regex, behavior Isolated, invert false), ByteLevel(add_prefix_space false, trim_offsets true,
         use_regex false)]; BPE with ignore_merges true (a word that is a token is taken whole, merges
         or not; some tokens here, 2- and 3-digit numbers and a few words, have no merge that makes
         them, so the flag changes results as in LLaMA 3); post_processor Sequence[ByteLevel(
         add_prefix_space true, trim_offsets false, use_regex true), TemplateProcessing adding
         <|begin_of_text|>]; decoder ByteLevel; 256 special tokens after the vocabulary
         (<|begin_of_text|>, <|end_of_text|>, <|reserved_special_token_N|>, <|start_header_id|>,
         <|end_header_id|>, <|eom_id|>, <|eot_id|>, <|python_tag|>, <|finetune_right_pad_id|> in
         LLaMA 3.1's order).
qwen2    Qwen2 / Qwen2.5: normalizer NFC; pre_tokenizer Sequence[Split(Qwen2's regex: as LLaMA 3's but
         \\p{N} one digit at a time, Isolated), ByteLevel(add_prefix_space false, trim_offsets false,
         use_regex false)]; BPE without ignore_merges; post_processor and decoder ByteLevel(false,
         false, false); no BOS. Added tokens after the vocabulary as Qwen2.5: <|endoftext|>,
         <|im_start|>, <|im_end|>, the vision/box tokens (special) and <tool_call>, </tool_call>,
         <|fim_*|>, <|repo_name|>, <|file_sep|> (not special). Added here: "<|sep|>", not special and
         normalized true (what tokenizer.add_tokens gives a fine-tune).
llama2   LLaMA 2 (meta-llama/Llama-2-*-hf, legacy SentencePiece conversion): normalizer Sequence[
         Prepend("▁"), Replace(" " -> "▁")]; no pre_tokenizer; BPE with unk_token <unk>, fuse_unk true,
         byte_fallback true, vocabulary <unk>=0 <s>=1 </s>=2 <0x00>..<0xFF>=3..258 then pieces;
         post_processor TemplateProcessing adding <s>; decoder Sequence[Replace("▁" -> " "),
         ByteFallback, Fuse, Strip(content " ", start 1, stop 0)]. Merges in the "a b" string form.
         Added here: "<pad>" (special, after the vocabulary, as many fine-tunes add it) and "<|sep|>"
         (not special, rstrip true).
mistral  Mistral 7B style, the newer Metaspace form (transformers' non-legacy LlamaConverter and the
         LlamaTokenizer class of transformers 5): no normalizer; pre_tokenizer Metaspace(
         replacement "▁", prepend_scheme "first", split false); BPE as llama2 (unk <unk>, fuse_unk,
         byte_fallback); vocabulary <unk> <s> </s> [INST] [/INST] [TOOL_CALLS] [AVAILABLE_TOOLS]
         [/AVAILABLE_TOOLS] [TOOL_RESULTS] [/TOOL_RESULTS] [control_8]..[control_31] (all special), then
         <0x00>..<0xFF>, then pieces; post_processor TemplateProcessing adding <s>; decoder Metaspace(
         "▁", prepend_scheme "first", split false), as SpmConverter writes it (LlamaConverter itself
         would write llama2's decoder Sequence). Note: the `tokenizers` Metaspace decoder does not turn
         <0xNN> pieces back into bytes, so text that needed byte fallback decodes to "<0xNN>" text.
spm      tokenizer.model only (libsentencepiece): a SentencePiece BPE model trained with LLaMA 2's
         settings (identity normalization, add_dummy_prefix, no removal of extra whitespace,
         split_digits, byte_fallback, unk 0, bos 1, eos 2, no pad), vocabulary 2,000.
"""
import argparse
import io
import json
import os
import random
import sys
import tempfile

os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers  # noqa: E402
from tokenizers import pre_tokenizers, processors, trainers  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_tokenizer_corpus  # noqa: E402

VOCAB = 3000
TRAIN_SEED = 20240601  # the corpus generator's seed for training text (the tests use other seeds)

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")

SMOLLM2_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>", "<reponame>",
                    "<file_sep>", "<filename>", "<gh_stars>", "<issue_start>", "<issue_comment>",
                    "<issue_closed>", "<jupyter_start>", "<jupyter_text>", "<jupyter_code>",
                    "<jupyter_output>", "<jupyter_script>", "<empty_output>"]

SMOLLM2_MISSING_BYTES = [0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF1, 0xF2] + list(range(0xF5, 0x100))


def llama3_specials():
    """LLaMA 3.1's 256 special tokens, in id order from 128000."""
    names = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
             "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
             "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
    n = 3
    while len(names) < 256:
        names.append(f"<|reserved_special_token_{n}|>")
        n += 1
    return names


QWEN2_ADDED = [("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
               ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
               ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
               ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
               ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False),
               ("</tool_call>", False), ("<|fim_prefix|>", False), ("<|fim_middle|>", False),
               ("<|fim_suffix|>", False), ("<|fim_pad|>", False), ("<|repo_name|>", False),
               ("<|file_sep|>", False)]

MISTRAL_CONTROL = (["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]",
                    "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]"]
                   + [f"[control_{i}]" for i in range(8, 32)])
BYTE_TOKENS = [f"<0x{b:02X}>" for b in range(256)]


# ----------------------------------------------------------------------------------------------
def training_text():
    """Deterministic training text: corpus-style lines (invalid UTF-8 replaced, as the tests do)
    and extra prose and code so that English merges dominate as in real vocabularies."""
    out = [b.decode("utf-8", errors="replace") for b in make_tokenizer_corpus.lines(15000, TRAIN_SEED)]
    rng = random.Random(TRAIN_SEED + 1)
    for _ in range(15000):
        out.append(make_tokenizer_corpus.gen_prose(rng) if rng.random() < 0.85 else make_tokenizer_corpus.gen_code(rng))
    return out


def train_bpe(texts, normalizer, pre_tokenizer, vocab_size, special_tokens, byte_level, limit_alphabet=None):
    """Trains a BPE model; returns (vocab dict token->id, merges list of pairs) in trainer order."""
    tok = Tokenizer(models.BPE(unk_token="<unk>" if not byte_level else None))
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    kwargs = dict(vocab_size=vocab_size, min_frequency=2, show_progress=False, special_tokens=special_tokens)
    if byte_level:
        kwargs["initial_alphabet"] = pre_tokenizers.ByteLevel.alphabet()
    if limit_alphabet is not None:
        kwargs["limit_alphabet"] = limit_alphabet
    tok.train_from_iterator(texts, trainers.BpeTrainer(**kwargs))
    model = json.loads(tok.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1)) for m in model["merges"]]
    return model["vocab"], merges


def ordered_tokens(vocab):
    return [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]


def byte_level_encode(text):
    """The byte-level (GPT-2) spelling of text."""
    table = bytes_to_unicode()
    return "".join(table[b] for b in text.encode("utf-8"))


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def bpe(vocab_tokens, merges, **options):
    return models.BPE(vocab={t: i for i, t in enumerate(vocab_tokens)}, merges=list(merges), dropout=None, **options)


# ----------------------------------------------------------------------------------------------
# Families. Each returns (Tokenizer, options for serialize()).

def family_gpt2(texts):
    pre = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    vocab, merges = train_bpe(texts, None, pre, VOCAB - 2, [], byte_level=True)
    tok = Tokenizer(bpe(ordered_tokens(vocab), merges, continuing_subword_prefix="", end_of_word_suffix="",
                        fuse_unk=False, byte_fallback=False, ignore_merges=False))
    tok.pre_tokenizer = pre
    tok.post_processor = processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True)
    tok.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    tok.add_special_tokens([AddedToken("<mask>", special=True, normalized=False, lstrip=True)])
    return tok, {"legacy_merges": True}


def family_smollm2(texts):
    pre = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    vocab, merges = train_bpe(texts, None, pre, VOCAB, SMOLLM2_SPECIALS, byte_level=True)
    # SmolLM2's vocabulary lacks the byte-level symbols of these bytes; the library drops such
    # characters silently (BPE without unk), so the same holes are made here.
    table = bytes_to_unicode()
    holes = [table[b] for b in SMOLLM2_MISSING_BYTES]
    tokens = [t for t in ordered_tokens(vocab) if t in SMOLLM2_SPECIALS or not any(h in t for h in holes)]
    merges = [(a, b) for a, b in merges if not any(h in a + b for h in holes)]
    tok = Tokenizer(bpe(tokens, merges, continuing_subword_prefix="", end_of_word_suffix="",
                        fuse_unk=False, byte_fallback=False, ignore_merges=False))
    tok.pre_tokenizer = pre
    tok.post_processor = processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True)
    tok.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SMOLLM2_SPECIALS])
    return tok, {}


def family_llama3(texts):
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    vocab, merges = train_bpe(texts, None, pre, VOCAB - 256 - 150, [], byte_level=True)
    tokens = ordered_tokens(vocab)
    # Tokens with no merge that builds them (LLaMA 3 has many: tiktoken ranks are not merges).
    # ignore_merges=true takes such a token when a whole pre-tokenized word equals it.
    have = set(tokens)
    extra = [byte_level_encode(f"{n:02d}") for n in range(100)] + [byte_level_encode(f"{n}") for n in range(100, 1000, 7)]
    extra += [byte_level_encode(w) for w in (" tokenizer", " Tokenization", "Hello", " world", " the",
                                              " supercalifragilisticexpialidocious", "'s", "'LL",
                                              "!!!", "...", "\n\n", "    ", " 日本", "😀", " café")]
    for t in extra:
        if t not in have:
            tokens.append(t)
            have.add(t)
    tok = Tokenizer(bpe(tokens, merges, fuse_unk=False, byte_fallback=False, ignore_merges=True))
    tok.pre_tokenizer = pre
    specials = llama3_specials()
    bos_id = len(tokens)
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|>:1 $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos_id)])])
    tok.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    assert tok.token_to_id("<|begin_of_text|>") == bos_id
    return tok, {}


def family_qwen2(texts):
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    vocab, merges = train_bpe(texts, normalizers.NFC(), pre, VOCAB - len(QWEN2_ADDED) - 1, [], byte_level=True)
    tok = Tokenizer(bpe(ordered_tokens(vocab), merges, unk_token=None, continuing_subword_prefix="",
                        end_of_word_suffix="", fuse_unk=False, byte_fallback=False, ignore_merges=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()  # its options are set in the JSON: the Python class takes none
    for content, special in QWEN2_ADDED:  # one at a time keeps Qwen2.5's id order
        if special:
            tok.add_special_tokens([AddedToken(content, special=True, normalized=False)])
        else:
            tok.add_tokens([AddedToken(content, special=False, normalized=False)])
    tok.add_tokens([AddedToken("<|sep|>", special=False, normalized=True)])
    return tok, {"decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}}


def _spm_style(texts, leading, extra_vocab_size=0):
    """Trains SentencePiece-style BPE pieces (words prefixed with ▁, no piece across words) with
    `leading` tokens at ids 0.., then <0x00>..<0xFF>."""
    pre = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    vocab, merges = train_bpe(texts, None, pre, VOCAB - extra_vocab_size, leading + BYTE_TOKENS,
                              byte_level=False, limit_alphabet=300)
    tokens = ordered_tokens(vocab)
    assert tokens[:len(leading) + 256] == leading + BYTE_TOKENS, "special and byte tokens must lead the vocabulary"
    return tokens, merges


def family_llama2(texts):
    tokens, merges = _spm_style(texts, ["<unk>", "<s>", "</s>"], extra_vocab_size=2)
    tok = Tokenizer(bpe(tokens, merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True, ignore_merges=False))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s>:1 $B:1",
                                                       special_tokens=[("<s>", 1)])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(content=" ", left=1, right=0)])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ["<unk>", "<s>", "</s>"]])
    tok.add_special_tokens([AddedToken("<pad>", special=True, normalized=False)])
    tok.add_tokens([AddedToken("<|sep|>", special=False, normalized=False, rstrip=True)])
    return tok, {"legacy_merges": True}


def family_mistral(texts):
    tokens, merges = _spm_style(texts, MISTRAL_CONTROL)
    tok = Tokenizer(bpe(tokens, merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True, ignore_merges=False))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s>:1 $B:1",
                                                       special_tokens=[("<s>", 1)])
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in MISTRAL_CONTROL])
    return tok, {}


FAMILIES = [("gpt2", family_gpt2), ("smollm2", family_smollm2), ("llama3", family_llama3),
            ("qwen2", family_qwen2), ("llama2", family_llama2), ("mistral", family_mistral)]


def spm_model(texts):
    """A SentencePiece BPE model with byte fallback, as bytes (LLaMA 2's trainer settings)."""
    import sentencepiece as spm
    sentences = []
    for t in texts:
        for s in t.split("\n"):
            s = "".join(c for c in s if c >= " " or c == "\t")  # no C0 controls in training sentences
            if s.strip():
                sentences.append(s)
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=buf, model_type="bpe", vocab_size=2000,
        character_coverage=0.9995, byte_fallback=True, split_digits=True, allow_whitespace_only_pieces=True,
        normalization_rule_name="identity", remove_extra_whitespaces=False, add_dummy_prefix=True,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1, num_threads=1, input_sentence_size=0,
        shuffle_input_sentence=False, max_sentence_length=1 << 16, minloglevel=2)
    return buf.getvalue()


# ----------------------------------------------------------------------------------------------
def write_atomic(path, data):
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp.")
    except OSError as e:
        raise SystemExit(f"make_family_tokenizers.py: cannot write '{path}': {e.strerror}")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def serialize(tok, options):
    """tokenizer.json text as the library writes it (indent 2, UTF-8 kept), with merges as
    "a b" strings where the family's published file has that older form (options["legacy_merges"])
    and options["decoder"] in place of the decoder where the Python API cannot set its fields."""
    doc = json.loads(tok.to_str())
    if "decoder" in options:
        doc["decoder"] = options["decoder"]
    if options.get("legacy_merges"):
        for a, b in doc["model"]["merges"]:
            if " " in a or " " in b:
                raise SystemExit(f"make_family_tokenizers.py: merge ({a!r}, {b!r}) has a space; "
                                 f"it cannot be written in the 'a b' form")
        doc["model"]["merges"] = [f"{a} {b}" for a, b in doc["model"]["merges"]]
    return json.dumps(doc, ensure_ascii=False, indent=2) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("--only", action="append", choices=[n for n, _ in FAMILIES] + ["spm"],
                    help="write only these (repeatable)")
    args = ap.parse_args()
    texts = training_text()
    probe = [b.decode("utf-8", errors="replace") for b in make_tokenizer_corpus.lines(400, 7)]
    for name, make in FAMILIES:
        if args.only and name not in args.only:
            continue
        tok, options = make(texts)
        text = serialize(tok, options)
        # The file must load and behave exactly as the object it came from.
        again = Tokenizer.from_str(text)
        if "decoder" in options and json.loads(again.to_str())["decoder"] != options["decoder"]:
            raise SystemExit(f"make_family_tokenizers.py: {name}: the decoder did not survive loading")
        for s in probe:
            a, b = tok.encode(s).ids, again.encode(s).ids
            if a != b or tok.decode(a, skip_special_tokens=False) != again.decode(b, skip_special_tokens=False):
                raise SystemExit(f"make_family_tokenizers.py: {name}: the written tokenizer.json encodes "
                                 f"{s!r} as {b}, the in-memory tokenizer as {a}")
        path = os.path.join(args.outdir, name, "tokenizer.json")
        write_atomic(path, text.encode("utf-8"))
        print(f"wrote {path}: {again.get_vocab_size(with_added_tokens=True)} tokens, {len(text)} bytes")
    if not args.only or "spm" in args.only:
        data = spm_model(texts)
        path = os.path.join(args.outdir, "spm", "tokenizer.model")
        write_atomic(path, data)
        print(f"wrote {path}: {len(data)} bytes")


if __name__ == "__main__":
    main()

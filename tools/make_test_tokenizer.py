#!/usr/bin/env python3
"""Writes a word-level Hugging Face tokenizer into a model folder, for tests of text input and
output without downloading anything: token 0 is the EOS "<eos>", token 1 the unknown word "<unk>",
and token i >= 2 is the word "w<i>" (i < VOCAB); words are split on whitespace. (The special
tokens are not "w0"/"w1": a special token is matched inside words, so "w12" would split.)

    make_test_tokenizer.py FOLDER VOCAB
"""
import os
import sys

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from tokenizers import Tokenizer, decoders, models, pre_tokenizers  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    folder, vocab = sys.argv[1], int(sys.argv[2])
    words = {"<eos>": 0, "<unk>": 1, **{f"w{i}": i for i in range(2, vocab)}}
    tok = Tokenizer(models.WordLevel(words, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with single spaces
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>").save_pretrained(folder)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Text in and out for gengraph: the model folder's own Hugging Face tokenizer (transformers'
AutoTokenizer, local files only), used by `inputs.texts` and `gengraph generate --text`.

    hf_tokenizer.py --request REQ.json --out OUT.json

REQ: {"model": FOLDER, "encode": [text, ...]}   -> OUT: {"ids": [[id, ...], ...], "tokenizer": ...}
     {"model": FOLDER, "decode": [[id, ...], ...]} -> OUT: {"texts": [text, ...], "tokenizer": ...}
     {"model": FOLDER, "chat": [text, ...]}        -> OUT: {"texts": [prompt, ...], "tokenizer": ...}
"encode" takes "add_special_tokens": false to add none (a chat prompt has its markers already).
"chat" renders each text as one user message through the model's chat template
(apply_chat_template with add_generation_prompt, not tokenized): the prompt text that gengraph then
encodes without special tokens, as apply_chat_template(tokenize=True) does.

A folder with tokenizer.json but no tokenizer_config.json loads tokenizer.json itself. A decoded id
outside the tokenizer's vocabulary is an error (the tokenizer does not match the model).
Encoding is what `tokenizer(text)` gives: special tokens added as the tokenizer's configuration
says (none for GPT-2, BOS for LLaMA). Decoding keeps special tokens, so an EOS shows as text.
Errors go to stderr with exit status 1, naming the folder; nothing is written to OUT then.
"""
import argparse
import json
import os
import sys
import warnings

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
warnings.filterwarnings("ignore")


def fail(message):
    print(f"hf_tokenizer.py: {message}", file=sys.stderr)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--request", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    with open(args.request) as f:
        req = json.load(f)
    folder = req["model"]
    if not os.path.isdir(folder):
        fail(f"model folder '{folder}' does not exist")

    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    try:
        if os.path.isfile(os.path.join(folder, "tokenizer.json")) and not os.path.isfile(
                os.path.join(folder, "tokenizer_config.json")):
            # Without tokenizer_config.json AutoTokenizer guesses a class from config.json's
            # model_type, which may read tokenizer.json as something else. Load the file itself.
            tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(folder, "tokenizer.json"))
        else:
            tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except Exception as e:  # transformers raises many kinds here; all mean "no usable tokenizer"
        fail(f"no usable tokenizer in '{folder}' (expected tokenizer.json or the files of a "
             f"transformers tokenizer beside config.json): {type(e).__name__}: {e}")
    if isinstance(tok, bool) or not hasattr(tok, "decode"):
        fail(f"no usable tokenizer in '{folder}'")

    out = {"tokenizer": type(tok).__name__}
    if "encode" in req:
        ids = []
        for i, text in enumerate(req["encode"]):
            enc = tok(text, add_special_tokens=bool(req.get("add_special_tokens", True)))["input_ids"]
            if not enc:
                fail(f"inputs.texts[{i}] ({json.dumps(text)}) encodes to no tokens with the tokenizer in '{folder}'")
            ids.append(enc)
        out["ids"] = ids
    elif "decode" in req:
        size = len(tok)
        for seq in req["decode"]:
            bad = [t for t in seq if t < 0 or t >= size]
            if bad:
                fail(f"token id {bad[0]} is outside the vocabulary of the tokenizer in '{folder}' ({size} tokens): "
                     f"the tokenizer does not match the model")
        out["texts"] = [tok.decode(seq, skip_special_tokens=False) for seq in req["decode"]]
    elif "chat" in req:
        if not getattr(tok, "chat_template", None):
            fail(f"the tokenizer in '{folder}' has no chat template (tokenizer_config.json's chat_template "
                 f"or chat_template.jinja): --chat / inputs.chat need one")
        prompts = []
        for i, text in enumerate(req["chat"]):
            try:
                prompts.append(tok.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                                       add_generation_prompt=True))
            except Exception as e:  # jinja errors of many kinds
                fail(f"the chat template of '{folder}' failed on text {i}: {type(e).__name__}: {e}")
        out["texts"] = prompts
    else:
        fail("the request has none of 'encode', 'decode' or 'chat'")
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f)
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()

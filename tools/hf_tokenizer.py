#!/usr/bin/env python3
"""Text in and out for gengraph: the model folder's own Hugging Face tokenizer (transformers'
AutoTokenizer, local files only), used by `inputs.texts` and `gengraph generate --text`.

    hf_tokenizer.py --request REQ.json --out OUT.json
    hf_tokenizer.py --serve [--model FOLDER]

REQ: {"model": FOLDER, "encode": [text, ...]}   -> OUT: {"ids": [[id, ...], ...], "tokenizer": ...}
     {"model": FOLDER, "decode": [[id, ...], ...], "skip_special_tokens": false}
                                                   -> OUT: {"texts": [text, ...], "tokenizer": ...}
     ("whole": true: each text ends at its last whole character, and OUT has "cut_bytes": [n, ...],
      the bytes of a last character the ids leave incomplete, left out instead of shown as U+FFFD)
     {"model": FOLDER, "chat": [text, ...]}        -> OUT: {"texts": [prompt, ...], "tokenizer": ...}
     {"model": FOLDER, "messages": [[{"role": R, "content": text}, ...], ...],
      "add_generation_prompt": true}               -> OUT: {"texts": [prompt, ...], "tokenizer": ...}
"encode" takes "add_special_tokens": false to add none (a chat prompt has its markers already).
"chat" renders each text as one user message through the model's chat template
(apply_chat_template with add_generation_prompt, not tokenized): the prompt text that gengraph then
encodes without special tokens, as apply_chat_template(tokenize=True) does. "messages" renders each
conversation (R: "system", "user" or "assistant"; "add_generation_prompt" defaults to true); a
message of another form is refused by position and key ("messages[0][2]: key 'role': ...").

"chat" and "messages" take "limits": {"seconds": S, "characters": C, "characters_per_character": K}
(defaults 30, 1000000, 4) and "template_source" (where the template is, for messages): each
rendering may run S seconds and make C + K x (its contents' characters) characters, and may use
1 GiB of memory more than the process had before it (RLIMIT_AS). Past a limit the template is
refused by name ("the chat template of '<folder>' ran past 30 s on text 0"); tools/chat_render.py.

--serve answers requests of the same forms, one JSON object a line on standard input, one answer a
line on standard output: OUT as above, or {"error": message}, with the request's "id" when it has
one. The tokenizer is loaded once (--model, or the first request's "model"; a request naming another
folder loads that one, used from then on), on the first request or on {"load": true} (answered
{"tokenizer": ...}). A refused request is answered and the next one read; end of input ends the
process. Whatever the libraries print goes to standard error, never among the answers.

A folder with tokenizer.json but no tokenizer_config.json loads tokenizer.json itself. A decoded id
outside the tokenizer's vocabulary is an error (the tokenizer does not match the model).
Encoding is what `tokenizer(text)` gives: special tokens added as the tokenizer's configuration
says (none for GPT-2, BOS for LLaMA). Decoding keeps special tokens, so an EOS shows as text.
With --request, errors go to stderr with exit status 1, naming the folder; nothing is written to
OUT then. A panic of the `tokenizers` library (a regular expression that Oniguruma gives up on) is
reported naming the file and the pattern, without the library's trace.
"""
import argparse
import contextlib
import json
import os
import sys
import tempfile
import traceback
import warnings

from chat_render import TemplateLimit, ToolError, check_messages, fail, render_chat

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
warnings.filterwarnings("ignore")


def is_panic(e):
    """A Rust panic inside the tokenizers library (pyo3's PanicException, a BaseException)."""
    return type(e).__name__ == "PanicException"


@contextlib.contextmanager
def library_stderr():
    """Holds what is written to file descriptor 2 (a Rust panic's own message and trace goes there)
    and shows it only when the block ends without an exception."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        ok = False
        try:
            yield
            ok = True
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            if ok:
                held.seek(0)
                text = held.read()
                if text:
                    os.write(2, text)


def first_bad_utf8(path):
    """(offset, byte) of the first byte of `path` that is not valid UTF-8, or None."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        data.decode("utf-8")
        return None
    except UnicodeDecodeError as e:
        return e.start, data[e.start]


def check_text_files(folder):
    """The files transformers reads as text when it loads a tokenizer, refused by name when they are
    not UTF-8 (transformers would say only 'UnicodeDecodeError')."""
    names = ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json"]
    extra = os.path.join(folder, "additional_chat_templates")
    if os.path.isdir(extra):
        names += [os.path.join("additional_chat_templates", n) for n in sorted(os.listdir(extra))
                  if n.endswith(".jinja")]
    for name in names:
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            continue
        bad = first_bad_utf8(path)
        if bad:
            what = "the chat template " if name.endswith(".jinja") else ""
            fail(f"'{path}': {what}is not valid UTF-8: byte {bad[0]} (0x{bad[1]:02X}) does not begin or "
                 f"continue a character")


def regex_patterns(folder):
    """(key, pattern) of every regular expression in the folder's tokenizer.json."""
    path = os.path.join(folder, "tokenizer.json")
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except Exception:
        return []
    found = []

    def walk(v, key):
        if isinstance(v, dict):
            if isinstance(v.get("Regex"), str):
                found.append((key, v["Regex"]))
            for k, x in v.items():
                walk(x, f"{key}.{k}" if key else k)
        elif isinstance(v, list):
            for i, x in enumerate(v):
                walk(x, f"{key}[{i}]")

    walk(doc, "")
    return found


def library_failure(folder, e, text=None):
    """What a panic of the tokenizers library on `text` (or at load) means, naming the file and the
    pattern when one of the file's regular expressions is what fails on the text."""
    path = os.path.join(folder, "tokenizer.json")
    reason = str(e)
    if "retry-limit-in-match" in reason or "match-stack-limit" in reason or "time-limit" in reason:
        why = "it backtracks past the limit of the regular-expression engine (Oniguruma)"
    else:
        why = "the regular-expression engine (Oniguruma) refused it"
    if text is not None:
        from tokenizers import Regex, pre_tokenizers
        for key, pattern in regex_patterns(folder):
            try:
                with library_stderr():
                    pre_tokenizers.Split(Regex(pattern), "isolated").pre_tokenize_str(text)
            except BaseException as inner:  # noqa: B036 (a panic is a BaseException)
                if isinstance(inner, (KeyboardInterrupt, SystemExit)):
                    raise
                return f"'{path}': {key}: the regular expression {json.dumps(pattern)} could not be matched: {why}"
    return f"the tokenizers library failed on the tokenizer in '{folder}' ({why})"


def load_tokenizer(folder):
    """The tokenizer of `folder`, or a ToolError naming the folder and what is wrong."""
    if not isinstance(folder, str) or not os.path.isdir(folder):
        fail(f"model folder '{folder}' does not exist")
    check_text_files(folder)
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    try:
        with library_stderr():
            if os.path.isfile(os.path.join(folder, "tokenizer.json")) and not os.path.isfile(
                    os.path.join(folder, "tokenizer_config.json")):
                # Without tokenizer_config.json AutoTokenizer guesses a class from config.json's
                # model_type, which may read tokenizer.json as something else. Load the file itself.
                tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(folder, "tokenizer.json"))
            else:
                tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except BaseException as e:  # noqa: B036 transformers raises many kinds; a panic is a BaseException
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        if is_panic(e):
            fail(library_failure(folder, e))
        fail(f"no usable tokenizer in '{folder}' (expected tokenizer.json or the files of a "
             f"transformers tokenizer beside config.json): {type(e).__name__}: {e}")
    if isinstance(tok, bool) or not hasattr(tok, "decode"):
        fail(f"no usable tokenizer in '{folder}'")
    return tok


def byte_level_table():
    """GPT-2's byte-level alphabet: {character: byte} (the printable Latin-1 bytes as themselves,
    the others from U+0100 on)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[chr(b)] = b
        else:
            table[chr(0x100 + extra)] = b
            extra += 1
    return table


def token_bytes(token, byte_level):
    """A token's bytes: <0xNN> (byte fallback) is its byte, a byte-level token maps through GPT-2's
    byte-to-character table, any other is its text."""
    if len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
        try:
            return bytes([int(token[3:5], 16)]), True
        except ValueError:
            pass
    if all(c in byte_level for c in token):
        return bytes(byte_level[c] for c in token), False
    return token.encode("utf-8", "surrogatepass"), False


def decode_whole(tok, seq, skip):
    """tok.decode(seq) up to its last whole character, and how many bytes of a last character the
    ids leave incomplete were left out (as gengraph's native Tokenizer::decode_whole): byte-fallback
    tokens that begin it are dropped before decoding; a byte-level decoder's one U+FFFD for them is
    cut from the text. A U+FFFD that the tokens hold themselves stays."""
    import codecs
    text = tok.decode(seq, skip_special_tokens=skip)
    if not text.endswith("\ufffd"):
        return text, 0
    byte_level = byte_level_table()
    tail = tok.convert_ids_to_tokens(list(seq), skip_special_tokens=skip)[-4:]
    data, byte_tokens = b"", 0
    for token in tail:
        b, is_byte = token_bytes(token, byte_level)
        data += b
        byte_tokens = byte_tokens + 1 if is_byte else 0
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    decoder.decode(data, final=False)
    cut = len(decoder.getstate()[0])  # the bytes it holds for a character not yet complete
    if cut == 0:
        return text, 0
    if byte_tokens >= cut:
        kept = [i for i in seq if not (skip and i in tok.all_special_ids)][:-cut]
        return tok.decode(kept, skip_special_tokens=skip), cut
    return text[:-1], cut


def template_name(folder, req):
    source = req.get("template_source")
    return f"the chat template of '{folder}'" + (f" ({source})" if source else "")


def answer(tok, folder, req):
    """What one request (see the module's text) is answered: the output object, or a ToolError."""
    out = {"tokenizer": type(tok).__name__}
    if "encode" in req:
        ids = []
        for i, text in enumerate(req["encode"]):
            try:
                with library_stderr():
                    check_growth(tok, folder, text, i)
                    enc = tok(text, add_special_tokens=bool(req.get("add_special_tokens", True)))["input_ids"]
            except Refusal as e:
                fail(str(e))
            except BaseException as e:  # noqa: B036 a panic is a BaseException
                if not is_panic(e):
                    raise
                fail(f"text {i}: {library_failure(folder, e, text)}")
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
        try:
            with library_stderr():
                skip = req.get("skip_special_tokens", False) is True
                if req.get("whole") is True:  # each text up to its last whole character
                    wholes = [decode_whole(tok, seq, skip) for seq in req["decode"]]
                    out["texts"] = [text for text, _ in wholes]
                    out["cut_bytes"] = [cut for _, cut in wholes]
                else:
                    out["texts"] = [tok.decode(seq, skip_special_tokens=skip) for seq in req["decode"]]
        except BaseException as e:  # noqa: B036 a panic is a BaseException
            if not is_panic(e):
                raise
            fail(library_failure(folder, e))
    elif "chat" in req:
        if not getattr(tok, "chat_template", None):
            fail(f"the tokenizer in '{folder}' has no chat template (tokenizer_config.json's chat_template "
                 f"or chat_template.jinja): --chat / inputs.chat need one")
        name = template_name(folder, req)
        out["texts"] = [render_chat(tok, [{"role": "user", "content": text}], req.get("limits"), name, f"text {i}")
                        for i, text in enumerate(req["chat"])]
    elif "messages" in req:
        if not getattr(tok, "chat_template", None):
            fail(f"the tokenizer in '{folder}' has no chat template (tokenizer_config.json's chat_template "
                 f"or chat_template.jinja): chat messages need one")
        conversations = check_messages(req["messages"])
        generation_prompt = req.get("add_generation_prompt", True)
        if not isinstance(generation_prompt, bool):
            fail(f"add_generation_prompt: expected true or false, found {json.dumps(generation_prompt)}")
        name = template_name(folder, req)
        out["texts"] = [render_chat(tok, conversation, req.get("limits"), name, f"conversation {i}",
                                    generation_prompt) for i, conversation in enumerate(conversations)]
    else:
        fail("the request has none of 'encode', 'decode', 'chat' or 'messages'")
    return out


MAX_REQUEST_BYTES = 1 << 28


def serve(folder):
    """Answers requests from standard input until it ends (see the module's text)."""
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # what a library prints goes to standard error, not among the answers
    sys.stdout = sys.stderr
    loaded = None  # (folder, tokenizer)
    stdin = sys.stdin.buffer
    while True:
        line = stdin.readline(MAX_REQUEST_BYTES + 1)
        if not line:
            return
        req, out = {}, None
        if len(line) > MAX_REQUEST_BYTES:
            while line and not line.endswith(b"\n"):
                line = stdin.readline(1 << 20)
            out = {"error": f"a request of more than {MAX_REQUEST_BYTES} bytes is refused"}
        elif not line.strip():
            continue
        try:
            if out is None:
                try:
                    req = json.loads(line)
                except ValueError as e:
                    fail(f"the request is not JSON: {e}")
                if not isinstance(req, dict):
                    req = {}
                    fail("the request is not a JSON object")
                model = req.get("model", loaded[0] if loaded else folder)
                if model is None:
                    fail("the request names no model folder (\"model\"), and --serve was given none (--model)")
                if loaded is None or loaded[0] != model:
                    loaded = None
                    loaded = (model, load_tokenizer(model))
                out = ({"tokenizer": type(loaded[1]).__name__} if req.get("load") else
                       answer(loaded[1], model, req))
        except ToolError as e:
            out = {"error": str(e)}
        except (Exception, TemplateLimit) as e:  # a request of a form no check foresaw: answered too
            traceback.print_exc()
            out = {"error": f"tools/hf_tokenizer.py failed on the request: {type(e).__name__}: {e}"}
        if "id" in req:
            out["id"] = req["id"]
        try:
            answers.write(json.dumps(out).encode("ascii") + b"\n")
            answers.flush()
        except BrokenPipeError:  # the reader is gone: nobody to answer
            os._exit(0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--request")
    ap.add_argument("--out")
    ap.add_argument("--serve", action="store_true")
    ap.add_argument("--model")
    args = ap.parse_args()
    if args.serve:
        if args.request or args.out:
            ap.error("--serve reads its requests from standard input: no --request or --out")
        serve(args.model)
        return
    if not args.request or not args.out:
        ap.error("--request and --out are required (or --serve)")
    with open(args.request) as f:
        req = json.load(f)
    folder = req["model"]
    out = answer(load_tokenizer(folder), folder, req)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f)
    os.replace(tmp, args.out)


# The growth a normalizer or pre-tokenizer step may make, as the native tokenizer bounds it
# (framework/text/tokenizer_pipeline.h): 16 times its input, or its input + 4096 bytes.
GROWTH, SLACK, CHUNK = 16, 4096, 256


class Refusal(Exception):
    """A reason to refuse, raised where the library's standard error is held (library_stderr) and
    reported once it is released."""


def flat_steps(component, key, members):
    """(key, step) of a normalizer or pre-tokenizer, its Sequences flattened."""
    if component is None:
        return []
    if type(component).__name__ == "Sequence":
        out = []
        for k in range(100000):  # pre_tokenizers.Sequence has items but no len()
            try:
                part = component[k]
            except IndexError:
                break
            out += flat_steps(part, f"{key}.{members}[{k}]", members)
        return out
    return [(key, component)]


def check_growth(tok, folder, text, i):
    """Refuses a tokenizer whose normalizer or pre-tokenizer steps grow the text past the bound the
    native tokenizer keeps, before the library builds the whole output (a Replace of one character
    by 20,000 made 2.7 GB): the text goes through each step alone, in chunks of 256 characters."""
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is None:
        return
    try:
        norms = flat_steps(backend.normalizer, "normalizer", "normalizers")
        pres = flat_steps(backend.pre_tokenizer, "pre_tokenizer", "pretokenizers")
    except Exception:  # a library without these accessors: the encode itself goes unchecked
        return
    if not norms and not pres:
        return
    size = len(text.encode("utf-8", "replace"))
    limit = max(GROWTH * size, size + SLACK)
    file = os.path.join(folder, "tokenizer.json")

    def refuse(key, step, made):
        raise Refusal(f"text {i}: '{file}': {key} ({type(step).__name__}): the output grows past {limit} bytes "
             f"for a text of {size} bytes (a tokenizer step may make at most {GROWTH} times its input, "
             f"or its input + {SLACK} bytes); the text is refused")

    made_n = made_p = 0
    for start in range(0, len(text), CHUNK):
        chunk = text[start:start + CHUNK]
        chunk_limit = GROWTH * len(chunk.encode("utf-8", "replace")) + SLACK
        for key, step in norms:
            chunk = step.normalize_str(chunk)
            n = len(chunk.encode("utf-8", "replace"))
            if n > chunk_limit or made_n + n > limit:
                refuse(key, step, made_n + n)
        made_n += len(chunk.encode("utf-8", "replace"))
        pieces = [chunk]
        for key, step in pres:
            pieces = [p for piece in pieces for p, _ in step.pre_tokenize_str(piece)]
            n = sum(len(p.encode("utf-8", "replace")) for p in pieces)
            if n > chunk_limit or made_p + n > limit:
                refuse(key, step, made_p + n)
        made_p += sum(len(p.encode("utf-8", "replace")) for p in pieces)


if __name__ == "__main__":
    try:
        main()
    except ToolError as e:
        print(f"hf_tokenizer.py: {e}", file=sys.stderr)
        sys.exit(1)

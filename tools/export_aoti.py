#!/usr/bin/env python3
"""Exports a transformers causal LM with torch.export and compiles it with AOTInductor into a
`.pt2` package for gengraph's `aoti` backend (docs/aoti.md).

    .venv/bin/python tools/export_aoti.py --model FOLDER --out model.pt2 \
        [--dtype float32] [--device cpu] [--freezing] [--fingerprint F] [--report report.json]

One program serves prefill and decode. It follows the static-cache contract of tools/trace_hf.py
(docs/tracing.md) with the cache passed per layer: (ids, positions, slots, token_valid, valid,
keys_0, values_0, ..., keys_L-1, values_L-1) -> last logits, each [rows, kv_heads, max_length,
head_dim] cache tensor written in place at `slots`. The rows, the step's token count and the cache
length are dynamic, so one package serves every batch, prompt length and max_length up to the
model's context. The package's metadata (gengraph.*) says what it was made for; gengraph refuses a package
made for other weights, dtype, device or torch version. The package also holds a manifest
(gengraph/manifest.json: the SHA-256 of each of its files), which gengraph checks before it loads
the package: a damaged program would take the loading process down. Exit status: 0 written, 2 bad
arguments or model, 3 torch.export failed, 4 AOTInductor failed (the compiler's reason printed),
5 no compiler, 6 no space left on the device.
"""
import argparse
import errno
import hashlib
import json
import os
import shutil
import socket
import sys
import time
import traceback
import warnings
import zipfile

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
warnings.filterwarnings("ignore")

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trace_hf import DTYPES, SlotCache, Step  # noqa: E402

# Bumped whenever the exported contract changes, so that cached packages of an older contract are
# rebuilt rather than used (gengraph keys its package cache by it and checks it on load).
# 2: the cache per layer (1 passed the stacked [layers, ...] tensors).
EXPORT_FORMAT = 2


class LayerCache(SlotCache):
    """The cache as one key and one value tensor per layer, each a graph input of its own.

    Writing through a view of one stacked input is functionalised by torch.export into a copy of
    the whole stacked cache every step (measured: a decode step at 8 rows took 0.42 ms against
    0.29 ms this way on a 2-layer model); an index_put_ into an input of its own is compiled into
    an in-place scatter of just the new slots."""

    def update(self, key_states, value_states, layer_idx, cache_kwargs=None):
        k, v = self.keys[layer_idx], self.values[layer_idx]
        k[:, :, self.slots] = key_states
        v[:, :, self.slots] = value_states
        return k, v

    def get_mask_sizes(self, query_length, layer_idx=0):
        return self.keys[0].shape[2], 0

    @property
    def is_sliding(self):
        return [False] * len(self.keys)

    def __len__(self):
        return len(self.keys)


class LayerStep(Step):
    """(ids, positions, slots, token_valid, valid, keys_0, values_0, ...) -> last logits."""

    def forward(self, input_ids, positions, slots, token_valid, valid, *cache):
        layer_cache = LayerCache(list(cache[0::2]), list(cache[1::2]), slots)
        return self.run(input_ids, positions, slots, token_valid, valid, layer_cache)


def example(rows, t, max_len, layers, kv, hd, dtype, device):
    cache = tuple(torch.zeros(rows, kv, max_len, hd, dtype=dtype, device=device) for _ in range(2 * layers))
    return (torch.zeros(rows, t, dtype=torch.long, device=device), torch.zeros(rows, t, dtype=torch.long, device=device),
            torch.arange(t, device=device), torch.ones(rows, t, dtype=torch.bool, device=device),
            torch.zeros(rows, max_len, dtype=torch.bool, device=device)) + cache


MANIFEST = "gengraph/manifest.json"


def add_manifest(path):
    """Adds MANIFEST to the package at `path`: {"format": 1, "sha256": {file: hex digest}} for
    every file in it, under the archive's own folder (LibTorch's loader finds that folder from the
    first two files, which stay first)."""
    with zipfile.ZipFile(path) as z:
        names = [i.filename for i in z.infolist()]
        digests = {}
        for name in names:
            h = hashlib.sha256()
            with z.open(name) as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
            digests[name] = h.hexdigest()
    first = [n.split("/")[0] for n in names[:2]]
    prefix = first[0] + "/" if len(first) == 2 and first[0] and first[0] == first[1] else ""
    with zipfile.ZipFile(path, "a") as z:  # stored, not compressed: gengraph reads it in place
        z.writestr(prefix + MANIFEST, json.dumps({"format": 1, "sha256": digests}))


def running(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def temporary_package(out):
    """Where the package is written before it is renamed to `out` (AOTInductor insists on the
    suffix): OUT.tmp-PID-HOST.pt2. Those of exports killed before they finished (their process,
    on this host, is gone) are removed first."""
    host = socket.gethostname().replace("/", "_")
    folder = os.path.dirname(os.path.abspath(out))
    start = os.path.basename(out) + ".tmp-"
    try:
        names = os.listdir(folder)
    except OSError:
        names = []
    for name in names:
        if not (name.startswith(start) and name.endswith(".pt2")):
            continue
        pid, _, where = name[len(start):-len(".pt2")].partition("-")
        if pid.isdigit() and where in ("", host) and int(pid) != os.getpid() and not running(int(pid)):
            try:
                os.remove(os.path.join(folder, name))
            except OSError:
                pass
    return "%s.tmp-%d-%s.pt2" % (out, os.getpid(), host)


def no_space(err):
    return (isinstance(err, OSError) and err.errno == errno.ENOSPC) or "No space left on device" in str(err)


def fail(code, what, err=None):
    msg = f"export_aoti: {what}"
    if err is not None:
        lines = [line for line in str(err).strip().splitlines() if line.strip()]
        msg += ": " + (lines[0] if lines else type(err).__name__)
        if len(lines) > 1:
            msg += "\n  " + "\n  ".join(lines[1:12])
    print(msg, file=sys.stderr)
    sys.exit(code)


def load(folder, dtype):
    from transformers import AutoModelForCausalLM

    if not os.path.isfile(os.path.join(folder, "config.json")):
        fail(2, f"'{folder}' is not a model folder (no config.json)")
    try:
        try:
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation="sdpa")
        except ValueError as e:  # architectures without an sdpa path in transformers (GPT-J)
            if "sdpa" not in str(e).lower() and "scaled_dot_product" not in str(e).lower():
                raise
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation="eager")
    except Exception as e:  # noqa: BLE001 (any load failure is reported, named)
        fail(2, f"transformers cannot load '{folder}'", e)
    return model.eval()


def compiler_problem(device):
    """What makes AOTInductor's compile impossible here, or None."""
    cxx = os.environ.get("CXX") or "g++"
    if shutil.which(cxx) is None:
        return f"the C++ compiler '{cxx}' (CXX, default g++) was not found"
    if device == "cuda" and not torch.cuda.is_available():
        return "device cuda requested but torch sees no CUDA device"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="Hugging Face model folder")
    ap.add_argument("--out", required=True, help="package to write (.pt2)")
    ap.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--freezing", action="store_true",
                    help="Inductor freezing: constant-fold the weights and prepack them for the CPU GEMMs")
    ap.add_argument("--max-rows", type=int, default=1024, help="largest batch x beams the package accepts")
    ap.add_argument("--fingerprint", default="", help="gengraph's fingerprint of these weights, recorded")
    ap.add_argument("--report", default="", help="also write what was done as JSON here")
    a = ap.parse_args()
    if a.max_rows < 2:
        fail(2, "--max-rows must be at least 2 (export specialises a dimension of size 1)")
    problem = compiler_problem(a.device)
    if problem:
        fail(5, problem)

    dtype = DTYPES[a.dtype]
    model = load(a.model, dtype).to(a.device)
    cfg = model.config.get_text_config()
    layers = cfg.num_hidden_layers
    heads = cfg.num_attention_heads
    kv = getattr(cfg, "num_key_value_heads", None) or heads
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    context = getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "n_positions", None) or 4096
    step = LayerStep(model).eval()

    # Example shapes away from 0/1 (export specialises on those), ranges from 1 upwards.
    rows = torch.export.Dim("rows", min=1, max=a.max_rows)
    tokens = torch.export.Dim("tokens", min=1, max=context)
    length = torch.export.Dim("max_length", min=2, max=context)
    shapes = ({0: rows, 1: tokens}, {0: rows, 1: tokens}, {0: tokens}, {0: rows, 1: tokens},
              {0: rows, 1: length}, tuple({0: rows, 2: length} for _ in range(2 * layers)))
    ex_t, ex_len = min(5, context - 2), min(17, context)
    args = example(min(3, a.max_rows), ex_t, ex_len, layers, kv, hd, dtype, a.device)

    t0 = time.perf_counter()
    try:
        with torch.no_grad():
            # Deferred runtime asserts: with grouped-query attention the symbolic shapes reasoning
            # cannot prove min(8*L, 16*L) == 8*L for the cache length L and would refuse the range.
            program = torch.export.export(step, args, dynamic_shapes=shapes,
                                          prefer_deferred_runtime_asserts_over_guards=True)
    except Exception as e:  # noqa: BLE001
        if os.environ.get("GENGRAPH_EXPORT_TRACEBACK"):
            traceback.print_exc()
        fail(3, f"torch.export failed for {model.config.model_type} ('{a.model}')", e)
    export_s = time.perf_counter() - t0

    meta = {"format": EXPORT_FORMAT, "model_type": model.config.model_type, "model_fingerprint": a.fingerprint,
            "layers": layers, "kv_heads": kv, "head_dim": hd, "vocab_size": cfg.vocab_size, "dtype": a.dtype,
            "device": a.device, "max_rows": a.max_rows, "context": context, "freezing": a.freezing,
            "torch_version": torch.__version__.split("+")[0],
            "made_by": "tools/export_aoti.py (transformers %s)" % __import__("transformers").__version__}
    configs = {"aot_inductor.metadata": {"gengraph." + k: str(v) for k, v in meta.items()}}
    if a.freezing:
        configs["freezing"] = True
    tmp = temporary_package(a.out)
    t1 = time.perf_counter()
    try:
        with torch.no_grad():
            torch._inductor.aoti_compile_and_package(program, package_path=tmp, inductor_configs=configs)
        compile_s = time.perf_counter() - t1
        add_manifest(tmp)
        os.replace(tmp, a.out)
    except Exception as e:  # noqa: BLE001
        if os.path.exists(tmp):
            os.remove(tmp)
        if no_space(e):
            fail(6, f"no space left on device writing the package '{a.out}'", e)
        fail(4, "AOTInductor could not compile the exported program", e)
    report = dict(meta, export_seconds=round(export_s, 3), compile_seconds=round(compile_s, 3),
                  package_bytes=os.path.getsize(a.out))
    if a.report:
        with open(a.report + ".tmp", "w") as f:
            json.dump(report, f, indent=1)
        os.replace(a.report + ".tmp", a.report)
    print(f"wrote {a.out}: {meta['model_type']}, {a.dtype}, {a.device}, export {export_s:.1f} s, "
          f"compile {compile_s:.1f} s, {report['package_bytes']} bytes")


if __name__ == "__main__":
    main()

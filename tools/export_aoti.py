#!/usr/bin/env python3
"""Exports a transformers causal LM with torch.export and compiles it with AOTInductor into a
`.pt2` package for gengraph's `aoti` backend (docs/aoti.md).

    .venv/bin/python tools/export_aoti.py --model FOLDER --out model.pt2 \
        [--dtype float32] [--device cpu] [--freezing] [--fingerprint F] [--report report.json]
        [--ragged [--invariant]]

One program serves prefill, decode and speculative decoding's verify. It follows the static-cache
contract of tools/trace_hf.py (docs/tracing.md) with the cache passed per layer and the positions
whose logits are wanted: (ids, positions, slots, token_valid, valid, keep, keys_0, values_0, ...,
keys_L-1, values_L-1) -> logits [rows, P, vocab] of the step's positions `keep` (int64 [P]: the
last one for prefill and decode, every one for a verify), each [rows, kv_heads, max_length,
head_dim] cache tensor written in place at `slots`. The rows, the step's token count, P and the
cache length are dynamic, so one package serves every batch, prompt length, candidate count and
max_length up to the model's context. With --ragged, the package holds the ragged form instead
(tools/export_aoti_ragged.py): one forward over the tokens of many sequences over a paged cache,
for continuous batching; gengraph.form in its metadata says which. The package's metadata (gengraph.*) says what it was made for; gengraph refuses a package
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
# 2: the cache per layer (1 passed the stacked [layers, ...] tensors). 3: the `keep` input and
# logits [rows, P, vocab] (2 returned the last position's, [rows, vocab]).
EXPORT_FORMAT = 3


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
    """(ids, positions, slots, token_valid, valid, keep, keys_0, values_0, ...) -> the logits of the
    positions `keep`, [rows, P, vocab]."""

    def forward(self, input_ids, positions, slots, token_valid, valid, keep, *cache):
        layer_cache = LayerCache(list(cache[0::2]), list(cache[1::2]), slots)
        return self.run(input_ids, positions, slots, token_valid, valid, layer_cache, keep)


def example(rows, t, max_len, layers, kv, hd, dtype, device):
    cache = tuple(torch.zeros(rows, kv, max_len, hd, dtype=dtype, device=device) for _ in range(2 * layers))
    return (torch.zeros(rows, t, dtype=torch.long, device=device), torch.zeros(rows, t, dtype=torch.long, device=device),
            torch.arange(t, device=device), torch.ones(rows, t, dtype=torch.bool, device=device),
            torch.zeros(rows, max_len, dtype=torch.bool, device=device),
            torch.arange(t - 2, t, device=device)) + cache


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


# ---- Weight-only formats (model.weights, docs/quantization.md), quantized as gengraph does ----
# (framework/quant/quantize.cpp: quantize_int8, quantize_int4; framework/quant/projection.cpp:
# Projection): the same operations in the same order, so the package holds the very int8 / int4
# values and scales of gengraph's own model, and its projections call gengraph's operators
# (framework/quant/kernels.h), which the loading process has registered.

WEIGHT_KINDS = ("int8", "int4", "bfloat16")

# The linear layers gengraph quantizes, per model type (the fused form's projections; lm_head
# apart). GPT-J's out_proj and fc_out are one projection there, over their concatenated inputs.
PROJECTIONS = {
    "gpt2": ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"),
    "gptj": ("attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.out_proj", "mlp.fc_in", "mlp.fc_out"),
    "llama": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
              "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"),
}
PROJECTIONS["mistral"] = PROJECTIONS["qwen2"] = PROJECTIONS["gemma3_text"] = PROJECTIONS["llama"]
JOINT_INPUTS = {"gptj": ("attn.out_proj", "mlp.fc_out")}


def weights_tag(kind, group, head, act_rows=0, act_block=0, int8_head=False):
    """What the package's metadata and gengraph's package cache call a format (aoti_weights_tag)."""
    if kind == "float":
        return "float"
    # int4's groups; int8's blocks when given (0: a scale per output channel).
    grouped = kind == "int4" or (kind == "int8" and group > 0)
    tag = kind + (f"-g{group}" if grouped else "") + ("" if head else "-float-head")
    if head and int8_head and kind == "int4":
        tag += "-int8-head"
    if kind in ("int8", "int4") and act_rows > 0:
        tag += f"-a{act_rows}" + (f"-b{act_block}" if act_block > 0 else "")
    return tag


def load_operators(path, ops=("linear_int8", "linear_int4", "linear_bf16")):
    """Registers gengraph's operators (gengraph::linear_int8, ...) in this process."""
    if not path:
        path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build",
                            "libgengraph_core.so")
    if not os.path.isfile(path):
        fail(2, f"--ops-library '{path}' does not exist (build gengraph first, or name the library "
                "that holds gengraph's operators)")
    try:
        torch.ops.load_library(path)
    except Exception as e:  # noqa: BLE001
        fail(2, f"cannot load gengraph's operators from '{path}'", e)
    for op in ops:
        if not hasattr(torch.ops.gengraph, op):
            fail(2, f"'{path}' does not register gengraph::{op}")


def quantize_int8(w):
    """quantize.cpp quantize_int8, then Projection's CPU scales: (int8 [out, in], float32 [out])."""
    wf = w.to(torch.float32)
    absmax = wf.abs().amax(1)
    scales = torch.where(absmax > 0, absmax / 127.0, torch.ones_like(absmax))
    q = torch.round(wf / scales.unsqueeze(1)).clamp(-127, 127).to(torch.int8).contiguous()
    return q, scales.to(w.dtype).to(torch.float32).contiguous()


def quantize_int8_blocks(w, block):
    """quantize.cpp quantize_int8_blocks: (int8 [out, in], float16 [out, in / block]); each block's
    scale its absolute maximum / 127 rounded to float16, the levels against that float16's value."""
    n, k = w.shape
    wf = w.to(torch.float32).reshape(n, k // block, block)
    absmax = wf.abs().amax(-1)
    scale = torch.where(absmax > 0, absmax / 127.0, torch.ones_like(absmax)).to(torch.float16)
    if not torch.isfinite(scale).all():
        fail(2, "--weights int8 --group-size: a block of weights lies outside float16's range "
                "(+-65504 x 127), in which the blocks keep their scales (leave --group-size out)")
    s = scale.to(torch.float32).unsqueeze(-1)
    q = torch.where(s > 0, torch.round(wf / s).clamp(-127, 127), torch.zeros_like(wf))
    return q.to(torch.int8).reshape(n, k).contiguous(), scale.contiguous()


def quantize_int4(w, group):
    """quantize.cpp quantize_int4, then Projection's packing: (uint8 [out, in / 2] in
    kernels::pack_int4's layout, scales and zeros float16 [out, in / group])."""
    n, k = w.shape
    wf = w.to(torch.float32).reshape(n, k // group, group)
    lo, hi = wf.amin(-1), wf.amax(-1)
    span = hi - lo
    step = torch.where(span > 0, span / 15.0, torch.ones_like(span))
    scale, zero = step.to(torch.float16), lo.to(torch.float16)
    if not (bool(zero.isfinite().all()) and bool(scale.isfinite().all())):
        fail(2, "--weights int4: a group of weights lies outside float16's range (+-65504), in which "
                "int4 keeps its scales and zeros (use int8 or bfloat16 for this model)")
    q = torch.round((wf - lo.unsqueeze(-1)) / step.unsqueeze(-1)).clamp(0, 15)
    v = q.to(torch.uint8).reshape(n, k).view(n, k // 32, 2, 16)
    packed = torch.bitwise_or(v.select(2, 0), torch.bitwise_left_shift(v.select(2, 1), 4))
    return packed.reshape(n, k // 2).contiguous(), scale.contiguous(), zero.contiguous()


class WeightOnlyLinear(torch.nn.Module):
    """x W^T + b through gengraph's operator for the format, as Projection computes it on CPU:
    float32 activations in, the result in the activations' dtype, then the bias. int8 with
    `act_rows` > 0 (model.int8_activation_rows): the operator quantizes the activations of a
    product of at least that many rows too, with a scale per row or per `act_block` channels,
    deciding at every call (the package's row count is dynamic); int4 likewise, in blocks of 32
    (gengraph::linear_int4_act)."""

    def __init__(self, kind, group, tensors, bias, act_rows=0, act_block=0):
        super().__init__()
        self.kind, self.group = kind, group
        self.act_rows, self.act_block = act_rows, act_block
        for name, t in tensors.items():
            self.register_buffer(name, t)
        self.register_buffer("bias", None if bias is None else bias.detach().clone())

    def forward(self, x):
        rows = x.reshape(-1, x.shape[-1]).contiguous()
        xf = rows if rows.dtype == torch.float32 else rows.to(torch.float32)
        if self.kind == "int8" and self.act_rows > 0:
            y = torch.ops.gengraph.linear_int8_act(xf, self.q, self.scales, self.act_rows, self.act_block)
        elif self.kind == "int8":
            y = torch.ops.gengraph.linear_int8(xf, self.q, self.scales)
        elif self.kind == "int4" and self.act_rows > 0:
            y = torch.ops.gengraph.linear_int4_act(xf, self.q, self.scales, self.zeros, self.group, self.act_rows)
        elif self.kind == "int4":
            y = torch.ops.gengraph.linear_int4(xf, self.q, self.scales, self.zeros, self.group)
        else:
            y = torch.ops.gengraph.linear_bf16(xf, self.q)
        if y.dtype != x.dtype:
            y = y.to(x.dtype)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], y.shape[-1])


def weight_of(module):
    """The [out, in] weight of an nn.Linear or a transformers Conv1D ([in, out])."""
    from transformers.pytorch_utils import Conv1D

    w = module.weight.detach()
    return (w.t() if isinstance(module, Conv1D) else w).contiguous()


def quantized(kind, group, w, bias, scales_from=None, act=(0, 0)):
    """The WeightOnlyLinear for weight `w` ([out, in]); int8 takes (q, scales) from `scales_from`
    when given, and `act` = (int8_activation_rows, int8_activation_block)."""
    if kind == "int8" and group > 0:  # a float16 scale per block: each part's blocks its own
        q, scales = quantize_int8_blocks(w, group)
        return WeightOnlyLinear(kind, group, {"q": q, "scales": scales}, bias, *act)
    if kind == "int8":
        # scales_from: a part of a projection quantized over joined inputs (its values, its scales)
        q, scales = quantize_int8(w) if scales_from is None else scales_from
        return WeightOnlyLinear(kind, group, {"q": q, "scales": scales}, bias, *act)
    if kind == "int4":
        packed, scales, zeros = quantize_int4(w, group)
        return WeightOnlyLinear(kind, group, {"q": packed, "scales": scales, "zeros": zeros}, bias, *act)
    return WeightOnlyLinear(kind, group, {"q": w.to(torch.bfloat16).contiguous()}, bias)


def check_activation_block(act, w, what):
    """Refuses an --int8-activation-block that does not divide weight `w`'s input channels."""
    if act[1] > 0 and w.shape[1] % act[1]:
        fail(2, f"--int8-activation-block {act[1]}: {what} {w.shape[1]} input channels are not a "
                "multiple of it")


def quantize_model(model, kind, group, head, act=(0, 0), int8_head=False):
    """Replaces the projections gengraph quantizes (and the output head when `head`) by
    WeightOnlyLinear modules holding the same quantized weights as gengraph's model; int8 and int4
    with `act` = (int8_activation_rows, int8_activation_block) quantize activations as gengraph
    does."""
    from transformers.pytorch_utils import Conv1D

    mtype = model.config.model_type
    if mtype not in PROJECTIONS:
        fail(2, f"--weights {kind}: model type '{mtype}' has no known projection layout "
                f"(known: {', '.join(sorted(PROJECTIONS))})")
    names = PROJECTIONS[mtype]
    joint = JOINT_INPUTS.get(mtype, ())
    lm = model.get_output_embeddings()
    lm_name = next(n for n, m in model.named_modules() if m is lm)
    linears = {n: m for n, m in model.named_modules()
               if isinstance(m, (torch.nn.Linear, Conv1D)) and m is not lm}
    blocks = {}
    for name, module in linears.items():
        suffix = next((p for p in names if name.endswith("." + p)), None)
        if suffix is None:
            fail(2, f"--weights {kind}: '{name}' is a linear layer gengraph does not quantize in "
                    f"a {mtype} model (its projections: {', '.join(names)})")
        blocks.setdefault(name[:-len(suffix)], {})[suffix] = module
    count = 0
    for prefix, parts in blocks.items():
        if sorted(parts) != sorted(names):
            fail(2, f"--weights {kind}: block '{prefix}' has {sorted(parts)}, expected {sorted(names)}")
        joined = {}
        if joint:
            ws = [weight_of(parts[p]) for p in joint]
            if kind == "int8" and group == 0:  # one scale per output channel over the joined inputs
                q, scales = quantize_int8(torch.cat(ws, 1))
                edges = [0]
                for w in ws:
                    edges.append(edges[-1] + w.shape[1])
                joined = {p: (q[:, edges[i]:edges[i + 1]].contiguous(), scales) for i, p in enumerate(joint)}
            if kind == "int8" and act[0] > 0 and act[1] == 0:
                fail(2, f"--int8-activation-rows with a scale per row: gengraph scales {prefix}"
                        f"{'+'.join(joint)}'s joined input row as one, the exported model runs them "
                        "apart; give --int8-activation-block")
            elif group > 0 and any(w.shape[1] % group for w in ws):
                fail(2, f"--weights {kind}: the parts of {prefix}{'+'.join(joint)} are not multiples of "
                        f"group_size {group}: gengraph's groups would straddle them")
        for suffix, module in parts.items():
            w = weight_of(module)
            if group > 0 and w.shape[1] % group:
                fail(2, f"--weights {kind}: {prefix}{suffix}'s {w.shape[1]} input channels are not a "
                        f"multiple of group_size {group}")
            check_activation_block(act, w, f"{prefix}{suffix}'s")
            bias = module.bias.detach() if module.bias is not None else None
            parent = model.get_submodule((prefix + suffix).rsplit(".", 1)[0])
            setattr(parent, suffix.split(".")[-1], quantized(kind, group, w, bias, joined.get(suffix), act))
            count += 1
    if head:
        w = lm.weight.detach().contiguous()
        if group > 0 and not int8_head and w.shape[1] % group:
            fail(2, f"--weights {kind}: the output head's {w.shape[1]} input channels are not a multiple "
                    f"of group_size {group}")
        check_activation_block(act, w, "the output head's")
        bias = lm.bias.detach() if getattr(lm, "bias", None) is not None else None
        parent, _, attr = lm_name.rpartition(".")
        head_kind = "int8" if int8_head and kind == "int4" else kind  # model.int8_head
        head_group = 0 if head_kind != kind else group  # the int8 head: a scale per channel
        setattr(model.get_submodule(parent) if parent else model, attr,
                quantized(head_kind, head_group, w, bias, None, act))
        count += 1
    return count


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
    ap.add_argument("--weights", default="float", choices=["float"] + sorted(WEIGHT_KINDS),
                    help="store the linear layers' weights as gengraph's model.weights does (docs/quantization.md)")
    ap.add_argument("--group-size", type=int, default=0,
                    help="input channels per scale (32, 64, 128, 256): int4's groups (default 32); int8's "
                         "float16 scale per block (default: a float32 scale per output channel)")
    ap.add_argument("--float-head", action="store_true", help="keep the output head as loaded (quantize_head: false)")
    ap.add_argument("--int8-head", action="store_true", help="int4: the output head in int8 (model.int8_head)")
    ap.add_argument("--int8-activation-rows", type=int, default=0,
                    help="int8: products of at least this many rows quantize their activations too "
                         "(model.int8_activation_rows; 0: weight-only)")
    ap.add_argument("--int8-activation-block", type=int, default=0,
                    help="those activations' scales per block of this many channels (a multiple of 32; "
                         "0: a scale per row)")
    ap.add_argument("--ragged", action="store_true",
                    help="the ragged form over a paged cache, for continuous batching (docs/aoti.md)")
    ap.add_argument("--invariant", action="store_true",
                    help="--ragged: every projection through gengraph::linear_f32 (batch invariant; float32, cpu)")
    ap.add_argument("--ops-library", default="",
                    help="the shared library with gengraph's operators (default: build/libgengraph_core.so)")
    a = ap.parse_args()
    if a.max_rows < 2:
        fail(2, "--max-rows must be at least 2 (export specialises a dimension of size 1)")
    if a.weights != "float" and a.device != "cpu":
        fail(2, f"--weights {a.weights} on {a.device}: not exported yet (the package would call gengraph's "
                "weight-only operators, which have CPU kernels only)")
    if a.int8_activation_rows < 0 or a.int8_activation_block < 0 or a.int8_activation_block % 32:
        fail(2, "--int8-activation-rows must be 0 or more and --int8-activation-block 0 or a multiple "
                f"of 32, got {a.int8_activation_rows} and {a.int8_activation_block}")
    if a.int8_activation_rows and a.weights not in ("int8", "int4"):
        fail(2, f"--int8-activation-rows needs --weights int8 or int4, got --weights {a.weights}")
    if a.int8_head and (a.weights != "int4" or a.float_head):
        fail(2, "--int8-head needs --weights int4 and no --float-head")
    if a.int8_activation_rows and a.weights == "int4" and a.int8_activation_block != 32:
        fail(2, "--weights int4 with --int8-activation-rows takes --int8-activation-block 32 (the W4A8 "
                f"kernel's blocks), got {a.int8_activation_block}")
    if a.weights == "int4" and a.group_size == 0:
        a.group_size = 32
    if a.weights != "int8" and a.weights != "int4":
        a.group_size = 0  # no groups: the tag and the quantizer read none
    if a.weights in ("int8", "int4") and a.group_size not in ((0, 32, 64, 128, 256) if a.weights == "int8"
                                                              else (32, 64, 128, 256)):
        fail(2, f"--group-size must be 32, 64, 128 or 256, got {a.group_size}")
    if (a.weights == "int8" and a.group_size and a.int8_activation_rows
            and a.int8_activation_block != a.group_size):
        fail(2, f"--weights int8 --group-size {a.group_size} with --int8-activation-rows takes "
                f"--int8-activation-block {a.group_size}, got {a.int8_activation_block}")
    if a.invariant and not (a.ragged and a.weights == "float" and a.dtype == "float32" and a.device == "cpu"):
        fail(2, "--invariant needs --ragged, --weights float, --dtype float32 and --device cpu (gengraph::linear_f32 "
                f"is a float32 CPU kernel), got --weights {a.weights} --dtype {a.dtype} --device {a.device}"
                + ("" if a.ragged else " without --ragged"))
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
    # (int8_activation_rows, int8_activation_block): the block means nothing without the rows.
    act = (a.int8_activation_rows, a.int8_activation_block if a.int8_activation_rows else 0)
    if a.weights != "float":
        ops = ("linear_int8", "linear_int4", "linear_bf16") + (
            ("linear_int8_act", "linear_int4_act") if act[0] else ())
        load_operators(a.ops_library, ops)
        quantize_model(model, a.weights, a.group_size, not a.float_head, act, a.int8_head)
    if a.ragged:  # paged attention and linear_f32 are gengraph's operators, loaded here
        import export_aoti_ragged as ragged

        load_operators(a.ops_library, ("paged_attention", "linear_f32"))
        ragged.register_fakes()
        if a.invariant:
            ragged.make_invariant(model, weight_of)
        step, args, shapes = ragged.prepare(model, a.max_rows, context, layers, kv, hd, dtype, a.device)
    else:
        step = LayerStep(model).eval()
        # Example shapes away from 0/1 (export specialises on those), ranges from 1 upwards.
        rows = torch.export.Dim("rows", min=1, max=a.max_rows)
        tokens = torch.export.Dim("tokens", min=1, max=context)
        length = torch.export.Dim("max_length", min=2, max=context)
        keep = torch.export.Dim("keep", min=1, max=context)
        shapes = ({0: rows, 1: tokens}, {0: rows, 1: tokens}, {0: tokens}, {0: rows, 1: tokens},
                  {0: rows, 1: length}, {0: keep}, tuple({0: rows, 2: length} for _ in range(2 * layers)))
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
            "weights": weights_tag(a.weights, a.group_size, not a.float_head, *act, a.int8_head),
            "torch_version": torch.__version__.split("+")[0],
            "form": "ragged" if a.ragged else "step", "invariant": a.invariant,
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
    print(f"wrote {a.out}: {meta['model_type']}, {a.dtype}, weights {meta['weights']}, {a.device}, export {export_s:.1f} s, "
          f"compile {compile_s:.1f} s, {report['package_bytes']} bytes")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Traces a transformers causal LM in Python into gengraph's trace contract (docs/tracing.md) —
the seed PR's workflow, made to fit a static KV cache.

    .venv/bin/python tools/trace_hf.py --model FOLDER --rows 2 --prompt-length 5 --max-length 17 \
        --out model.pt [--dtype float32]

The file then runs through `backend: {name: trace, options: {file: model.pt}}`. The module has
methods prefill and decode with the contract's arguments; the model's own attention runs over
gengraph's cache tensors through a small Cache object that writes keys/values at `slots`, and the
attention mask is passed as a ready 4-D boolean mask, which transformers uses as given.
"""
import argparse
import json
import os
import sys
import warnings

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
warnings.filterwarnings("ignore")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402
from transformers.cache_utils import Cache  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class SlotCache(Cache):
    """A transformers Cache over gengraph's stacked buffers: [layers, rows, kv_heads, max_len, hd]."""

    def __init__(self, keys, values, slots):  # noqa: D107 (no super().__init__: no layer objects)
        self.keys, self.values, self.slots = keys, values, slots

    def update(self, key_states, value_states, layer_idx, cache_kwargs=None):
        k, v = self.keys[layer_idx], self.values[layer_idx]
        k.index_copy_(2, self.slots, key_states)
        v.index_copy_(2, self.slots, value_states)
        return k, v

    def get_seq_length(self, layer_idx=0):
        return 0

    def get_mask_sizes(self, query_length, layer_idx=0):
        return self.keys.shape[3], 0

    @property
    def is_compileable(self):
        return True

    @property
    def is_sliding(self):
        return [False] * self.keys.shape[0]

    def __len__(self):
        return self.keys.shape[0]


class Step(torch.nn.Module):
    """One step of the contract: (ids, positions, slots, token_valid, valid, keys, values) -> logits."""

    def __init__(self, model, call=None):
        super().__init__()
        self.model = model
        # What runs the model: the module itself, or (hf_peer's jit-trace peer, which swaps the
        # model's forward) the original forward method.
        self.call = call if call is not None else model
        # Eager attention adds the mask to the scores; sdpa takes it as booleans.
        self.additive_mask = model.config._attn_implementation == "eager"
        # Sliding-window attention: a query at slot i reads slots j with i - j < window. A ready 4-D
        # mask is used as given, so the window goes into it: for every layer (Mistral), or, for
        # models with layer_types (Qwen2), in a mask per layer type, which such models accept.
        cfg = model.config.get_text_config()
        types = getattr(cfg, "layer_types", None)
        self.window = getattr(cfg, "sliding_window", None) or 0
        self.mask_types = sorted(set(types)) if types else None
        if self.mask_types is None and self.window and getattr(cfg, "use_sliding_window", True) is False:
            self.window = 0

    def forward(self, input_ids, positions, slots, token_valid, valid, keys, values):
        return self.run(input_ids, positions, slots, token_valid, valid, SlotCache(keys, values, slots))

    def run(self, input_ids, positions, slots, token_valid, valid, cache, keep=None):
        """The step over any Cache object that writes at `slots` (tools/export_aoti.py has its own):
        the last position's logits [rows, vocab], or with `keep` (int64 [P], positions of the step)
        those positions' logits [rows, P, vocab]."""
        valid.index_copy_(1, slots, token_valid)
        key_index = torch.arange(valid.shape[1], device=valid.device)
        q = slots.unsqueeze(1)
        causal = (valid[:, None, None, :] & (key_index[None, :] <= q)[None, None]) | (key_index[None, :] == q)[None, None]
        sliding = causal & (key_index[None, :] > q - self.window)[None, None] if self.window else causal
        if self.mask_types is not None:
            mask = {t: self.ready(sliding if t == "sliding_attention" else causal) for t in self.mask_types}
        else:
            mask = self.ready(sliding)
        out = self.call(input_ids=input_ids, position_ids=positions, attention_mask=mask,
                         past_key_values=cache, use_cache=True,
                         logits_to_keep=1 if keep is None else keep)
        return out.logits[:, -1, :] if keep is None else out.logits

    def ready(self, mask):
        if not self.additive_mask:
            return mask
        dtype = self.model.dtype
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)

    def prefill(self, *args):
        return self.forward(*args)

    def decode(self, *args):
        return self.forward(*args)


def example(rows, t, max_len, layers, kv, hd, dtype):
    return (torch.zeros(rows, t, dtype=torch.long), torch.zeros(rows, t, dtype=torch.long),
            torch.arange(t), torch.ones(rows, t, dtype=torch.bool), torch.zeros(rows, max_len, dtype=torch.bool),
            torch.zeros(layers, rows, kv, max_len, hd, dtype=dtype), torch.zeros(layers, rows, kv, max_len, hd, dtype=dtype))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="Hugging Face model folder")
    ap.add_argument("--rows", type=int, required=True, help="batch x beams")
    ap.add_argument("--prompt-length", type=int, required=True, help="padded prompt length")
    ap.add_argument("--max-length", type=int, required=True, help="prompt + new tokens")
    ap.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if not (0 < a.prompt_length < a.max_length):
        sys.exit("trace_hf: need 0 < --prompt-length < --max-length")
    dtype = DTYPES[a.dtype]
    try:
        model = AutoModelForCausalLM.from_pretrained(a.model, dtype=dtype, attn_implementation="sdpa").eval()
    except ValueError:  # architectures without an sdpa path in transformers (GPT-J)
        model = AutoModelForCausalLM.from_pretrained(a.model, dtype=dtype, attn_implementation="eager").eval()
    cfg = model.config.get_text_config()
    model_type = model.config.model_type
    layers = cfg.num_hidden_layers
    heads = cfg.num_attention_heads
    kv = getattr(cfg, "num_key_value_heads", None) or heads
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    step = Step(model).eval()
    inputs = {"prefill": example(a.rows, a.prompt_length, a.max_length, layers, kv, hd, dtype),
              "decode": example(a.rows, 1, a.max_length, layers, kv, hd, dtype)}
    with torch.no_grad():
        traced = torch.jit.trace_module(step, inputs, check_trace=False)
    meta = {"format": 1, "model_type": model_type, "model_fingerprint": "", "layers": layers, "kv_heads": kv,
            "head_dim": hd, "vocab_size": cfg.vocab_size, "dtype": a.dtype, "rows": a.rows,
            "prompt_length": a.prompt_length, "max_length": a.max_length,
            "made_by": "tools/trace_hf.py (transformers %s)" % __import__("transformers").__version__}
    tmp = a.out + ".tmp"
    torch.jit.save(traced, tmp, _extra_files={"gengraph.json": json.dumps(meta)})
    os.replace(tmp, a.out)
    print(f"wrote {a.out}: {model_type}, rows {a.rows}, prompt {a.prompt_length}, max {a.max_length}, {a.dtype}")


if __name__ == "__main__":
    main()

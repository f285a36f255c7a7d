#!/usr/bin/env python3
"""Peers for gengraph's comparison tables: transformers' own generate() on the same model folder,
prompts and generation settings, timed the way gengraph times its backends, and written in
gengraph's results schema (one entry of "runs").

    hf_eager           generate() as it ships (sdpa attention, dynamic cache)
    hf_jit_trace       the seed PR's approach: generate() whose decode steps run a torch.jit-traced
                       graph of the model over a static cache (prefill runs eagerly); the model's
                       forward is swapped, generate() itself is untouched
    hf_static_compile  generate() with cache_implementation="static" and the forward compiled
                       with torch.compile (mode "reduce-overhead", fullgraph); on CPU it runs
                       too, but compiling a full-size model there takes minutes

Called by the gengraph runner: hf_peer.py --request REQ.json --out RUN.json
"""
import argparse
import json
import os
import sys
import time
import warnings

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
warnings.filterwarnings("ignore")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402
from transformers.generation.streamers import BaseStreamer  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from padding import left_pad  # noqa: E402
from peer_stats import peak_rss_bytes, summary, timed_note  # noqa: E402
from trace_hf import SlotCache, Step  # noqa: E402
from transformers.cache_utils import Cache  # noqa: E402
from transformers.modeling_outputs import CausalLMOutputWithPast  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# GenerationConfig keys gengraph reports that transformers' generate() takes as they are.
PASS = ["max_new_tokens", "max_length", "min_length", "min_new_tokens", "do_sample", "num_beams",
        "num_beam_groups", "diversity_penalty", "length_penalty", "early_stopping", "num_return_sequences",
        "temperature", "top_k", "top_p", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff",
        "repetition_penalty", "no_repeat_ngram_size", "bad_words_ids", "sequence_bias", "suppress_tokens",
        "begin_suppress_tokens", "forced_bos_token_id", "forced_eos_token_id",
        "exponential_decay_length_penalty", "remove_invalid_values", "renormalize_logits",
        "eos_token_id", "pad_token_id", "bos_token_id", "max_time"]


class Clock(BaseStreamer):
    """Records when generate() hands out the first new token."""

    def __init__(self, sync):
        self.sync, self.calls, self.first = sync, 0, None

    def put(self, value):
        self.calls += 1
        if self.calls == 2 and self.first is None:  # the first call carries the prompt
            self.sync()
            self.first = time.perf_counter()

    def end(self):
        pass


class PeerCache(Cache):
    """What generate() holds between steps for hf_jit_trace: a handle on the static buffers, which
    it reorders for beam search through reorder_cache()."""

    def __init__(self, state):  # noqa: D107 (no layer objects)
        self.state = state

    def reorder_cache(self, beam_idx):
        s = self.state
        s.keys.copy_(s.keys.index_select(1, beam_idx))
        s.values.copy_(s.values.index_select(1, beam_idx))
        s.valid.copy_(s.valid.index_select(0, beam_idx))

    def get_seq_length(self, layer_idx=0):
        return self.state.length

    @property
    def is_compileable(self):
        return False

    def __len__(self):
        return self.state.keys.shape[0]


def install_jit_trace(model, max_length, prompt_mask):
    """Swaps model.forward: prefill runs eagerly into static buffers, and each decode step runs a
    torch.jit trace of the step (traced on the first decode of each batch shape)."""
    cfg = model.config.get_text_config()
    layers, heads = cfg.num_hidden_layers, cfg.num_attention_heads
    kv = getattr(cfg, "num_key_value_heads", None) or heads
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    step = Step(model, call=model.forward).eval()  # the original forward, bound before the swap

    class State:
        keys = values = valid = traced = None
        rows = length = 0

    state = State()

    def forward(input_ids=None, attention_mask=None, position_ids=None, past_key_values=None, use_cache=True,
                **kwargs):
        rows, t = input_ids.shape
        dev = input_ids.device
        if t > 1 or state.keys is None or rows != state.rows:
            dtype = next(model.parameters()).dtype
            if state.keys is None or rows != state.rows:
                state.traced = None
            state.keys = torch.zeros(layers, rows, kv, max_length, hd, dtype=dtype, device=dev)
            state.values = torch.zeros_like(state.keys)
            state.valid = torch.zeros(rows, max_length, dtype=torch.bool, device=dev)
            state.rows, state.length = rows, 0
            # generate() may hand over a 4-D mask; the prompt's 2-D mask (expanded per beam or
            # returned sequence, as generate() expands inputs) says which slots are padding.
            token_valid = prompt_mask.repeat_interleave(rows // prompt_mask.shape[0], 0).bool()
            logits = step(input_ids, position_ids, torch.arange(t, device=dev), token_valid,
                          state.valid, state.keys, state.values)
        else:
            args = (input_ids, position_ids, torch.tensor([state.length], device=dev),
                    torch.ones(rows, 1, dtype=torch.bool, device=dev), state.valid, state.keys, state.values)
            if state.traced is None:
                snapshot = [x.clone() for x in (state.valid, state.keys, state.values)]
                state.traced = torch.jit.trace(step, args, check_trace=False)
                for x, saved in zip((state.valid, state.keys, state.values), snapshot):
                    x.copy_(saved)  # tracing ran the step once: undo its writes
            logits = state.traced(*args)
        state.length += t
        return CausalLMOutputWithPast(logits=logits[:, None, :], past_key_values=PeerCache(state))

    model.forward = forward


def kwargs_from(gen):
    out = {}
    for k in PASS:
        v = gen.get(k)
        if v is None or v == [] or v == {}:
            continue
        out[k] = v
    if gen.get("sequence_bias"):
        out["sequence_bias"] = [[list(ids), float(b)] for ids, b in gen["sequence_bias"]]
    if gen.get("num_beam_groups", 1) > 1:
        raise SystemExit("hf_peer: diverse beam search is not in transformers 5.17's generate()")
    for k in ("frequency_penalty", "presence_penalty", "top_logprobs"):
        if gen.get(k):
            raise SystemExit(f"hf_peer: '{k}' is a gengraph extension that transformers does not have")
    for k in ("logit_bias", "stop_sequences", "processors", "stopping_criteria", "strategy"):
        if gen.get(k):
            raise SystemExit(f"hf_peer: '{k}' is a gengraph extension that transformers does not have")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--request", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    hf_logging.disable_progress_bar()
    req = json.load(open(a.request))
    torch.set_num_threads(int(req.get("threads") or torch.get_num_threads()))
    device = torch.device(req["device"])
    peer = req["peer"]
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    model = AutoModelForCausalLM.from_pretrained(req["model"], dtype=DTYPES[req["dtype"]]).to(device).eval()
    gen = kwargs_from(req["generation"])
    if peer == "hf_static_compile":
        gen["cache_implementation"] = "static"
        model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
    prompts = req["prompts"]

    pad = gen.get("pad_token_id")
    if pad is None:
        eos = gen.get("eos_token_id")
        pad = (eos[0] if isinstance(eos, list) else eos) if eos not in (None, []) else 0
    ids, mask = left_pad(prompts, pad)
    width = ids.shape[1]
    ids, mask = ids.to(device), mask.to(device)
    if peer == "hf_jit_trace":
        total = width + gen["max_new_tokens"] if "max_new_tokens" in gen else gen.get("max_length", width + 20)
        install_jit_trace(model, total, mask)
    beams = gen.get("num_beams", 1) > 1
    eos = gen.get("eos_token_id")
    eos = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))

    def once():
        clock = None if beams else Clock(sync)
        torch.manual_seed(req["seed"])
        sync()
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, return_dict_in_generate=True,
                                 output_scores=beams, streamer=clock, **gen)
        sync()
        return out, t0, time.perf_counter(), clock

    for _ in range(int(req["warmup"])):
        once()
    ttft, total, per_token, tps, outputs, steps = [], [], [], [], None, 0
    for _ in range(int(req["repeats"])):
        out, t0, t1, clock = once()
        steps = out.sequences.shape[1] - width
        total.append((t1 - t0) * 1e3)
        tps.append(len(prompts) * steps / (t1 - t0))
        if clock is not None and clock.first is not None:
            ttft.append((clock.first - t0) * 1e3)
            if steps > 1:
                per_token.append((t1 - clock.first) * 1e3 / (steps - 1))
        if outputs is None:
            rows = out.sequences[:, width:].tolist()
            per = len(rows) // len(prompts)
            seqs = []
            for i, row in enumerate(rows):
                n = len(row)
                if beams:
                    n = int((out.beam_indices[i] != -1).sum())
                else:
                    for j, t in enumerate(row):
                        if t in eos:
                            n = j + 1
                            break
                entry = {"tokens": row[:n]}
                if beams:
                    entry["score"] = float(out.sequences_scores[i])
                seqs.append(entry)
            outputs = [{"input": i, "prompt_length": len(prompts[i]), "sequences": seqs[i * per:(i + 1) * per]}
                       for i in range(len(prompts))]
    run = {"label": req["label"], "backend": "peer:" + peer, "options": {}, "report": {}, "steps": steps,
           "deterministic_across_repeats": True, "outputs": outputs,
           "timings": {"time_to_first_token_ms": summary(ttft), "decode_ms_per_token": summary(per_token),
                       "total_ms": summary(total), "tokens_per_second": summary(tps)},
           # This process's peak (the model, torch and the interpreter), as gengraph's rows report
           # their process's; on CUDA the caching allocator's peak, weights included.
           "memory": {"peak_rss_bytes": peak_rss_bytes(),
                      "peak_device_bytes": torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0},
           "peer": {"transformers": __import__("transformers").__version__, "torch": torch.__version__,
                    "note": timed_note(req) + "; time to first token from a streamer"}}
    json.dump(run, open(a.out, "w"))


if __name__ == "__main__":
    main()

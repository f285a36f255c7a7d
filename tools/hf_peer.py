#!/usr/bin/env python3
"""Peers for gengraph's comparison tables: transformers' own generate() on the same model folder,
prompts and generation settings, timed the way gengraph times its backends, and written in
gengraph's results schema (one entry of "runs").

    hf_eager           generate() as it ships (sdpa attention, dynamic cache)
    hf_static_compile  generate() with cache_implementation="static" and the forward compiled
                       with torch.compile (CUDA only: on CPU the compile alone takes minutes)

Called by the gengraph runner: hf_peer.py --request REQ.json --out RUN.json
"""
import argparse
import json
import os
import statistics
import sys
import time
import warnings

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
warnings.filterwarnings("ignore")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402
from transformers.generation.streamers import BaseStreamer  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from padding import left_pad  # noqa: E402

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


def summary(values):
    if not values:
        return {}
    s = sorted(values)
    return {"median": statistics.median(s), "min": s[0], "max": s[-1], "mean": statistics.fmean(s),
            "stdev": statistics.stdev(s) if len(s) > 1 else 0.0, "values": values}


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
    for k in ("frequency_penalty", "presence_penalty"):
        if gen.get(k):
            raise SystemExit(f"hf_peer: '{k}' is a gengraph extension that transformers does not have")
    if gen.get("logit_bias") or gen.get("stop_sequences") or gen.get("processors"):
        raise SystemExit("hf_peer: logit_bias, stop_sequences and processors lists are gengraph extensions")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--request", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    req = json.load(open(a.request))
    torch.set_num_threads(int(req.get("threads") or torch.get_num_threads()))
    device = torch.device(req["device"])
    peer = req["peer"]
    if peer == "hf_static_compile" and device.type != "cuda":
        sys.exit("hf_peer: hf_static_compile runs on CUDA only (set model.device: cuda or drop the peer)")
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
           "memory": {"peak_rss_bytes": 0, "peak_device_bytes": 0},
           "peer": {"transformers": __import__("transformers").__version__, "torch": torch.__version__,
                    "note": "timed as a separate process after gengraph's rows; time to first token from a streamer"}}
    json.dump(run, open(a.out, "w"))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Token parity with transformers on a random Gemma 3 text model of gemma-3-270m's shape (opt-in:
the model is 1 GB in float32, too big for a fixture).

    .venv/bin/python tools/gemma3_shape_parity.py [--new-tokens 16] [--prompt-length 600]
                                                  [--gengraph build/gengraph] [--out FILE]

Builds Gemma3ForCausalLM with the shape of gengraph's gemma3-270m-shape preset (hidden 640, 18
layers, 4 heads over 1 key/value head of 256, GeGLU 2048, vocabulary 262144, local layers with a
window of 512 and rope base 1e4, every sixth layer global with base 1e6, tied embeddings) from a
fixed seed, with its norms' weights drawn too (transformers starts them at zero, which would leave
their (1 + weight) scales untested), and saves it to a temporary folder. Two left-padded prompts
longer than the window (--prompt-length and 60 fewer tokens) go through transformers' generate()
(CPU, float32, sdpa) with greedy search and beam search (3 beams), and through `gengraph generate`
on the same folder: the eager backend with a growing cache and with a static cache on the fused
model, and with a static cache on the unfused one (transformers' formulation op by op); the trace
backend; cuda_graph's static step uncaptured under the whole-step loop (what a CUDA graph replays,
run on CPU); and the aoti backend (its package built for this model into a temporary
GENGRAPH_AOTI_CACHE, removed afterwards). The tokens must be equal, and the beam scores within
1e-4. Exit status 0 when everything matches, 1 otherwise; the report goes to standard output (and
to --out).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import Gemma3ForCausalLM, Gemma3TextConfig  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from padding import left_pad  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# gengraph's gemma3-270m-shape preset (framework/model/loader.cpp).
SHAPE = dict(vocab_size=262144, max_position_embeddings=32768, hidden_size=640, intermediate_size=2048,
             num_hidden_layers=18, num_attention_heads=4, num_key_value_heads=1, head_dim=256,
             hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6, sliding_window=512,
             sliding_window_pattern=6, query_pre_attn_scalar=256, rope_theta=1000000.0,
             rope_local_base_freq=10000.0, tie_word_embeddings=True, bos_token_id=2, eos_token_id=1,
             pad_token_id=0)
SEED = 270
NORM_STD = 0.3
# gengraph's rows: (label, --set overrides)
ROWS = [("eager growing, fused", ["backend={name: eager, options: {cache: growing}}"]),
        ("eager static, fused", ["backend={name: eager, options: {cache: static}}"]),
        ("eager static, unfused", ["backend={name: eager, options: {cache: static}}", "model.fused=false"]),
        ("trace", ["backend={name: trace}"]),
        ("cuda_graph uncaptured, whole step", [
            "backend={name: cuda_graph, options: {capture: false}, loop: {whole_step: on, capture: false}}"]),
        ("aoti", ["backend={name: aoti}"])]


def build(folder):
    torch.manual_seed(SEED)
    model = Gemma3ForCausalLM(Gemma3TextConfig(**SHAPE, attn_implementation="sdpa")).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(0.0, NORM_STD)
    model.save_pretrained(folder, safe_serialization=True)
    return model


def prompts(length):
    g = torch.Generator().manual_seed(SEED + 1)
    # Ids from 3 on (0 pad, 1 eos, 2 bos), the first one bos as a tokenizer would put it.
    return [[2] + torch.randint(3, 50000, (n - 1,), generator=g).tolist() for n in (length, length - 60)]


def hf_generate(model, inputs, new_tokens, beams):
    ids, mask = left_pad(inputs, 0)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens,
                             eos_token_id=None, pad_token_id=0,
                             do_sample=False, num_beams=beams, return_dict_in_generate=True,
                             output_scores=beams > 1)
    seqs = out.sequences[:, ids.shape[1]:].tolist()
    scores = out.sequences_scores.tolist() if beams > 1 else [None] * len(seqs)
    return [{"tokens": t, "score": s} for t, s in zip(seqs, scores)]


def gengraph_generate(binary, folder, inputs, new_tokens, beams, overrides, env):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.json")
        cmd = [binary, "generate", "--model", folder, "--max-new-tokens", str(new_tokens),
               "--output", out, "--quiet", "--set", "generation.num_beams=%d" % beams,
               "--set", "generation.eos_token_id=[]", "--set", "generation.do_sample=false"]
        for p in inputs:
            cmd += ["--prompt", ",".join(map(str, p))]
        for o in overrides:
            cmd += ["--set", o]
        res = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
        if res.returncode != 0:
            sys.exit(f"gemma3_shape_parity: gengraph failed ({res.returncode}):\n{res.stderr}")
        with open(out) as f:
            doc = json.load(f)
    outs = doc["runs"][0]["outputs"]
    return [{"tokens": o["sequences"][0]["tokens"], "score": o["sequences"][0].get("score")} for o in outs]


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return "unknown CPU"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--prompt-length", type=int, default=600, help="the longer prompt (the other 60 fewer)")
    ap.add_argument("--gengraph", default=os.path.join(ROOT, "build", "gengraph"))
    ap.add_argument("--out", default="", help="also write the report here")
    a = ap.parse_args()
    if a.prompt_length - 60 <= SHAPE["sliding_window"]:
        sys.exit("gemma3_shape_parity: --prompt-length must leave both prompts longer than the window (572+)")
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    lines = ["command: .venv/bin/python tools/gemma3_shape_parity.py " + " ".join(sys.argv[1:]),
             f"host: {cpu_name()}, {os.cpu_count()} cores",
             f"gemma3_shape_parity: transformers {transformers.__version__}, torch {torch.__version__.split('+')[0]}, "
             f"seed {SEED}, norms drawn with std {NORM_STD}",
             f"shape: {json.dumps(SHAPE)}"]
    inputs = prompts(a.prompt_length)
    lines.append(f"prompts: {[len(p) for p in inputs]} tokens (window {SHAPE['sliding_window']}), "
                 f"{a.new_tokens} new tokens, CPU float32")
    ok = True
    with tempfile.TemporaryDirectory() as folder, tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, GENGRAPH_AOTI_CACHE=cache)  # the aoti package (1 GB) goes with it
        t0 = time.perf_counter()
        model = build(folder)
        lines.append(f"model: {sum(p.numel() for p in model.parameters())} parameters, built and saved "
                     f"in {time.perf_counter() - t0:.1f} s")
        for what, beams in (("greedy", 1), ("beam search, 3 beams", 3)):
            t0 = time.perf_counter()
            want = hf_generate(model, inputs, a.new_tokens, beams)
            lines.append(f"{what}: transformers in {time.perf_counter() - t0:.1f} s")
            for i, w in enumerate(want):
                score = "" if w["score"] is None else f" score {w['score']:.6f}"
                lines.append(f"  input {i}: {w['tokens']}{score}")
            for label, overrides in ROWS:
                t0 = time.perf_counter()
                got = gengraph_generate(a.gengraph, folder, inputs, a.new_tokens, beams, overrides, env)
                same = all(g["tokens"] == w["tokens"] for g, w in zip(got, want)) and len(got) == len(want)
                close = all(w["score"] is None or abs(g["score"] - w["score"]) <= 1e-4 for g, w in zip(got, want))
                ok = ok and same and close
                verdict = "same tokens" if same else "DIFFERENT tokens"
                if beams > 1:
                    diff = max(abs(g["score"] - w["score"]) for g, w in zip(got, want))
                    verdict += f", scores within {diff:.2g}" if close else f", scores DIFFER by {diff:.2g}"
                lines.append(f"  gengraph {label}: {verdict} ({time.perf_counter() - t0:.1f} s)")
                if not same:
                    for i, g in enumerate(got):
                        lines.append(f"    input {i}: {g['tokens']}")
    lines.append("result: " + ("PASS, every row gives transformers' tokens" if ok else "FAIL"))
    report = "\n".join(lines) + "\n"
    print(report, end="")
    if a.out:
        with open(a.out, "w") as f:
            f.write(report)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

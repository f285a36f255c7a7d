"""The Python layer's cost, measured side by side in one run (docs/python.md#overhead).

1. Per token, gengraph.Engine.generate() from Python (the wall clock around the call: settings
   in, the Generation out) against `gengraph run` of the same experiment (the CLI's own timing
   of the same generation), built-in backends, batch 1, interleaved rounds.
2. Per decoding step, a backend written in Python against the same backend in C++
   ("fixed_logits": no model, the same logits every call), so that the difference is what a
   Python backend's call costs (the GIL, the tensors wrapped, the method call, the checks).

    PYTHONPATH=build/python .venv/bin/python bench/bench_python.py [--output FILE.json]
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

import torch

import gengraph

ROOT = pathlib.Path(__file__).resolve().parents[1]


def median(xs):
    return statistics.median(xs)


def cli_block(gengraph_bin, model, rows, new_tokens, repeats):
    """Per-repeat total ms of each backend row, from one `gengraph run`."""
    cfg = {"name": "python_overhead_cli", "model": {"preset": model},
           "backends": [{"name": b, "label": label, "options": opts} for label, b, opts in rows],
           "inputs": {"prompts": [[11, 42, 7, 300, 19]]},
           "generation": {"max_new_tokens": new_tokens, "min_new_tokens": new_tokens},
           "run": {"warmup": 2, "repeats": repeats}}
    with tempfile.TemporaryDirectory() as d:
        path = pathlib.Path(d) / "c.yaml"
        path.write_text(json.dumps(cfg))
        out = pathlib.Path(d) / "r.json"
        subprocess.run([gengraph_bin, "run", str(path), "--quiet", "--output", str(out)],
                       check=True, capture_output=True)
        doc = json.loads(out.read_text())
    return {r["label"]: r["timings"]["total_ms"]["values"] for r in doc["runs"]}


def python_block(engines, new_tokens, repeats):
    """Per-repeat wall ms around generate(), and the generation's own ms, per engine."""
    out = {}
    for label, e in engines.items():
        for _ in range(2):
            e.generate([[11, 42, 7, 300, 19]], max_new_tokens=new_tokens,
                       min_new_tokens=new_tokens, seed=0)
        wall, inner = [], []
        for _ in range(repeats):
            t = time.perf_counter()
            g = e.generate([[11, 42, 7, 300, 19]], max_new_tokens=new_tokens,
                           min_new_tokens=new_tokens, seed=0)
            wall.append((time.perf_counter() - t) * 1e3)
            inner.append(g.seconds * 1e3)
        out[label] = (wall, inner)
    return out


class PyFixed:
    """fixed_logits written in Python."""

    def __init__(self, model, options):
        self.vocab = model.vocab_size
        self.logits = None

    def prepare(self, rows, max_length):
        self.logits = torch.zeros(rows, self.vocab)
        self.logits[:, 1] = 1.0

    def prefill(self, input_ids, positions, token_valid):
        return self.logits

    def decode(self, input_ids, positions, token_valid, parent_rows):
        return self.logits


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt2-tiny")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=200, help="decode steps, part 2")
    ap.add_argument("--output")
    args = ap.parse_args()
    gengraph_bin = os.environ.get("GENGRAPH_CLI", str(ROOT / "build" / "gengraph"))

    rows = [("eager", "eager", {}), ("eager-static", "eager", {"cache": "static"}),
            ("trace", "trace", {})]
    model = gengraph.Model(args.model)
    engines = {label: gengraph.Engine(model, backend=b, **opts) for label, b, opts in rows}
    cli = {label: [] for label, _, _ in rows}
    py = {label: ([], []) for label, _, _ in rows}
    for _ in range(args.rounds):  # interleaved: CLI block, Python block, ...
        for label, values in cli_block(gengraph_bin, args.model, rows, args.new_tokens,
                                       args.repeats).items():
            cli[label] += values
        for label, (wall, inner) in python_block(engines, args.new_tokens, args.repeats).items():
            py[label][0].extend(wall)
            py[label][1].extend(inner)

    # Part 2: a Python backend's call, against the same backend in C++.
    gengraph._gengraph._register_fixed_logits_backend()
    gengraph.register_backend("py_fixed_logits", PyFixed, replace=True)
    per_step = {}
    for name in ("fixed_logits", "py_fixed_logits"):
        per_step[name] = []
    fixed = {n: gengraph.Engine(model, backend=n) for n in per_step}
    for _ in range(args.rounds * 3):
        for name, e in fixed.items():
            e.generate([[2, 3]], max_new_tokens=args.steps, min_new_tokens=args.steps)
            g = e.generate([[2, 3]], max_new_tokens=args.steps, min_new_tokens=args.steps)
            per_step[name].append((g.seconds - g.time_to_first_token_s) * 1e6 / (g.steps - 1))

    result = {"model": args.model, "new_tokens": args.new_tokens, "batch": 1,
              "threads": torch.get_num_threads(), "repeats": args.repeats * args.rounds,
              "layer": {}, "python_backend": {}}
    lines = [f"Python layer against the CLI: {args.model}, batch 1, {args.new_tokens} new tokens, "
             f"{torch.get_num_threads()} threads, {args.rounds} interleaved rounds x "
             f"{args.repeats} repeats (medians)",
             f"{'row':<14}{'CLI ms':>10}{'Python wall ms':>16}{'in-call ms':>12}"
             f"{'vs CLI':>9}{'per token us':>14}{'wall - in-call':>16}"]
    for label, _, _ in rows:
        c, (w, i) = median(cli[label]), (median(py[label][0]), median(py[label][1]))
        over = (w - c) / c
        result["layer"][label] = {"cli_total_ms": c, "python_wall_ms": w, "python_inner_ms": i,
                                  "overhead_fraction": over,
                                  "overhead_us_per_token": (w - c) * 1e3 / args.new_tokens,
                                  "wall_minus_in_call_ms": w - i}
        lines.append(f"{label:<14}{c:>10.3f}{w:>16.3f}{i:>12.3f}{over * 100:>8.1f}%"
                     f"{(w - c) * 1e3 / args.new_tokens:>14.2f}{w - i:>13.3f} ms")
    c_step, p_step = median(per_step["fixed_logits"]), median(per_step["py_fixed_logits"])
    result["python_backend"] = {"cpp_us_per_step": c_step, "python_us_per_step": p_step,
                                "overhead_us_per_step": p_step - c_step, "steps": args.steps}
    lines += ["", f"A backend in Python against the same in C++ (fixed logits, no model; "
              f"{args.steps} decode steps, medians of {len(per_step['fixed_logits'])}):",
              f"  C++ fixed_logits      {c_step:8.2f} us per step (the loop alone)",
              f"  Python fixed_logits   {p_step:8.2f} us per step",
              f"  a Python call costs   {p_step - c_step:8.2f} us per step"]
    lines.insert(2, "(CLI ms: `gengraph run`'s own timing of the generation, in its process; "
                    "Python wall: around generate() in this one; in-call: the same "
                    "generation's own timing here; wall - in-call: the Python layer's cost a call)")
    print("\n".join(lines))
    if args.output:
        pathlib.Path(args.output).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())

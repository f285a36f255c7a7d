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
    """Per repeat, per engine: the wall ms around generate() from Python, the C++ Engine call's
    own wall ms (the same call timed inside the module), and the generation's own ms."""
    out = {}
    settings = {"max_new_tokens": new_tokens, "min_new_tokens": new_tokens}
    for label, e in engines.items():
        for _ in range(2):
            e.generate([[11, 42, 7, 300, 19]], seed=0, **settings)
        wall, call, inner = [], [], []
        for i in range(repeats):
            if i % 2 == 0:  # generate() as users call it
                t = time.perf_counter()
                g = e.generate([[11, 42, 7, 300, 19]], seed=0, **settings)
                wall.append((time.perf_counter() - t) * 1e3)
                inner.append(g.seconds * 1e3)
            else:  # the same call, timed in C++ too
                e.manual_seed(0)
                g, seconds = e._engine._generate_timed([[11, 42, 7, 300, 19]], settings)
                call.append((seconds - g.seconds) * 1e3)
        out[label] = (wall, inner, call)
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
    if args.output:  # checked before the work, not after it
        folder = pathlib.Path(args.output).resolve().parent
        if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
            sys.exit(f"error: --output {args.output}: the folder {folder} does not exist or "
                     "refuses writes")
    gengraph_bin = os.environ.get("GENGRAPH_CLI", str(ROOT / "build" / "gengraph"))

    rows = [("eager", "eager", {}), ("eager-static", "eager", {"cache": "static"}),
            ("trace", "trace", {})]
    model = gengraph.Model(args.model)
    engines = {label: gengraph.Engine(model, backend=b, **opts) for label, b, opts in rows}
    cli = {label: [] for label, _, _ in rows}
    py = {label: ([], [], []) for label, _, _ in rows}
    for _ in range(args.rounds):  # interleaved: CLI block, Python block, ...
        for label, values in cli_block(gengraph_bin, args.model, rows, args.new_tokens,
                                       args.repeats).items():
            cli[label] += values
        for label, parts in python_block(engines, args.new_tokens, args.repeats).items():
            for mine, theirs in zip(py[label], parts):
                mine.extend(theirs)

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
             f"{'row':<14}{'CLI ms':>9}{'Python ms':>11}{'in-call ms':>12}{'vs CLI':>9}"
             f"{'outside timer':>15}{'of it Python':>14}{'Python share':>14}"]
    for label, _, _ in rows:
        c = median(cli[label])
        w, i, engine_outside = (median(py[label][0]), median(py[label][1]),
                                median(py[label][2]))
        python_ms = (w - i) - engine_outside
        result["layer"][label] = {"cli_total_ms": c, "python_wall_ms": w, "python_inner_ms": i,
                                  "vs_cli_fraction": (w - c) / c,
                                  "outside_timer_ms": w - i,
                                  "engine_outside_timer_ms": engine_outside,
                                  "python_layer_ms": python_ms,
                                  "python_layer_fraction": python_ms / i}
        lines.append(f"{label:<14}{c:>9.3f}{w:>11.3f}{i:>12.3f}{(w - c) / c * 100:>8.1f}%"
                     f"{w - i:>12.3f} ms{python_ms:>11.3f} ms{python_ms / i * 100:>13.2f}%")
    lines.insert(2, "CLI ms: `gengraph run`'s own timing of the generation, in its process; "
                    "Python ms: the wall clock around generate() in this one; in-call: that "
                    "generation's own timing; outside timer: Python ms - in-call; of it Python: "
                    "what is left after the C++ Engine call's own untimed work (timed inside "
                    "the module), i.e. the Python layer; Python share: that / in-call")
    c_step, p_step = median(per_step["fixed_logits"]), median(per_step["py_fixed_logits"])
    result["python_backend"] = {"cpp_us_per_step": c_step, "python_us_per_step": p_step,
                                "overhead_us_per_step": p_step - c_step, "steps": args.steps}
    lines += ["", f"A backend in Python against the same in C++ (fixed logits, no model; "
              f"{args.steps} decode steps, medians of {len(per_step['fixed_logits'])}):",
              f"  C++ fixed_logits      {c_step:8.2f} us per step (the loop alone)",
              f"  Python fixed_logits   {p_step:8.2f} us per step",
              f"  a Python call costs   {p_step - c_step:8.2f} us per step"]
    print("\n".join(lines))
    if args.output:
        pathlib.Path(args.output).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())

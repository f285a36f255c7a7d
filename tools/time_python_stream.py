#!/usr/bin/env python3
"""Times Python's Engine.stream against Engine.generate on the same greedy request, alternating
the two in one process (medians of --repeats each, after one warm-up of each): what streaming on
its own thread costs. Needs the built package on PYTHONPATH and the model from the set-up.

    PYTHONPATH=build/python .venv/bin/python tools/time_python_stream.py [--model smollm2-135m]
"""
import argparse
import statistics
import time

import gengraph


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--prompt-length", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=4)
    args = ap.parse_args()
    engine = gengraph.Engine(args.model)
    ids = [list(range(100, 100 + args.prompt_length))]
    kw = dict(max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, do_sample=False)

    def generate():
        start = time.perf_counter()
        engine.generate(ids, **kw)
        return time.perf_counter() - start

    def stream():
        start = time.perf_counter()
        for _ in engine.stream(ids, **kw):
            pass
        return time.perf_counter() - start

    generate(), stream()
    times = {"generate": [], "stream": []}
    for _ in range(args.repeats):
        times["generate"].append(generate())
        times["stream"].append(stream())
    for name, t in times.items():
        print(f"{name:9s} median {statistics.median(t) * 1000:7.0f} ms  "
              f"(each: {', '.join(f'{x * 1000:.0f}' for x in t)})")


if __name__ == "__main__":
    main()

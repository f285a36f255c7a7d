#!/usr/bin/env python3
"""Paired speed ratios between rows of one gengraph results file (gengraph run --output).

For each sweep point and each pair (ROW, OTHER), the ratio of tokens/s ROW over OTHER, repeat by
repeat (OTHER's total time in repeat i over ROW's in repeat i), and the median with the minimum and
maximum over the repeats. Only rows timed in the same interleaved repeats pair up: gengraph's own
rows, and peers run with `run.peer_order: interleaved` (their rows say "order": "interleaved").
A peer run after gengraph's rows is refused by name, since its repeat i did not run beside theirs.

  .venv/bin/python tools/paired_ratios.py results.json --rows eager,eager-int8 --over ct2,llama_cpp
"""
import argparse
import json
import statistics
import sys


def point_name(point):
    sweep = point.get("sweep_point") or point.get("point")
    if isinstance(sweep, list):
        return ", ".join(str(x) for x in sweep)
    return str(sweep) if sweep else "(the run)"


def totals(run):
    return [float(x) for x in run["timings"]["total_ms"]["values"]]


def paired(row, other):
    """OTHER's total time over ROW's, repeat by repeat, sorted."""
    a, b = totals(row), totals(other)
    if len(a) != len(b):
        raise SystemExit(f"paired_ratios: '{row['label']}' has {len(a)} repeats, '{other['label']}' {len(b)}")
    return sorted(y / x for x, y in zip(a, b) if x > 0)


def self_test():
    """The ratios of a made-up results document, and the refusal of a peer run after the rows."""
    def run(label, totals_ms, backend="eager", order=None):
        r = {"label": label, "backend": backend,
             "timings": {"total_ms": {"values": totals_ms}, "tokens_per_second": {"median": 1000.0 / totals_ms[0]}}}
        if order:
            r["order"] = order
        return r
    doc = {"points": [{"point": ["inputs.synthetic.batch_size=1"],
                       "runs": [run("a", [10.0, 20.0, 10.0]), run("p", [20.0, 20.0, 40.0], "peer:x", "interleaved"),
                                run("q", [1.0, 1.0, 1.0], "peer:y")]}]}
    assert paired(doc["points"][0]["runs"][0], doc["points"][0]["runs"][1]) == [1.0, 2.0, 4.0]
    import contextlib, io
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        report(doc, "doc", ["a"], ["p"])
    assert "paired median 2.00x [1.00-4.00]" in out.getvalue(), out.getvalue()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            report(doc, "doc", ["a"], ["q"])
    except SystemExit as e:
        assert "peer 'q' ran after gengraph's rows" in str(e), e
    else:
        raise AssertionError("a peer run after the rows was paired")
    print("paired_ratios: self-test passed")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="?")
    ap.add_argument("--rows", help="comma-separated labels of the rows to compare")
    ap.add_argument("--over", help="comma-separated labels of the rows they are compared with")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if not (a.results and a.rows and a.over):
        ap.error("a results file, --rows and --over")
    try:
        doc = json.load(open(a.results))
    except (OSError, ValueError) as e:
        raise SystemExit(f"paired_ratios: {a.results}: {e}")
    report(doc, a.results, a.rows.split(","), a.over.split(","))
    return 0


def report(doc, name, rows, over):
    points = doc.get("points") or [doc]
    for point in points:
        runs = {r.get("label"): r for r in point.get("runs", [])}
        print(f"== {point_name(point)}")
        for label in rows + over:
            r = runs.get(label)
            if r is None:
                raise SystemExit(f"paired_ratios: {name}: point {point_name(point)} has no row '{label}'")
            if str(r.get("backend", "")).startswith("peer:") and r.get("order") != "interleaved" and "error" not in r:
                raise SystemExit(f"paired_ratios: {name}: peer '{label}' ran after gengraph's rows "
                                 "(run.peer_order: after): its repeats do not pair with theirs")
        for label in rows:
            for other in over:
                r, o = runs[label], runs[other]
                if "error" in r or "error" in o:
                    print(f"  {label:16s} over {other:16s}: - (a failed row)")
                    continue
                ratios = paired(r, o)
                tps = lambda x: x["timings"]["tokens_per_second"]["median"]
                print(f"  {label:16s} over {other:16s}: paired median {statistics.median(ratios):.2f}x "
                      f"[{ratios[0]:.2f}-{ratios[-1]:.2f}]   tok/s medians {tps(r):.1f} / {tps(o):.1f}")


if __name__ == "__main__":
    sys.exit(main())

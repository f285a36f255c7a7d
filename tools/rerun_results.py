#!/usr/bin/env python3
"""Reruns committed results files with two gengraph binaries and compares what they generate.

For each results file (docs/results/NAME.json written by `gengraph run`), its own config text and
overrides are run again by both binaries, shortened (run.warmup=0, run.repeats=1, no peers, no
bandwidth, the first row as baseline), and every gengraph row's outputs (tokens and scores) are
compared between the two; the committed rows' tokens are compared with the second binary's.
Only speed is left out: a refactor that must not change what is generated is checked this way.

  tools/rerun_results.py BEFORE_GENGRAPH AFTER_GENGRAPH NAME...   (NAME: docs/results/NAME.json)

Prints one line per file; exits 1 when a run fails or any row differs.
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHORTEN = ["run.warmup=0", "run.repeats=1", "peers=[]", "run.bandwidth=false", "baseline=''"]


def rows(doc, gengraph_only=False):
    """{(point, label): outputs} of a results document (its sweep points, or itself)."""
    points = doc.get("points") or [doc]
    return {(i, run["label"]): run["outputs"] for i, p in enumerate(points)
            for run in p.get("runs", []) if "outputs" in run and
            not (gengraph_only and run.get("backend", "").startswith("peer:"))}


def tokens(table):
    return {k: [[s["tokens"] for s in o["sequences"]] for o in v] for k, v in table.items()}


def rerun(binary, name, config, work):
    path = os.path.join(work, name + ".yaml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(config["text"])
    out = os.path.join(work, "%s.%d.json" % (name, abs(hash(binary))))
    args = [binary, "run", path, "--output", out]
    for o in config.get("overrides", []) + SHORTEN:
        args += ["--set", o]
    r = subprocess.run(args, capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        raise RuntimeError("%s: %s failed: %s" % (name, binary, r.stderr[-400:]))
    with open(out, encoding="utf-8") as f:
        return rows(json.load(f))


def main(argv):
    if len(argv) < 4:
        print(__doc__)
        return 2
    before, after, names = argv[1], argv[2], argv[3:]
    ok = True
    with tempfile.TemporaryDirectory() as work:
        for name in names:
            with open(os.path.join(ROOT, "docs", "results", name + ".json"), encoding="utf-8") as f:
                doc = json.load(f)
            try:
                a = rerun(before, name, doc["config"], work)
                b = rerun(after, name, doc["config"], work)
            except RuntimeError as e:
                print(e)
                ok = False
                continue
            committed, now = tokens(rows(doc, gengraph_only=True)), tokens(b)
            same = sum(1 for k in committed if now.get(k) == committed[k])
            print("%s rows: %d before == after (tokens and scores): %s | committed rows with the "
                  "same tokens now: %d of %d" % (name, len(a), a == b, same, len(committed)))
            ok = ok and a == b and same == len(committed)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))

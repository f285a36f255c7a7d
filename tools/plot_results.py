#!/usr/bin/env python3
"""Draws a gengraph results file as a PNG: decode latency per token and tokens/s per row (backend
or peer), one group of bars per sweep point, with the min-max spread over repeats as error bars.

    .venv/bin/python tools/plot_results.py results/x.json results/x.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402


def points(doc):
    if "points" in doc:
        return [(", ".join(p["point"]), p) for p in doc["points"]]
    return [("", doc)]


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: plot_results.py RESULTS.json OUT.png")
    doc = json.load(open(sys.argv[1]))
    pts = points(doc)
    labels = []
    for _, p in pts:
        for r in p["runs"]:
            if r["label"] not in labels:
                labels.append(r["label"])
    fig, axes = plt.subplots(1, 2, figsize=(max(8, 2.2 * len(pts) * len(labels) / 2 + 4), 4.5))
    width = 0.8 / max(1, len(labels))
    # One colour per row in both panels (a beam-search peer has no per-token latency, so the
    # panels hold different rows), and one legend for all rows, a failed one named as such.
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colour = {label: palette[j % len(palette)] for j, label in enumerate(labels)}
    failed = {r["label"] for _, p in pts for r in p["runs"] if "error" in r}
    for ax, key, title in ((axes[0], "decode_ms_per_token", "decode latency (ms / token, lower is better)"),
                           (axes[1], "tokens_per_second", "throughput (tokens / s, higher is better)")):
        for j, label in enumerate(labels):
            xs, ys, lo, hi = [], [], [], []
            for i, (_, p) in enumerate(pts):
                run = next((r for r in p["runs"] if r["label"] == label), None)
                t = run.get("timings", {}).get(key) if run else None  # a failed peer has none
                if not t or "median" not in t:
                    if run is not None:  # say why the slot is empty (failed, or no per-token time)
                        ax.text(i + j * width, 0, " failed" if "error" in run else " n/a", rotation=90,
                                ha="center", va="bottom", fontsize=7, color="0.4")
                    continue
                xs.append(i + j * width)
                ys.append(t["median"])
                lo.append(t["median"] - t["min"])
                hi.append(t["max"] - t["median"])
            ax.bar(xs, ys, width, yerr=[lo, hi], capsize=3, color=colour[label])
        ax.set_xlim(-width / 2 - 0.1, len(pts) - 1 + (len(labels) - 0.5) * width + 0.1)  # every slot, empty ones too
        ax.set_xticks([i + width * (len(labels) - 1) / 2 for i in range(len(pts))])
        ax.set_xticklabels([name or doc.get("experiment", "") for name, _ in pts], rotation=20, ha="right", fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    handles = [Patch(color=colour[label], label=label + (" (failed)" if label in failed else "")) for label in labels]
    fig.legend(handles=handles, fontsize=8, loc="center right")
    first = pts[0][1]
    fig.suptitle(f"{doc.get('experiment', '')}: {first['model']['source']} on {first['environment']['device']}, "
                 f"{first['environment']['dtype']} (median, bars min-max)", fontsize=10)
    fig.tight_layout(rect=(0, 0, 0.86, 1))
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()

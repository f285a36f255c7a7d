#!/usr/bin/env python3
"""Draws the results of an experiment under load (kind: load) as a PNG: TTFT p99 and TPOT p50
against output tokens/s, one line per system through its arrival rates (each point labelled with
its rate), so that the system whose line stays low further right serves more at the same latency.

    .venv/bin/python tools/plot_load.py results/load.json results/load.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def rate_label(rate):
    return "all" if rate == "all_at_once" else f"{rate:g}/s"


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: plot_load.py RESULTS.json OUT.png")
    doc = json.load(open(sys.argv[1]))
    if doc.get("kind") != "load":
        sys.exit(f"plot_load.py: {sys.argv[1]} is not the results of an experiment under load (kind: load)")
    labels = []
    for r in doc["runs"]:
        if r["label"] not in labels:
            labels.append(r["label"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    panels = ((axes[0], ("ttft_ms", "p99"), "time to first token, p99 (ms)"),
              (axes[1], ("tpot_ms", "p50"), "time per output token, p50 (ms)"))
    for ax, (metric, q), title in panels:
        for label in labels:
            points = []
            for r in doc["runs"]:
                if r["label"] != label or "error" in r or not r.get(metric):
                    continue
                points.append((r["output_tokens_per_s"], r[metric][q], rate_label(r["rate"])))
            if not points:
                continue
            points.sort()
            line, = ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
            for x, y, text in points:
                ax.annotate(text, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7,
                            color=line.get_color())
        ax.set_xlabel("output tokens / s")
        ax.set_title(title + ", lower is better", fontsize=10)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=8)
    env = doc.get("environment", {})
    load = doc.get("load", {})
    fig.suptitle(f"{doc.get('experiment', '')}: {doc.get('model', {}).get('source', '')} on "
                 f"{env.get('device', '')}" + (f" (host {env['hostname']})" if env.get("hostname") else "") +
                 f", {env.get('threads', '?')} threads; "
                 f"{load.get('requests', '?')} requests, arrival {load.get('arrival', '?')}",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()

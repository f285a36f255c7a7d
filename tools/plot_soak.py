#!/usr/bin/env python3
"""The soak's resident memory over generations (CSV from gengraph_soak) as a PNG, and the verdict:
after the warm-up (every combination run at least once), memory must be flat. Flat here means the
least-squares slope over the rest of the run adds up to less than max(5 MB, 2% of the resident
set) across it. Exit 1 when it does not.

    tools/plot_soak.py soak.csv soak.png [--warmup GENERATIONS]
"""
import argparse
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("png")
    ap.add_argument("--warmup", type=int, default=1000)
    args = ap.parse_args()
    rows = list(csv.DictReader(open(args.csv)))
    if len(rows) < 3:
        sys.exit(f"plot_soak: {args.csv}: expected at least 3 samples, found {len(rows)}")
    g = [int(r["generation"]) for r in rows]
    mb = [int(r["rss_bytes"]) / 1e6 for r in rows]
    after = [(x, y) for x, y in zip(g, mb) if x >= args.warmup]
    if len(after) < 2:
        sys.exit(f"plot_soak: no samples after the warm-up of {args.warmup} generations")
    n = len(after)
    mx = sum(x for x, _ in after) / n
    my = sum(y for _, y in after) / n
    slope = sum((x - mx) * (y - my) for x, y in after) / sum((x - mx) ** 2 for x, _ in after)
    span = after[-1][0] - after[0][0]
    growth = slope * span
    limit = max(5.0, 0.02 * my)
    flat = abs(growth) < limit
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot(g, mb, lw=1.2)
    ax.axvline(args.warmup, color="grey", ls="--", lw=0.8)
    ax.text(args.warmup, min(mb), " warm-up ends", color="grey", va="bottom")
    ax.set_xlabel("generation")
    ax.set_ylabel("resident memory (MB)")
    ax.set_title(f"gengraph soak: {g[-1] + 1} generations; after warm-up {growth:+.2f} MB "
                 f"({'flat' if flat else 'GROWING'})")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.png, dpi=100)
    print(f"resident memory: {mb[0]:.1f} MB at start, {my:.1f} MB mean after warm-up, "
          f"{mb[-1]:.1f} MB at the end; slope after warm-up {slope * 1000:+.3f} MB per 1000 "
          f"generations = {growth:+.2f} MB over {span} generations (limit {limit:.1f} MB): "
          f"{'flat' if flat else 'GROWING'}")
    return 0 if flat else 1


if __name__ == "__main__":
    sys.exit(main())

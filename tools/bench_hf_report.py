"""The report of tools/bench_hf_processors.py: gengraph_bench's and transformers' timings of the
same processors and search steps, read from their JSON files and compared row by row (markdown).
"""

from __future__ import annotations

import json
import math
import re
import statistics

# Processors with no transformers class to compare with.
NO_HF_COUNTERPART = {"frequency_presence_penalty": "gengraph extension, no transformers class"}

_UNIT_US = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}


def load_gengraph(paths: list[str], time_key: str = "real_time") -> tuple[dict[str, dict], dict]:
    """Google Benchmark JSONs -> ({entry name: {"us": median of time_key, "changed": counter}},
    first context). Without repetitions, the median of the entries over all files. With manual time,
    real_time is the timed calls' clock; cpu_time is the process CPU time of the whole loop."""
    medians, runs, context = {}, {}, {}
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        context = context or doc.get("context", {})
        for b in doc["benchmarks"]:
            if b.get("error_occurred"):
                continue
            name = re.sub(r"/(manual_time|real_time)$", "", b.get("run_name", b["name"]))
            entry = {"us": b[time_key] * _UNIT_US[b.get("time_unit", "ns")]}
            entry.update({"changed": b["changed"]} if "changed" in b else {})
            if b.get("run_type") != "aggregate":
                runs.setdefault(name, []).append(entry)
            elif b.get("aggregate_name") == "median":
                medians[name] = entry
    for name, entries in runs.items():
        medians.setdefault(name, {**entries[-1], "us": statistics.median(e["us"] for e in entries)})
    return medians, context


def load_hf(paths: list[str]) -> tuple[dict[str, dict], dict]:
    """This script's JSONs -> ({name: result}, first header)."""
    results, header = {}, {}
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        header = header or {k: v for k, v in doc.items() if k != "results"}
        results.update({r["name"]: r for r in doc["results"]})
    return results, header


def split_name(name: str) -> tuple[str, int, int]:
    m = re.match(r"^(?:processor|strategy_step)/([^/]+)/vocab:(\d+)/rows:(\d+)$", name)
    return (m.group(1), int(m.group(2)), int(m.group(3))) if m else ("", 0, 0)


def names_of(kind: str, gg: dict[str, dict]) -> list[str]:
    return sorted((n for n in gg if n.startswith(kind + "/") and split_name(n)[0]), key=split_name)


def fmt(us: float | None) -> str:
    if us is None:
        return "—"
    return f"{us:,.0f}" if us >= 100 else f"{us:.1f}"


def ratio_table(kind: str, gg: dict[str, dict], hf: dict[str, dict]) -> list[str]:
    """One line per entry; for processors, the scores each changed (a check that both do the same)."""
    changed = kind == "processor"
    out = [
        f"| {kind} | vocab | rows | gengraph µs | transformers µs | gengraph / transformers"
        + (" | scores changed (gengraph / transformers)" if changed else "")
        + " | note |",
        "|---|---:|---:|---:|---:|---:|" + ("---:|" if changed else "") + "---|",
    ]
    for name in names_of(kind, gg):
        proc, vocab, rows = split_name(name)
        g, h = gg[name], hf.get(name, {})
        ratio = f"{g['us'] / h['us']:.2f}" if h else "—"
        note = h.get("note") or NO_HF_COUNTERPART.get(proc, "" if h else "no transformers run")
        cells = [proc, str(vocab), str(rows), fmt(g["us"]), fmt(h.get("us")), ratio]
        if changed:
            a, b = g.get("changed"), h.get("changed")
            cells.append(f"{a:.0f} / {b}" if a is not None and b is not None else "—")
            if a is not None and b is not None and int(a) != b:
                note = (note + "; " if note else "") + "**changed counts differ**"
        out.append("| " + " | ".join(cells + [note]) + " |")
    return out


def geomean(xs: list[float]) -> float:
    return math.exp(statistics.mean(math.log(x) for x in xs))


def summary(gg: dict[str, dict], hf: dict[str, dict]) -> list[str]:
    """Per processor / strategy: the geometric mean over rows of gengraph / transformers, per vocab,
    and the range; then all of them together, leaving out processors that were inactive (they time
    a check only)."""
    vocabs = sorted({split_name(n)[1] for n in gg if split_name(n)[0]})
    out = [
        "| entries | " + " | ".join(f"vocab {v}" for v in vocabs) + " | min | max |",
        "|---|" + "---:|" * (len(vocabs) + 2),
    ]

    def line(label: str, names: list[str]) -> str | None:
        ratios = {n: gg[n]["us"] / hf[n]["us"] for n in names if n in hf}
        if not ratios:
            return None
        cells = [label]
        for v in vocabs:
            rs = [r for n, r in ratios.items() if split_name(n)[1] == v]
            cells.append(f"{geomean(rs):.2f}" if rs else "—")
        cells += [f"{min(ratios.values()):.2f}", f"{max(ratios.values()):.2f}"]
        return "| " + " | ".join(cells) + " |"

    for kind in ("processor", "strategy_step"):
        names = names_of(kind, gg)
        for entry in dict.fromkeys(split_name(n)[0] for n in names):
            label = f"{kind}/{entry}"
            blank = "| " + " | ".join([label + " (no transformers counterpart)"] + ["—"] * (len(vocabs) + 2)) + " |"
            out.append(line(label, [n for n in names if split_name(n)[0] == entry]) or blank)
        active = [n for n in names if "inactive" not in hf.get(n, {}).get("note", "")]
        out.append(line(f"**all {kind} entries**" + (" (active)" if kind == "processor" else ""), active) or "")
    return [x for x in out if x]


def decode_fraction(gg: dict[str, dict], hf: dict[str, dict], decode: dict[str, dict], prefix: str) -> list[str]:
    """The sampling chain (and chain + sample step) as a fraction of one decode step, vocab 50257."""
    out = [
        "| rows | decode step µs | gengraph chain µs | chain / step | chain + sample step / step "
        "| transformers chain / step | transformers chain + sample step / step |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    chains = [n for n in names_of("processor", gg) if n.startswith("processor/chain_sampling_default/vocab:50257/")]
    for chain in chains:
        rows = split_name(chain)[2]
        sample = f"strategy_step/sample/vocab:50257/rows:{rows}"
        step = decode.get(f"{prefix}/rows:{rows}", {}).get("us")
        if step is None:
            out.append(f"| {rows} | no {prefix} entry at this rows | {fmt(gg[chain]['us'])} | — | — | — | — |")
            continue

        def frac(src: dict[str, dict], *names: str) -> str:
            vals = [src.get(n, {}).get("us") for n in names]
            return "—" if None in vals else f"{sum(vals) / step:.1%}"

        out.append(
            f"| {rows} | {fmt(step)} | {fmt(gg[chain]['us'])} | {frac(gg, chain)} | {frac(gg, chain, sample)} "
            f"| {frac(hf, chain)} | {frac(hf, chain, sample)} |"
        )
    return out


def compare(args) -> int:
    gg, context = load_gengraph(args.compare)
    hf, hf_doc = load_hf(args.hf)
    lines = []
    gg_threads, gg_clock = context.get("torch_num_threads"), context.get("decoding_clock", "wall")
    hf_clock = hf_doc.get("clock", "wall")
    if gg_threads is not None and str(gg_threads) != str(hf_doc["threads"]):
        lines.append(f"**Warning:** gengraph ran with {gg_threads} threads, transformers with {hf_doc['threads']}.\n")
    if gg_clock != hf_clock:
        lines.append(f"**Warning:** gengraph timed on the {gg_clock} clock, transformers on the {hf_clock} clock.\n")
    if "thread_cpu" in (gg_clock, hf_clock) and (str(gg_threads) != "1" or hf_doc["threads"] != 1):
        lines.append("**Warning:** the thread_cpu clock misses the work of other threads: use one thread.\n")
    # The decode step (bench_backends.cpp) is wall-timed; on the thread_cpu clock, compare with its
    # process CPU time instead (the same thing with one thread, less the time other processes took).
    decode_key = "cpu_time" if gg_clock == "thread_cpu" else "real_time"
    decode, _ = load_gengraph(args.compare, decode_key)
    lines.append(
        f"Threads: gengraph {gg_threads}, transformers {hf_doc['threads']} (torch {hf_doc['torch']}, "
        f"transformers {hf_doc['transformers']}). Clock: {gg_clock} (decode step: {decode_key}). "
        "Times are medians, in µs.\n"
    )
    lines += ["### Summary: geometric mean over rows of gengraph / transformers", ""] + summary(gg, hf) + [""]
    lines += [f"### Sampling chain against one decode step ({args.decode_entry}, vocab 50257)", ""]
    lines += decode_fraction(gg, hf, decode, args.decode_entry) + [""]
    lines += ["### Processors", ""] + ratio_table("processor", gg, hf) + [""]
    lines += ["### Strategy steps", ""] + ratio_table("strategy_step", gg, hf) + [""]
    text = "\n".join(lines)
    print(text)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text)
    return 0

"""Results documents as pandas data frames."""

_TIMINGS = ("time_to_first_token_ms", "decode_ms_per_token", "total_ms", "tokens_per_second")
COLUMNS = ("point", "label", "backend", "repeat", *_TIMINGS, "steps", "fused", "weights",
           "tokens_match_first_row", "peer", "error")


def _check(value, kinds, where, expected):
    if not isinstance(value, kinds):
        from ._check import ArgumentTypeError, describe
        raise ArgumentTypeError(f"to_frame: {where}: expected {expected} (a results document, "
                                f"docs/results-schema.md), found {describe(value)}")
    return value


def _points(doc):
    _check(doc, dict, "doc", "a dict")
    if "points" in doc:
        for i, p in enumerate(_check(doc["points"], list, "doc['points']", "a list")):
            _check(p, dict, f"doc['points'][{i}]", "a dict")
            names = _check(p.get("point", []), list, f"doc['points'][{i}]['point']", "a list")
            yield ", ".join(map(str, names)), p, f"doc['points'][{i}]"
    else:
        yield "", doc, "doc"


def rows(doc):
    """One dict per point x run (backend row or peer) x timed repeat, with COLUMNS as keys.

    A run that failed (a peer's error) gives one row with its error and no timings."""
    out = []
    for point, d, where in _points(doc):
        weights = _check(d.get("model") or {}, dict, f"{where}['model']", "a dict").get("weights")
        for r, run in enumerate(_check(d.get("runs", []), list, f"{where}['runs']", "a list")):
            at = f"{where}['runs'][{r}]"
            _check(run, dict, at, "a dict")
            timings = _check(run.get("timings") or {}, dict, f"{at}['timings']", "a dict")
            series = {}
            for k in _TIMINGS:
                t = _check(timings.get(k) or {}, dict, f"{at}['timings'][{k!r}]", "a dict")
                series[k] = _check(t.get("values") or [], list,
                                   f"{at}['timings'][{k!r}]['values']", "a list")
            repeats = max((len(v) for v in series.values()), default=0)
            backend = run.get("backend")
            base = {"point": point, "label": run.get("label"), "backend": backend,
                    "steps": run.get("steps"), "fused": run.get("fused"), "weights": weights,
                    "tokens_match_first_row": run.get("tokens_match_first_row"),
                    "peer": isinstance(backend, str) and backend.startswith("peer:"),
                    "error": run.get("error")}
            if repeats == 0:
                out.append({**base, "repeat": None, **{k: None for k in _TIMINGS}})
            for i in range(repeats):
                out.append({**base, "repeat": i,
                            **{k: (v[i] if i < len(v) else None) for k, v in series.items()}})
    return out


LOAD_COLUMNS = ("label", "system", "rate", "requests", "completed", "cancelled", "failed", "wall_s",
                "requests_per_s", "output_tokens_per_s", "ttft_ms_p50", "ttft_ms_p90", "ttft_ms_p99",
                "tpot_ms_p50", "tpot_ms_p90", "tpot_ms_p99", "queue_ms_p50", "queue_ms_p99",
                "kv_blocks_mean", "kv_blocks_peak", "prefix_hits", "reused_tokens", "preemptions")


def load_rows(doc):
    """One dict per system x rate of a load document (kind: load; docs/experiments.md, experiments
    under load), with LOAD_COLUMNS as keys; a metric the system has not (KV blocks of an Engine)
    is None."""
    out = []
    for r, run in enumerate(_check(doc.get("runs", []), list, "doc['runs']", "a list")):
        _check(run, dict, f"doc['runs'][{r}]", "a dict")
        row = {k: run.get(k) for k in LOAD_COLUMNS}
        for metric in ("ttft_ms", "tpot_ms", "queue_ms"):
            stats = run.get(metric) or {}
            for q in ("p50", "p90", "p99"):
                if f"{metric}_{q}" in row:
                    row[f"{metric}_{q}"] = stats.get(q)
        blocks = run.get("kv_blocks") or {}
        row["kv_blocks_mean"] = blocks.get("mean_in_use")
        row["kv_blocks_peak"] = blocks.get("peak_in_use")
        out.append(row)
    return out


def to_frame(doc):
    """A pandas DataFrame of a results document (gengraph.run's, or a results JSON loaded):
    one row per point x run x repeat, columns gengraph.frame.COLUMNS; for a load document one row
    per system x rate, columns gengraph.frame.LOAD_COLUMNS."""
    import pandas as pd

    _check(doc, dict, "doc", "a dict")
    if doc.get("kind") == "load":
        return pd.DataFrame(load_rows(doc), columns=list(LOAD_COLUMNS))
    return pd.DataFrame(rows(doc), columns=list(COLUMNS))

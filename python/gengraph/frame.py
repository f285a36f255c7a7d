"""Results documents as pandas data frames."""

_TIMINGS = ("time_to_first_token_ms", "decode_ms_per_token", "total_ms", "tokens_per_second")
COLUMNS = ("point", "label", "backend", "repeat", *_TIMINGS, "steps", "fused", "weights",
           "tokens_match_first_row", "peer", "error")


def _points(doc):
    if "points" in doc:
        for p in doc["points"]:
            yield ", ".join(p.get("point", [])), p
    else:
        yield "", doc


def rows(doc):
    """One dict per point x run (backend row or peer) x timed repeat, with COLUMNS as keys.

    A run that failed (a peer's error) gives one row with its error and no timings."""
    out = []
    for point, d in _points(doc):
        weights = d.get("model", {}).get("weights")
        for run in d.get("runs", []):
            timings = run.get("timings") or {}
            series = {k: (timings.get(k) or {}).get("values") or [] for k in _TIMINGS}
            repeats = max((len(v) for v in series.values()), default=0)
            base = {"point": point, "label": run.get("label"), "backend": run.get("backend"),
                    "steps": run.get("steps"), "fused": run.get("fused"), "weights": weights,
                    "tokens_match_first_row": run.get("tokens_match_first_row"),
                    "peer": run.get("backend", "").startswith("peer:"),
                    "error": run.get("error")}
            if repeats == 0:
                out.append({**base, "repeat": None, **{k: None for k in _TIMINGS}})
            for i in range(repeats):
                out.append({**base, "repeat": i,
                            **{k: (v[i] if i < len(v) else None) for k, v in series.items()}})
    return out


def to_frame(doc):
    """A pandas DataFrame of a results document (gengraph.run's, or a results JSON loaded):
    one row per point x run x repeat; columns gengraph.frame.COLUMNS."""
    import pandas as pd

    return pd.DataFrame(rows(doc), columns=list(COLUMNS))

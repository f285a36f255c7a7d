#!/usr/bin/env python3
"""A load generator for OpenAI-compatible HTTP servers (`gengraph serve`, llama.cpp's
llama-server): requests of random token ids sent to POST /v1/completions with stream: true,
arriving as a Poisson process at each rate (or all at once), each timed from its arrival to its
first streamed token (TTFT), per output token after that (TPOT) and to the stream's end. A row per
server and rate, in gengraph's load schema (docs/results-schema.md, "kind": "load"), so that
`gengraph show` and `gengraph compare` read it. tools/bench_server.py starts the servers and runs
this against each.

Why not guidellm (PyPI): guidellm 0.8.1 does run offline here (tried in a scratch environment
outside the clone, against llama-server in a network namespace with only loopback, with
HF_HUB_OFFLINE=1 and the model's local tokenizer), and it has Poisson profiles. But it brings its
own torch (2.15, beside the project's pinned 2.11), datasets and pyarrow: about 6 GB to pin and
cache; its prompts are synthetic text through a tokenizer, not token ids, and by default go
through the chat template (64 tokens asked, 94 prefilled by the server); the key that makes
gengraph generate an exact count carries each request's own length
("gengraph": {"min_new_tokens": N}), which its fixed extra body cannot; and its report would still
have to be translated into gengraph's rows. This file needs only httpx (in the project's
environment, as a dependency of huggingface_hub and openai).

Requests: from --seed, N prompts of random ids in [0, vocab) with lengths uniform in
--prompt-lengths and each with an output length uniform in --output-lengths, the same for every
rate and server. Arrivals: unit-rate exponential gaps from the seed, divided by the rate (so every
rate replays the same pattern, scaled). Each request's body is
  {"model", "prompt": [ids], "max_tokens": n, "stream": true,
   "stream_options": {"include_usage": true}} + --body (JSON, the server's own keys),
where any string "$max_tokens" in --body becomes n. The output token count is the stream's
usage.completion_tokens, else its chunks that carry text; a request that returned fewer tokens
than asked is counted in the row's "short_outputs".

    load_http.py --url http://127.0.0.1:8080 --label NAME [--rates 1,2,all_at_once]
                 [--requests 30] [--prompt-lengths 32:96] [--output-lengths 16:32]
                 [--vocab 49152] [--seed 0] [--body JSON] [--out ROWS.json]
"""
import argparse
import asyncio
import json
import random
import sys
import time

ALL_AT_ONCE = "all_at_once"


# --- the requests and their arrivals --------------------------------------------------------
def make_requests(seed, n, prompt_lengths, output_lengths, vocab):
    """n requests {"prompt": [ids], "max_tokens": k}, the same for a seed wherever they are made."""
    rng = random.Random(f"requests/{seed}")
    out = []
    for _ in range(n):
        length = rng.randint(*prompt_lengths)
        prompt = [rng.randrange(vocab) for _ in range(length)]
        out.append({"prompt": prompt, "max_tokens": rng.randint(*output_lengths)})
    return out


def arrival_offsets(seed, n, rate):
    """Seconds from the start at which each of n requests arrives: a Poisson process of `rate`
    requests per second (exponential gaps), or all at 0."""
    if rate == ALL_AT_ONCE:
        return [0.0] * n
    if not rate > 0:
        raise ValueError(f"rate {rate!r}: expected a number > 0 or '{ALL_AT_ONCE}'")
    rng = random.Random(f"arrivals/{seed}")
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(1.0) / rate
        out.append(t)
    return out


def parse_rates(text):
    rates = []
    for part in str(text).split(","):
        part = part.strip()
        rates.append(ALL_AT_ONCE if part in (ALL_AT_ONCE, "all") else float(part))
    return rates


def parse_range(text):
    lo, _, hi = str(text).partition(":")
    lo, hi = int(lo), int(hi or lo)
    if not 0 < lo <= hi:
        raise ValueError(f"length range '{text}': expected MIN:MAX with 0 < MIN <= MAX")
    return lo, hi


def body_for(request, model, extra):
    """The JSON body of one request: the common OpenAI keys and the server's own (extra), with
    "$max_tokens" replaced by the request's output length."""
    def fill(x):
        if isinstance(x, dict):
            return {k: fill(v) for k, v in x.items()}
        if isinstance(x, list):
            return [fill(v) for v in x]
        return request["max_tokens"] if x == "$max_tokens" else x
    body = {"model": model, "prompt": request["prompt"], "max_tokens": request["max_tokens"], "stream": True,
            "stream_options": {"include_usage": True}}
    body.update(fill(extra or {}))
    return body


# --- the summary, as gengraph's load rows -----------------------------------------------------
def quantile(values, q):
    """gengraph's quantile (experiments/experiment/load_runner.cpp): linear between the order
    statistics around q * (n - 1)."""
    if not values:
        return 0.0
    v = sorted(values)
    pos = q * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (pos - lo) * (v[hi] - v[lo])


def percentiles(ms, qs=(0.5, 0.9, 0.99)):
    if not ms:
        return None
    out = {f"p{int(round(q * 100))}": quantile(ms, q) for q in qs}
    out["mean"] = sum(ms) / len(ms)
    return out


def summarise(label, rate, outcomes, server=None):
    """One load row from the outcomes of a replay ({"state": done|failed|cancelled|not_arrived,
    "offset", "ttft_s", "total_s", "tokens", "asked", "late_s", "error"})."""
    done = [o for o in outcomes if o["state"] == "done"]
    failed = [o for o in outcomes if o["state"] == "failed"]
    not_arrived = sum(o["state"] == "not_arrived" for o in outcomes)
    cancelled = sum(o["state"] == "cancelled" for o in outcomes) + not_arrived
    wall = max((o["offset"] + o["total_s"] for o in done), default=0.0)
    tokens = sum(o["tokens"] for o in done)
    tpot = [(o["total_s"] - o["ttft_s"]) * 1e3 / (o["tokens"] - 1) for o in done if o["tokens"] > 1]
    row = {"label": label, "system": "http_server", "rate": rate, "requests": len(outcomes),
           "completed": len(done), "cancelled": cancelled, "not_arrived_by_time_limit": not_arrived,
           "failed": len(failed), "wall_s": wall, "requests_per_s": len(done) / wall if wall > 0 else 0.0,
           "output_tokens": tokens, "output_tokens_per_s": tokens / wall if wall > 0 else 0.0,
           "ttft_ms": percentiles([o["ttft_s"] * 1e3 for o in done]),
           "tpot_ms": percentiles(tpot),
           "queue_ms": None,  # not seen from outside the server
           "e2e_ms": percentiles([o["total_s"] * 1e3 for o in done]),
           "short_outputs": sum(o["tokens"] < o["asked"] for o in done),
           "client_late_ms": percentiles([o["late_s"] * 1e3 for o in outcomes if "late_s" in o], (0.5, 0.99))}
    if failed:
        row["first_request_error"] = failed[0]["error"]
    if server is not None:
        row["server"] = server
    return row


def summarise_rounds(label, rate, rounds, server=None):
    """One load row from several rounds of the same rate (each a list of outcomes, each round its
    own requests and arrivals): the latency percentiles over every round's requests together, the
    counts summed, and tokens/s and requests/s over the rounds' summed wall time (each round's
    wall as `summarise` takes it). With one round, `summarise`'s row."""
    if len(rounds) == 1:
        return summarise(label, rate, rounds[0], server)
    per = [summarise(label, rate, r) for r in rounds]
    row = summarise(label, rate, [o for r in rounds for o in r], server)
    wall = sum(p["wall_s"] for p in per)
    for key in ("requests", "completed", "cancelled", "not_arrived_by_time_limit", "failed",
                "output_tokens", "short_outputs"):
        row[key] = sum(p[key] for p in per)
    row["wall_s"] = wall
    row["requests_per_s"] = row["completed"] / wall if wall > 0 else 0.0
    row["output_tokens_per_s"] = row["output_tokens"] / wall if wall > 0 else 0.0
    row["rounds"] = [{"wall_s": p["wall_s"], "completed": p["completed"],
                      "output_tokens_per_s": p["output_tokens_per_s"],
                      "ttft_ms_p99": (p["ttft_ms"] or {}).get("p99")} for p in per]
    return row


def run_rate(base_url, requests, rate, seed, extra=None, model="model", time_limit_s=300.0):
    """The outcomes of one replay of `requests` at `rate` (arrivals from `seed`)."""
    url = base_url.rstrip("/") + "/v1/completions"
    offsets = arrival_offsets(seed, len(requests), rate)
    return asyncio.run(replay(url, model, requests, offsets, extra, time_limit_s))


# --- the replay -------------------------------------------------------------------------------
def chunk_text(chunk):
    """The text a streamed chunk carries: /v1/completions' choices[].text, or a chat delta's."""
    text = ""
    for c in chunk.get("choices") or []:
        text += c.get("text") or (c.get("delta") or {}).get("content") or ""
    return text


async def one_request(client, url, body, start, offset, timeout_s):
    """Sends one request at start + offset (perf_counter seconds) and reads its stream; times are
    from the scheduled arrival."""
    import httpx
    await asyncio.sleep(max(0.0, start + offset - time.perf_counter()))
    arrival = start + offset
    o = {"state": "failed", "offset": offset, "asked": body["max_tokens"], "late_s": time.perf_counter() - arrival,
         "tokens": 0, "ttft_s": 0.0, "total_s": 0.0}
    first, chunks, usage = None, 0, None
    try:
        async with client.stream("POST", url, json=body, timeout=httpx.Timeout(timeout_s, connect=30.0)) as r:
            if r.status_code != 200:
                o["error"] = f"HTTP {r.status_code}: {(await r.aread()).decode(errors='replace')[:300]}"
                return o
            async for line in r.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    o["error"] = f"error in the stream: {json.dumps(chunk['error'])[:300]}"
                    return o
                if chunk_text(chunk):
                    chunks += 1
                    if first is None:
                        first = time.perf_counter()
                if chunk.get("usage"):
                    usage = chunk["usage"]
        end = time.perf_counter()
    except (httpx.HTTPError, OSError, ValueError) as e:
        o["error"] = f"{type(e).__name__}: {e}"
        return o
    tokens = usage.get("completion_tokens", chunks) if usage else chunks
    if first is None:
        o["error"] = f"the stream ended without a token (usage: {json.dumps(usage)})"
        return o
    o.update(state="done", tokens=int(tokens), ttft_s=first - arrival, total_s=end - arrival)
    return o


async def replay(url, model, requests, offsets, extra, time_limit_s):
    """Every request at its offset; those not finished by the time limit are cancelled."""
    import httpx
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(limits=limits, trust_env=False) as client:
        start = time.perf_counter() + 0.05
        tasks = [asyncio.ensure_future(one_request(client, url, body_for(r, model, extra), start, off, time_limit_s))
                 for r, off in zip(requests, offsets)]
        _, pending = await asyncio.wait(tasks, timeout=time_limit_s + 0.05)
        for t in pending:
            t.cancel()
        outcomes = []
        for t, off, r in zip(tasks, offsets, requests):
            if t in pending:
                late = off > time_limit_s
                outcomes.append({"state": "not_arrived" if late else "cancelled", "offset": off,
                                 "asked": r["max_tokens"], "tokens": 0, "ttft_s": 0.0, "total_s": 0.0})
            else:
                outcomes.append(t.result())
        return outcomes


def sweep(base_url, label, requests, rates, seed, extra=None, model="model", time_limit_s=300.0,
          server=None, log=sys.stderr):
    """One row per rate for the server at base_url (http://host:port)."""
    rows = []
    for rate in rates:
        row = summarise(label, rate, run_rate(base_url, requests, rate, seed, extra, model, time_limit_s), server)
        rows.append(row)
        rate_text = "all at once" if rate == ALL_AT_ONCE else f"{rate:g}/s"
        p99 = (row["ttft_ms"] or {}).get("p99")
        print(f"load_http: {label} at {rate_text}: {row['completed']}/{len(requests)} completed in "
              f"{row['wall_s']:.2f} s, {row['output_tokens_per_s']:.1f} tok/s, TTFT p99 "
              f"{'-' if p99 is None else f'{p99:.0f} ms'}"
              + (f", {row['failed']} failed: {row.get('first_request_error')}" if row["failed"] else ""),
              file=log, flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True, help="the server, e.g. http://127.0.0.1:8080")
    ap.add_argument("--label", required=True)
    ap.add_argument("--model", default="model", help="the body's model name")
    ap.add_argument("--rates", default="1,all_at_once")
    ap.add_argument("--requests", type=int, default=30)
    ap.add_argument("--prompt-lengths", default="32:96")
    ap.add_argument("--output-lengths", default="16:32")
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-limit-s", type=float, default=300.0)
    ap.add_argument("--body", default="{}", help="JSON object merged into every request's body")
    ap.add_argument("--out", help="write the rows (a JSON array) here")
    a = ap.parse_args()
    requests = make_requests(a.seed, a.requests, parse_range(a.prompt_lengths), parse_range(a.output_lengths),
                             a.vocab)
    rows = sweep(a.url, a.label, requests, parse_rates(a.rates), a.seed, json.loads(a.body), a.model,
                 a.time_limit_s)
    text = json.dumps(rows, indent=1)
    if a.out:
        open(a.out, "w").write(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()

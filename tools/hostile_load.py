#!/usr/bin/env python3
"""Hostile load on `gengraph serve`: starts the server on 127.0.0.1 (a free port), then runs rounds
of, all at once:
  - well-formed requests (completions greedy and seeded with n=2, chat; whole and streamed), each
    answer checked against the one the idle server gave at the start (text, finish reason, usage),
    20% of the streamed ones closing their connection after the first event;
  - malformed ones (bad JSON, wrong types, unknown fields, another model, past the context, a body
    past max_body_bytes, a broken request line, a header past httplib's limit, an unknown path):
    each must be a 4xx with an OpenAI error object;
  - headers that arrive slowly: in pieces within the read timeout (answered as usual), and stalled
    half-way (closed, or a 4xx, within the read timeout and a margin);
  - a burst of 3 x max_queue requests past the queue limit: each answered, or 429 with Retry-After;
  - every --connections-every rounds, --connections connections opened at once (or
    --connect-at-once at a time), each sending a request: answered, or 503 past max_connections
    (429 past the queue).
Afterwards: the server has not crashed, KV blocks in use return to 0 (GET /metrics), /health answers
200, and SIGTERM stops it with exit status 0. The server's resident memory (VmRSS) is sampled all
along; with --output the run is written as JSON, and with --plot as a picture of memory over time.
Loopback only; every request and the whole run are bounded in count and time.

    hostile_load.py --model FOLDER|NAME [--duration S] [--rounds N] [--connections N]
                    [--output run.json] [--plot run.png]

Exit status 0 when every check held, 1 otherwise (the failures are listed)."""
import argparse
import asyncio
import json
import os
import pathlib
import platform
import random
import resource
import statistics
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import serve_process  # noqa: E402

MODEL_ID = "hostile"
PROMPTS = ["Hello world, this is", "The quick brown fox jumps", "Once upon a time"]


class Answer:
    def __init__(self, status=None, headers=None, body=b"", events=None, error=None, seconds=0.0):
        self.status, self.headers, self.body = status, headers or {}, body
        self.events, self.error, self.seconds = events, error, seconds

    def json(self):
        try:
            return json.loads(self.body)
        except ValueError:
            return None


async def exchange(port, pieces, timeout, gap=0.0, leave_after_first_event=False, opened=None):
    """Sends `pieces` on a new connection (or `opened`, a reader and writer) `gap` seconds apart and
    reads one answer: its status, headers and body (a chunked body de-chunked; server-sent events
    split into their data). With leave_after_first_event the connection is dropped once the first
    event arrives."""
    start = time.monotonic()
    writer = None
    try:
        reader, writer = opened or await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
        for i, piece in enumerate(pieces):
            if i and gap:
                await asyncio.sleep(gap)
            writer.write(piece)
            await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:] if x)}
        body, events = b"", None
        if headers.get("transfer-encoding") == "chunked":
            events = []
            while True:
                size = int((await asyncio.wait_for(reader.readline(), timeout)).strip() or b"0", 16)
                if size == 0:
                    break
                data = await asyncio.wait_for(reader.readexactly(size + 2), timeout)
                body += data[:-2]
                events += [x[6:] for x in data[:-2].decode().split("\n") if x.startswith("data: ")]
                if leave_after_first_event and events:
                    writer.transport.abort()
                    return Answer(status, headers, body, events, "left", time.monotonic() - start)
        elif "content-length" in headers:
            body = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), timeout)
        return Answer(status, headers, body, events, None, time.monotonic() - start)
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError, IndexError) as e:
        return Answer(error=f"{type(e).__name__}: {e}", seconds=time.monotonic() - start)
    finally:
        if writer is not None:
            writer.transport.abort()


def http_request(method, path, body=b"", extra=b""):
    head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n").encode()
    if method == "POST":
        head += b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
    return head + extra + b"\r\n" + body


def is_error_object(a):
    doc = a.json()
    return (isinstance(doc, dict) and isinstance(doc.get("error"), dict)
            and isinstance(doc["error"].get("message"), str) and isinstance(doc["error"].get("type"), str))


def well_formed(context, chat):
    """(name, path, body) of the well-formed requests whose answers are checked."""
    out = [("greedy", "/v1/completions", {"model": MODEL_ID, "prompt": PROMPTS[0], "max_tokens": 8,
                                          "temperature": 0}),
           ("seeded", "/v1/completions", {"model": MODEL_ID, "prompt": PROMPTS[1], "max_tokens": 8, "n": 2,
                                          "temperature": 0.8, "top_p": 0.9, "seed": 42}),
           ("ids", "/v1/completions", {"model": MODEL_ID, "prompt": [5, 6, 7, 8], "max_tokens": 6,
                                       "temperature": 0})]
    if chat:
        out.append(("chat", "/v1/chat/completions", {"model": MODEL_ID, "max_tokens": 8, "temperature": 0,
                                                     "messages": [{"role": "user", "content": PROMPTS[2]}]}))
    return out


def summary(a, chat):
    """What a whole answer says: per choice (text, finish reason), and the usage."""
    doc = a.json()
    key = (lambda c: c["message"]["content"]) if chat else (lambda c: c["text"])
    return [(key(c), c["finish_reason"]) for c in doc["choices"]], doc["usage"]


def stream_summary(a, chat):
    """The same from a stream: each choice's pieces joined, its last finish reason, the usage chunk."""
    if not a.events or a.events[-1] != "[DONE]":
        raise ValueError("the stream does not end with [DONE]")
    texts, reasons, usage = {}, {}, None
    for e in a.events[:-1]:
        doc = json.loads(e)
        if "error" in doc:
            raise ValueError(f"an error event: {e[:200]}")
        usage = doc.get("usage") or usage
        for c in doc["choices"]:
            piece = (c["delta"].get("content") or "") if chat else c["text"]
            texts[c["index"]] = texts.get(c["index"], "") + piece
            reasons[c["index"]] = c["finish_reason"] or reasons.get(c["index"])
    return [(texts[i], reasons[i]) for i in sorted(texts)], usage


def malformed(context, max_body):
    """(name, raw request, acceptable statuses): each must be answered so, with an error object."""
    def post(body, path="/v1/completions", extra=b""):
        return http_request("POST", path, body if isinstance(body, bytes) else json.dumps(body).encode(), extra)
    base = {"model": MODEL_ID, "prompt": "hi", "max_tokens": 2}
    cases = [("truncated_json", post(b'{"model": "hostile", "prompt": '), {400}),
             ("trailing_comma", post(b'{"model": "hostile", "prompt": "a",}'), {400}),
             ("binary_body", post(bytes(range(256))), {400}),
             ("empty_body", post(b""), {400}),
             ("array_body", post(b"[1, 2]"), {400}),
             ("null_body", post(b"null"), {400}),
             ("prompt_number", post(dict(base, prompt=123)), {400}),
             ("prompt_float_ids", post(dict(base, prompt=[1.5, 2])), {400}),
             ("prompt_id_out_of_vocab", post(dict(base, prompt=[10 ** 9])), {400}),
             ("prompt_empty", post(dict(base, prompt=[])), {400}),
             ("max_tokens_string", post(dict(base, max_tokens="8")), {400}),
             ("max_tokens_negative", post(dict(base, max_tokens=-1)), {400}),
             ("max_tokens_past_context", post(dict(base, max_tokens=context)), {400}),
             ("prompt_past_context", post(dict(base, prompt=[5] * context)), {400}),
             ("temperature_string", post(dict(base, temperature="hot")), {400}),
             ("temperature_nan", post(b'{"model": "hostile", "prompt": "a", "temperature": NaN}'), {400}),
             ("n_zero", post(dict(base, n=0)), {400}),
             ("stream_string", post(dict(base, stream="yes")), {400}),
             ("stop_number", post(dict(base, stop=5)), {400}),
             ("logprobs_too_many", post(dict(base, logprobs=1000)), {400}),
             ("seed_float", post(dict(base, seed=1.5)), {400}),
             ("unknown_field", post(dict(base, frobnicate=True)), {400}),
             ("unknown_gengraph_key", post(dict(base, gengraph={"no_such_setting": 1})), {400}),
             ("another_model", post(dict(base, model="gpt-4o")), {404}),
             ("model_missing", post({"prompt": "hi"}), {400}),
             ("messages_string", post({"model": MODEL_ID, "messages": "hi"}, "/v1/chat/completions"), {400}),
             ("messages_bad_role", post({"model": MODEL_ID, "messages": [{"role": "wizard", "content": "x"}]},
                                        "/v1/chat/completions"), {400}),
             ("body_past_limit", post(b'{"model": "hostile", "prompt": "' + b"a" * max_body + b'"}'), {413}),
             ("get_completions", http_request("GET", "/v1/completions"), {404, 405}),
             ("unknown_path", http_request("GET", "/v2/nothing"), {404}),
             ("bad_request_line", b"HELLO\r\n\r\n", {400}),
             ("header_past_limit", http_request("GET", "/health", extra=b"X-Big: " + b"a" * 20000 + b"\r\n"),
              {400, 413, 431})]
    return cases


class Run:
    def __init__(self, args):
        self.args, self.failures, self.counts = args, [], {}
        self.samples, self.started = [], time.monotonic()

    def count(self, case, outcome):
        c = self.counts.setdefault(case, {})
        c[outcome] = c.get(outcome, 0) + 1

    def fail(self, case, why):
        self.count(case, "failed")
        if len(self.failures) < 200:
            self.failures.append({"case": case, "t_s": round(time.monotonic() - self.started, 1), "why": why[:500]})

    def check_refusal(self, case, a, statuses):
        """A 4xx/5xx answer must be one of `statuses` with an error object."""
        if a.status not in statuses:
            self.fail(case, f"expected HTTP {sorted(statuses)}, found {a.status} ({a.error}) {a.body[:200]!r}")
        elif not is_error_object(a):
            self.fail(case, f"HTTP {a.status} without an OpenAI error object: {a.body[:200]!r}")
        else:
            self.count(case, str(a.status))
            if a.status == 429 and a.headers.get("retry-after") is None:
                self.fail(case, "429 without Retry-After")

    def check_answer(self, case, a, expected, chat, busy_ok):
        """A well-formed request: 200 equal to the reference; 429/503 with an error object where
        the server may be full (busy_ok)."""
        if a.status == 200:
            try:
                got = stream_summary(a, chat) if a.events is not None else summary(a, chat)
            except (ValueError, KeyError, TypeError) as e:
                return self.fail(case, f"unreadable answer: {e}: {a.body[:300]!r}")
            if got != expected:
                return self.fail(case, f"expected {expected}, found {got}")
            return self.count(case, "200")
        if busy_ok and a.status in (429, 503):
            return self.check_refusal(case, a, {429, 503})
        self.fail(case, f"expected 200, found {a.status} ({a.error}) {a.body[:300]!r}")


async def sample(run, server, every):
    while True:
        rss = server.rss_bytes()
        m = await exchange(server.port, [http_request("GET", "/metrics")], 10)
        values = {}
        for line in m.body.decode(errors="replace").splitlines():
            if line.startswith(("gengraph_kv_blocks_in_use ", "gengraph_connections_open ")):
                name, _, value = line.partition(" ")
                values[name] = float(value)
        run.samples.append({"t_s": round(time.monotonic() - run.started, 2), "rss_mb": rss and rss / 2 ** 20,
                            "kv_blocks_in_use": values.get("gengraph_kv_blocks_in_use"),
                            "connections_open": values.get("gengraph_connections_open")})
        await asyncio.sleep(every)


async def one_round(run, server, refs, bad, index, rng):
    """Phase 1, at most max_connections / 2 connections at a time: well-formed requests (20% of the
    clients leaving mid-stream), malformed ones, slow headers. Phase 2: the burst past the queue.
    Phase 3 (every --connections-every rounds): the connections at once."""
    a = run.args
    port, timeout = server.port, a.request_timeout
    tasks = []
    limit = asyncio.Semaphore(max(1, a.max_connections // 2))

    async def limited(*args, **kwargs):
        async with limit:
            return await exchange(*args, **kwargs)

    async def well(name, path, body, stream, leave):
        chat, expected = refs[name]
        b = dict(body, stream=True, stream_options={"include_usage": True}) if stream else body
        ans = await limited(port, [http_request("POST", path, json.dumps(b).encode())], timeout,
                             leave_after_first_event=leave)
        case = f"{name}{'_stream' if stream else ''}"
        if leave:
            if ans.error == "left" or (ans.status in (429, 503) and is_error_object(ans)):
                return run.count("disconnect_mid_stream", "left" if ans.error == "left" else str(ans.status))
            if ans.status == 200 and ans.events:  # finished before the first read: fine too
                return run.count("disconnect_mid_stream", "finished")
            return run.fail("disconnect_mid_stream", f"{ans.status} {ans.error} {ans.body[:200]!r}")
        run.check_answer(case, ans, expected, chat, busy_ok=True)

    for _ in range(a.well_formed):
        name, path, body = rng.choice(refs["_requests"])
        stream = rng.random() < 0.5
        tasks.append(well(name, path, body, stream, stream and rng.random() < 0.4))  # 20% of all clients

    async def refused(name, raw, statuses):
        run.check_refusal(name, await limited(port, [raw], timeout), statuses)
    tasks += [refused(*c) for c in bad]

    async def slow_complete():
        raw = http_request("GET", "/v1/models")
        pieces = [raw[i:i + 8] for i in range(0, len(raw), 8)]
        ans = await limited(port, pieces, timeout, gap=min(0.3, a.read_timeout / 4))
        ok = ans.status == 200 and (ans.json() or {}).get("data", [{}])[0].get("id") == MODEL_ID
        run.count("slow_headers_complete", "200") if ok else run.fail(
            "slow_headers_complete", f"{ans.status} {ans.error} {ans.body[:200]!r}")

    async def slow_stalled():
        raw = b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le"
        ans = await limited(port, [raw[:20], raw[20:]], a.read_timeout + 10, gap=0.2)
        if ans.status is None and ans.seconds <= a.read_timeout + 9:
            return run.count("slow_headers_stalled", "closed")
        if ans.status is not None and 400 <= ans.status < 500 and is_error_object(ans):
            return run.count("slow_headers_stalled", str(ans.status))
        run.fail("slow_headers_stalled", f"{ans.status} after {ans.seconds:.1f}s ({ans.error}) {ans.body[:200]!r}")
    tasks += [slow_complete(), slow_stalled()]

    await asyncio.gather(*tasks)
    # One client more leaves mid-stream once the others are answered: on a loaded machine each of
    # the round's leaving clients could meet a full queue (429), and no client would have left a
    # stream at all (a clean clone's suite on 2026-12-07: 8 of 8 answered 429). Bounded: 20 tries.
    for _ in range(20):
        left = run.counts.get("disconnect_mid_stream", {}).get("left", 0)
        await well(*refs["_requests"][0], True, True)
        if run.counts.get("disconnect_mid_stream", {}).get("left", 0) > left:
            break
        await asyncio.sleep(0.5)
    name, path, body = refs["_requests"][0]
    burst_body = json.dumps(dict(body, max_tokens=a.burst_tokens)).encode()

    async def burst():
        ans = await exchange(port, [http_request("POST", path, burst_body)], timeout)
        if ans.status == 200:
            doc = ans.json() or {}
            good = doc.get("usage", {}).get("completion_tokens", 0) >= 1 and doc["choices"][0]["text"].startswith(
                refs[name][1][0][0][0])
            return run.count("burst", "200") if good else run.fail("burst", f"wrong answer {ans.body[:300]!r}")
        run.check_refusal("burst", ans, {429, 503})
    await asyncio.gather(*[burst() for _ in range(3 * a.max_queue)])
    if a.connections and index % a.connections_every == 0:
        await many_connections(run, port, a.connections, a.connect_at_once, timeout)


async def many_connections(run, port, n, at_once, timeout):
    """n connections, each sending a request as soon as it is open (GET /v1/models or a 64-token
    completion), at most `at_once` of them connecting at a time (0: all at once). Each is
    answered, or refused with 503 (connections) or 429 (queue)."""
    body = json.dumps({"model": MODEL_ID, "prompt": [5, 6], "max_tokens": 64, "temperature": 0}).encode()
    connecting = asyncio.Semaphore(at_once or n)

    async def use(k):
        raw = http_request("GET", "/v1/models") if k % 2 else http_request("POST", "/v1/completions", body)
        async with connecting:
            try:
                reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), timeout)
            except (OSError, asyncio.TimeoutError) as e:
                return run.fail("connections", f"connect: {type(e).__name__}: {e}")
        # The head's last line half a second late: each connection is held a while, so that they
        # pile up past max_connections however fast the server answers.
        ans = await exchange(port, [raw[:-2], raw[-2:]] if k % 2 else [raw], timeout, gap=0.5,
                             opened=(reader, writer))
        if ans.status == 200 and (ans.json() or {}).get("object") in ("list", "text_completion"):
            return run.count("connections", "200")
        run.check_refusal("connections", ans, {503, 429})
    await asyncio.gather(*[use(k) for k in range(n)])


async def references(run, server, chat):
    """Each well-formed request's answer from the idle server (checked to be 200)."""
    refs = {"_requests": well_formed(server_context(server), chat)}
    for name, path, body in refs["_requests"]:
        a = await exchange(server.port, [http_request("POST", path, json.dumps(body).encode())], 120)
        if a.status != 200:
            raise SystemExit(f"hostile_load: the reference {name} request failed: {a.status} {a.body[:300]!r}")
        refs[name] = (path.endswith("chat/completions"), summary(a, path.endswith("chat/completions")))
    return refs


def server_context(server):
    status, _, body = serve_process.http("GET", server.base + "/v1/models")
    return json.loads(body)["data"][0]["max_model_len"]


async def drive(run, server, chat):
    a = run.args
    refs = await references(run, server, chat)
    bad = malformed(server_context(server), a.max_body_bytes)
    sampler = asyncio.create_task(sample(run, server, a.sample_every))
    rng = random.Random(a.seed)
    index = 0
    deadline = run.started + a.duration
    while index < a.rounds and time.monotonic() < deadline:
        await one_round(run, server, refs, bad, index, rng)
        index += 1
        if not server.alive():
            run.fail("server", f"the server exited with status {server.proc.returncode} in round {index}")
            break
    sampler.cancel()
    return index


def memory_growth(samples, duration):
    """Median RSS of the last fifth of the run minus that of the fifth after the first tenth (the
    warm-up), in MB; None for runs too short to say."""
    rss = [(s["t_s"], s["rss_mb"]) for s in samples if s["rss_mb"]]
    if duration < 120 or len(rss) < 20:
        return None
    end = rss[-1][0]
    early = [m for t, m in rss if 0.1 * end <= t < 0.3 * end]
    late = [m for t, m in rss if t >= 0.8 * end]
    return round(statistics.median(late) - statistics.median(early), 1)


def plot(doc, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    s = [x for x in doc["samples"] if x["rss_mb"]]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True, height_ratios=[2, 1])
    top.plot([x["t_s"] for x in s], [x["rss_mb"] for x in s], color="tab:blue")
    top.set_ylabel("server RSS (MiB)")
    top.set_ylim(0, max(x["rss_mb"] for x in s) * 1.15)
    top.set_title(f"gengraph serve under hostile load: {doc['rounds']} rounds in {doc['duration_s']:.0f} s, "
                  f"{sum(sum(v.values()) for v in doc['counts'].values())} requests\n"
                  f"{doc['host']}; memory growth {doc['memory_growth_mb']} MiB; failures {len(doc['failures'])}",
                  fontsize=9)
    bottom.plot([x["t_s"] for x in s], [x["kv_blocks_in_use"] for x in s], label="KV blocks in use")
    bottom.plot([x["t_s"] for x in s], [x["connections_open"] for x in s], label="connections open")
    bottom.set_xlabel("seconds")
    bottom.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def host():
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    return f"{os.cpu_count()}-core {cpu}, {platform.system()} {platform.release()}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True,
                    help="a model folder with a tokenizer, a known model's name, or 'test' (the tests' model, "
                         "made in a temporary folder by tools/serve_process.py)")
    ap.add_argument("--gengraph", default=str(serve_process.ROOT / "build" / "gengraph"))
    ap.add_argument("--duration", type=float, default=60, help="seconds of rounds at most")
    ap.add_argument("--rounds", type=int, default=1000000, help="rounds at most")
    ap.add_argument("--well-formed", type=int, default=20, help="well-formed requests a round")
    ap.add_argument("--connections", type=int, default=1000, help="connections opened at once (0: none)")
    ap.add_argument("--connections-every", type=int, default=5, help="in every Nth round")
    ap.add_argument("--connect-at-once", type=int, default=0,
                    help="connections connecting at a time in that test (0: all at once)")
    ap.add_argument("--max-connections", type=int, default=64, help="the server's serve.max_connections")
    ap.add_argument("--max-queue", type=int, default=4, help="the server's --max-queue")
    ap.add_argument("--max-running", type=int, default=4, help="the server's serving.max_running")
    ap.add_argument("--max-body-bytes", type=int, default=65536)
    ap.add_argument("--read-timeout", type=float, default=2.0, help="the server's serve.read_timeout_s")
    ap.add_argument("--burst-tokens", type=int, default=256, help="max_tokens of the burst's requests")
    ap.add_argument("--request-timeout", type=float, default=120, help="seconds any one request may take")
    ap.add_argument("--sample-every", type=float, default=2.0)
    ap.add_argument("--max-growth-mb", type=float, default=64, help="memory growth allowed (runs of 120 s+)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--log", default=None, help="the server's log file (default beside --output, or none)")
    ap.add_argument("--output")
    ap.add_argument("--plot")
    args = ap.parse_args(argv)
    if args.model == "test":
        args.model = str(serve_process.make_model_folder(pathlib.Path(tempfile.mkdtemp(prefix="hostile-")) / "model"))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4 * args.connections + 1024)), hard))

    server_args = ["--model", args.model, "--model-id", MODEL_ID, "--max-queue", args.max_queue,
                   "--set", f"serving.max_running={args.max_running}",
                   "--set", f"serve.max_connections={args.max_connections}",
                   "--set", f"serve.max_body_bytes={args.max_body_bytes}",
                   "--set", f"serve.read_timeout_s={args.read_timeout}"]
    log = args.log or (str(pathlib.Path(args.output).with_suffix(".server.log")) if args.output else os.devnull)
    server = serve_process.ServeProcess(args.gengraph, server_args, log)
    run = Run(args)
    server.start()
    chat = serve_process.http("POST", server.base + "/v1/chat/completions",
                              {"model": MODEL_ID, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})[0] == 200
    try:
        rounds = asyncio.run(drive(run, server, chat))
        alive = server.alive()
        if alive:
            idle = serve_process.wait_for_idle(server.base, timeout=60)
            if idle.get("gengraph_kv_blocks_in_use") != 0:
                run.fail("kv_blocks", f"{idle.get('gengraph_kv_blocks_in_use')} KV blocks still in use")
            if serve_process.http("GET", server.base + "/health")[0] != 200:
                run.fail("health", "/health does not answer 200 after the load")
            run.samples.append({"t_s": round(time.monotonic() - run.started, 2), "rss_mb": server.rss_bytes() / 2 ** 20,
                                "kv_blocks_in_use": idle.get("gengraph_kv_blocks_in_use"),
                                "connections_open": idle.get("gengraph_connections_open")})
        else:
            idle = {}
    finally:
        status = server.stop(timeout=90)
    if status != 0:
        run.fail("exit", f"gengraph serve exited with status {status} on SIGTERM (None: killed)")
    duration = time.monotonic() - run.started
    growth = memory_growth(run.samples, duration)
    if rounds and "429" not in run.counts.get("burst", {}):
        run.fail("burst", f"no burst went past the queue limit (no 429): {run.counts.get('burst')}")
    if growth is not None and growth > args.max_growth_mb:
        run.fail("memory", f"resident memory grew {growth} MiB (allowed {args.max_growth_mb})")
    doc = {"command": " ".join(["tools/hostile_load.py", *(argv or sys.argv[1:])]),
           "host": host(), "server_args": list(map(str, server_args)), "duration_s": round(duration, 1),
           "rounds": rounds, "counts": run.counts, "failures": run.failures, "memory_growth_mb": growth,
           "cancelled_total": idle.get("gengraph_cancelled_total"), "kv_blocks_in_use_after": idle.get(
               "gengraph_kv_blocks_in_use"), "exit_status": status, "passed": not run.failures,
           "samples": run.samples}
    if args.output:
        pathlib.Path(args.output).write_text(json.dumps(doc, indent=1) + "\n")
    if args.plot:
        plot(doc, args.plot)
    total = sum(sum(v.values()) for v in run.counts.values())
    print(f"hostile_load: {rounds} rounds, {total} requests in {duration:.0f} s; "
          f"{len(run.failures)} failure(s); memory growth {growth} MiB; server exit {status}")
    for f in run.failures[:20]:
        print(f"  {f['case']} at {f['t_s']} s: {f['why']}")
    return doc


if __name__ == "__main__":
    sys.exit(0 if main()["passed"] else 1)

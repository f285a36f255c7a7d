#!/usr/bin/env python3
"""The server benchmark (docs/server-benchmark.md): `gengraph serve` and llama.cpp's
`llama-server` (tools/llama_server.py) started one at a time on the same model and threads, each
driven by the same load (tools/load_http.py: the same requests, Poisson arrivals at each rate,
then all at once), and every server this started stopped again on every path out (an error,
Ctrl-C, SIGTERM). The rows go into one results document in gengraph's load schema, with its table
(`gengraph show`) and a chart of p99 time to first token against output tokens/s
(tools/plot_load.py).

    .venv/bin/python tools/bench_server.py configs/server_bench/smollm2_cpu.yaml
        [--only LABEL]... [--rates 1,all_at_once] [--requests N] [--rounds N] [--output FILE.json]

The configuration (YAML): name, model (a `gengraph models` name or a model folder), threads,
load (rates, requests, prompt_lengths, output_lengths, seed, time_limit_s, warmup_requests, rounds),
body (keys every request carries, e.g. temperature), output, plot, and servers, each with a label
and either
  kind: llama_server   format (f32, q8_0, ...), slots, ctx_per_slot, args (more flags), or
  kind: command        command: the argv, where {port}, {model}, {threads} and {gguf} are filled,
and body (the server's own keys for an exact output length; "$max_tokens" becomes the request's
length), env (more environment variables), health_timeout_s.
"""
import argparse
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import engine_peer  # noqa: E402  (its Refused: llama-server not built, a model not convertible)
import load_http  # noqa: E402


class Stop(Exception):
    """SIGTERM or SIGHUP: unwinds like Ctrl-C, through the finally that stops the servers."""


def on_signal(signum, frame):
    raise Stop(f"signal {signum}")


def die_with_parent():
    """In the child before exec: SIGTERM when this tool dies, however it dies (Linux's
    PR_SET_PDEATHSIG), so that not even a SIGKILL of the tool leaves a server behind."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def model_folder(model):
    """A model folder, or the folder of a `gengraph models` name in gengraph's cache."""
    if os.path.isdir(model):
        return os.path.abspath(model)
    import real_model_cache as rmc
    from fetch_real_model import cache_dir
    state, folder, fault = rmc.check(os.path.join(cache_dir(), "models"))
    if model != rmc.NAME or state != "ok":
        sys.exit(f"bench_server: model '{model}' is neither a folder nor a set-up `gengraph models` name "
                 f"({fault or 'gengraph models fetch ' + model + ' sets it up'})")
    return folder


def vocab_size(folder):
    return int(json.load(open(os.path.join(folder, "config.json")))["vocab_size"])


class Server:
    """One server: started (a fresh process on a free port per rate, with its output in a log
    file), waited for until /health says 200, stopped (SIGTERM to its process group, then
    SIGKILL)."""

    def __init__(self, spec, cfg, folder, workdir):
        self.spec, self.label, self.workdir = spec, spec["label"], workdir
        threads = int(cfg.get("threads", 2))
        kind = spec.get("kind", "command")
        self.about = {"kind": kind}
        if kind == "llama_server":
            import llama_server
            fmt = spec.get("format", "f32")
            gguf = llama_server.gguf(folder, fmt, threads)
            self.argv_for = lambda port: llama_server.command(
                gguf, port, threads, int(spec.get("slots", 4)), int(spec.get("ctx_per_slot", 512)),
                alias=str(cfg["model"]), extra=spec.get("args", []))
            self.about.update(weights=fmt, gguf=gguf, version=self.version(self.argv_for(0)[0]))
        elif kind == "command":
            self.argv_for = lambda port: [str(x).format(port=port, model=cfg["model"], threads=threads, gguf="")
                                          for x in spec["command"]]
            self.about.update(weights=spec.get("weights", "?"))
        else:
            raise SystemExit(f"bench_server: server '{self.label}': kind '{kind}' is not llama_server or command")
        self.about["command"] = " ".join(self.argv_for("PORT"))
        self.env = dict(os.environ, **{k: str(v) for k, v in (spec.get("env") or {}).items()})
        self.proc, self.url, self.log_path, self.starts = None, None, None, 0

    @staticmethod
    def version(program):
        r = subprocess.run([program, "--version"], capture_output=True, text=True, timeout=60)
        return " ".join((r.stdout + r.stderr).split())[:200]

    def start(self, timeout_s):
        import httpx
        port = free_port()
        argv, self.url = self.argv_for(port), f"http://127.0.0.1:{port}"
        self.starts += 1
        name = self.label.replace(" ", "_").replace("/", "_")
        self.log_path = os.path.join(self.workdir, f"{name}-{self.starts}.log")
        print(f"bench_server: starting {self.label}: {' '.join(argv)} (log {self.log_path})", file=sys.stderr,
              flush=True)
        self.proc = subprocess.Popen(argv, stdout=open(self.log_path, "w"), stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=self.env, cwd=ROOT, start_new_session=True,
                                     preexec_fn=die_with_parent)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.label} exited with status {self.proc.returncode} before it was ready; "
                                   f"its log {self.log_path} ends:\n  " + tail(self.log_path))
            try:
                if httpx.get(self.url + "/health", timeout=2.0, trust_env=False).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        raise RuntimeError(f"{self.label} did not answer /health with 200 within {timeout_s:g} s (log {self.log_path})")

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        except ProcessLookupError:
            pass


def tail(path, lines=6):
    try:
        return "\n  ".join(open(path, errors="replace").read().splitlines()[-lines:])
    except OSError:
        return "(no log)"


def environment(threads):
    cpu = "?"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return {"gengraph_commit": commit + ("+dirty" if dirty else ""), "device": f"cpu ({cpu})",
            "dtype": "per server", "threads": threads, "hostname": platform.node(),
            "cpu": cpu}


def document(cfg, cfg_path, cfg_text, overrides, folder, load, runs, threads):
    return {"schema_version": 1, "kind": "load", "experiment": cfg["name"],
            "command": " ".join(["tools/bench_server.py"] + sys.argv[1:]), "config_file": cfg_path,
            "config": {"text": cfg_text, "overrides": overrides},
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "environment": environment(threads),
            "model": {"source": folder, "name": str(cfg["model"]), "vocab_size": vocab_size(folder)},
            "generation": cfg.get("body") or {}, "load": load, "runs": runs}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config")
    ap.add_argument("--only", action="append", default=[], help="run only the server with this label (repeatable)")
    ap.add_argument("--rates", help="override load.rates, e.g. 1,all_at_once")
    ap.add_argument("--requests", type=int, help="override load.requests")
    ap.add_argument("--rounds", type=int, help="override load.rounds: replays of every rate, each with requests "
                                                 "and arrivals of its own seed, pooled into one row")
    ap.add_argument("--output", help="override output (the results JSON); the table goes beside it (.txt)")
    ap.add_argument("--plot", help="override plot (PNG); 'none' draws none")
    a = ap.parse_args()
    cfg_text = open(a.config).read()
    cfg = yaml.safe_load(cfg_text)
    overrides = [f"{k}={v}" for k, v in (("rates", a.rates), ("requests", a.requests), ("rounds", a.rounds))
                 if v is not None]
    overrides += [f"only={x}" for x in a.only]
    L = cfg["load"]
    rates = load_http.parse_rates(a.rates) if a.rates else [load_http.ALL_AT_ONCE if r in ("all", load_http.ALL_AT_ONCE)
                                                           else float(r) for r in L["rates"]]
    n = a.requests or int(L["requests"])
    rounds = a.rounds if a.rounds is not None else L.get("rounds", 1)
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        sys.exit(f"bench_server: {a.config}: load.rounds (or --rounds): expected an integer >= 1, found {rounds!r}")
    threads = int(cfg.get("threads", 2))
    folder = model_folder(str(cfg["model"]))
    plen = (int(L["prompt_lengths"]["min"]), int(L["prompt_lengths"]["max"]))
    olen = (int(L["output_lengths"]["min"]), int(L["output_lengths"]["max"]))
    seed, limit = int(L.get("seed", 0)), float(L.get("time_limit_s", 300))
    requests = load_http.make_requests(seed, n, plen, olen, vocab_size(folder))
    # The warm-up's prompts come from a seed of their own: with seed + 1 (as before the rounds) the
    # first request of round 1 began with a warm-up prompt's 32 ids, and a server's prefix cache
    # would have served them.
    warm = load_http.make_requests(f"warmup/{seed}", int(L.get("warmup_requests", 2)), (plen[0], plen[0]),
                                   (4, 4), vocab_size(folder))
    servers = [s for s in cfg["servers"] if not a.only or s["label"] in a.only]
    if not servers:
        sys.exit(f"bench_server: no server is labelled {' or '.join(a.only)}")
    load = {"arrival": "poisson", "rates": rates, "requests": n,
            "prompt_lengths": {"min": plen[0], "max": plen[1]}, "output_lengths": {"min": olen[0], "max": olen[1]},
            "seed": seed, "rounds": rounds,
            "order": "rate by rate, every server in turn (the first rotating), a fresh server for each",
            "time_limit_s": limit, "prompt_tokens": sum(len(r["prompt"]) for r in requests),
            "output_tokens_asked": sum(r["max_tokens"] for r in requests), "client": "tools/load_http.py",
            "systems": [{"label": s["label"], "system": "http_server"} for s in servers]}
    output = a.output or cfg.get("output") or f"results/{cfg['name']}.json"
    plot = a.plot or cfg.get("plot")
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    workdir = tempfile.mkdtemp(prefix=f"bench_server-{cfg['name']}-")
    made = {}  # label -> Server
    outcomes = {}  # (label, rate index) -> one list of outcomes a round
    errors = {}  # (label, rate index) -> why the server failed there
    # Rate by rate, every server in turn (the first one rotating with the rate and the round), so
    # that a host whose speed drifts moves all of them alike; a fresh server for every rate and
    # round, as gengraph's load runner makes a fresh scheduler: no prompt cache or slot state
    # carried from one replay's requests to the next. Round k replays requests and arrivals of
    # seed + k, and a row's latencies are over every round's requests together.
    for k in range(rounds):
        round_requests = requests if k == 0 else load_http.make_requests(seed + k, n, plen, olen,
                                                                         vocab_size(folder))
        for ri, rate in enumerate(rates):
            turn = (ri + k) % len(servers)
            for spec in servers[turn:] + servers[:turn]:
                key = (spec["label"], ri)
                if key in errors:
                    continue
                server = made.get(spec["label"])
                try:
                    server = server or Server(spec, cfg, folder, workdir)
                    made[spec["label"]] = server
                    for attempt in (1, 2):  # once more when a start fails (its log says why)
                        try:
                            server.start(float(spec.get("health_timeout_s", 300)))
                            break
                        except RuntimeError as e:
                            server.stop()
                            if attempt == 2:
                                raise
                            print(f"bench_server: {e}\nbench_server: starting it once more", file=sys.stderr)
                    body = dict(cfg.get("body") or {}, **(spec.get("body") or {}))
                    load_http.sweep(server.url, server.label + " (warm-up)", warm, [load_http.ALL_AT_ONCE],
                                    0, body, str(cfg["model"]), limit, log=open(os.devnull, "w"))
                    got = load_http.run_rate(server.url, round_requests, rate, seed + k, body, str(cfg["model"]),
                                             limit)
                    outcomes.setdefault(key, []).append(got)
                    row = load_http.summarise(spec["label"], rate, got)
                    p99 = (row["ttft_ms"] or {}).get("p99")
                    print(f"bench_server: round {k + 1}/{rounds}, {spec['label']} at {rate}: {row['completed']}/{n} "
                          f"completed, {row['output_tokens_per_s']:.1f} tok/s, TTFT p99 "
                          f"{'-' if p99 is None else f'{p99:.0f} ms'}", file=sys.stderr, flush=True)
                except (RuntimeError, OSError, subprocess.SubprocessError, engine_peer.Refused) as e:
                    print(f"bench_server: {spec['label']} FAILED: {e}", file=sys.stderr, flush=True)
                    errors[key] = str(e)
                finally:
                    if server is not None:
                        server.stop()
    runs = []
    for spec in servers:
        for ri, rate in enumerate(rates):
            key = (spec["label"], ri)
            if key in errors:
                runs.append({"label": spec["label"], "system": "http_server", "rate": rate, "error": errors[key]})
            elif key in outcomes:
                runs.append(load_http.summarise_rounds(spec["label"], rate, outcomes[key],
                                                       made[spec["label"]].about))
    doc = document(cfg, a.config, cfg_text, overrides, folder, load, runs, threads)
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    tmp = output + ".tmp"
    json.dump(doc, open(tmp, "w"), indent=1)
    os.replace(tmp, output)
    print(f"bench_server: wrote {output} (server logs in {workdir})", file=sys.stderr)
    gengraph = os.path.join(ROOT, "build", "gengraph")
    if os.path.exists(gengraph):
        table = subprocess.run([gengraph, "show", output], capture_output=True, text=True)
        print(table.stdout + table.stderr)
        if table.returncode == 0:
            open(os.path.splitext(output)[0] + ".txt", "w").write(table.stdout)
    if plot and plot != "none":
        subprocess.run([sys.executable, os.path.join(HERE, "plot_load.py"), output, plot], check=True)
        print(f"bench_server: drew {plot}", file=sys.stderr)
    sys.exit(0 if all("error" not in r and r["failed"] == 0 for r in runs) else 3)


if __name__ == "__main__":
    main()

"""tools/load_http.py, the server benchmark's load generator: its requests and Poisson arrivals
reproducible by seed, gengraph's quantiles, its rows in gengraph's load schema (read by
`gengraph show`), and one replay against a stand-in server in this process that streams
server-sent events as an OpenAI-compatible server does."""
import http.server
import json
import math
import sys
import threading

import pytest

from conftest import BUILD, ROOT, cli

sys.path.insert(0, str(ROOT / "tools"))
import load_http  # noqa: E402


def test_requests_and_arrivals_are_the_seeds():
    a = load_http.make_requests(3, 20, (4, 9), (2, 5), 100)
    assert a == load_http.make_requests(3, 20, (4, 9), (2, 5), 100)
    assert a != load_http.make_requests(4, 20, (4, 9), (2, 5), 100)
    assert all(4 <= len(r["prompt"]) <= 9 and 2 <= r["max_tokens"] <= 5 for r in a)
    assert all(0 <= t < 100 for r in a for t in r["prompt"])
    # Every rate replays one pattern of gaps, scaled by 1 / rate; all at once is all at 0.
    one, four = load_http.arrival_offsets(7, 500, 1.0), load_http.arrival_offsets(7, 500, 4.0)
    assert one == load_http.arrival_offsets(7, 500, 1.0)
    assert four == pytest.approx([t / 4 for t in one])
    assert all(b > a for a, b in zip(one, one[1:]))
    assert one[-1] / 500 == pytest.approx(1.0, rel=0.15)  # mean gap 1 / rate
    assert load_http.arrival_offsets(7, 3, "all_at_once") == [0.0, 0.0, 0.0]
    with pytest.raises(ValueError):
        load_http.arrival_offsets(7, 3, 0.0)
    assert load_http.parse_rates("0.5, 2,all") == [0.5, 2.0, "all_at_once"]
    assert load_http.parse_range("32:96") == (32, 96) and load_http.parse_range("8") == (8, 8)


def test_quantiles_are_gengraphs():
    v = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert load_http.quantile(v, 0.5) == 3.0
    assert load_http.quantile(v, 0.9) == pytest.approx(4.6)  # 4 + 0.6 * (5 - 4)
    assert load_http.quantile(v, 0.99) == pytest.approx(4.96)
    assert load_http.quantile([], 0.5) == 0.0
    p = load_http.percentiles(v)
    assert set(p) == {"p50", "p90", "p99", "mean"} and p["mean"] == 3.0
    assert load_http.percentiles([]) is None


def test_body_fills_the_output_length_into_the_servers_keys():
    r = {"prompt": [1, 2], "max_tokens": 7}
    b = load_http.body_for(r, "m", {"gengraph": {"min_new_tokens": "$max_tokens"}, "temperature": 0})
    assert b["gengraph"] == {"min_new_tokens": 7} and b["max_tokens"] == 7 and b["prompt"] == [1, 2]
    assert b["stream"] is True and b["stream_options"] == {"include_usage": True} and b["temperature"] == 0


def outcome(offset, ttft, total, tokens, asked=None):
    return {"state": "done", "offset": offset, "ttft_s": ttft, "total_s": total, "tokens": tokens,
            "asked": asked or tokens, "late_s": 0.001}


def test_a_row_has_the_load_schemas_keys():
    outs = [outcome(0.0, 0.1, 1.1, 11), outcome(0.5, 0.2, 2.2, 21, asked=30),
            {"state": "failed", "offset": 1.0, "asked": 5, "tokens": 0, "ttft_s": 0, "total_s": 0, "late_s": 0,
             "error": "HTTP 503: busy"},
            {"state": "not_arrived", "offset": 9.0, "asked": 5, "tokens": 0, "ttft_s": 0, "total_s": 0}]
    row = load_http.summarise("s", 2.0, outs, server={"kind": "command"})
    assert row["wall_s"] == pytest.approx(2.7)  # the last end: 0.5 + 2.2
    assert (row["completed"], row["failed"], row["cancelled"], row["not_arrived_by_time_limit"]) == (2, 1, 1, 1)
    assert row["output_tokens"] == 32 and row["output_tokens_per_s"] == pytest.approx(32 / 2.7)
    assert row["requests_per_s"] == pytest.approx(2 / 2.7)
    assert row["ttft_ms"]["p50"] == pytest.approx(150.0)
    assert row["tpot_ms"]["p50"] == pytest.approx((100.0 + 100.0) / 2)  # 1000 ms / 10, 2000 ms / 20
    assert row["queue_ms"] is None and row["short_outputs"] == 1
    assert row["first_request_error"] == "HTTP 503: busy" and row["server"] == {"kind": "command"}


def test_rounds_pool_their_latencies_and_sum_their_walls():
    a = [outcome(0.0, 0.1, 1.0, 10), outcome(1.0, 0.3, 1.0, 10)]  # wall 2.0
    b = [outcome(0.0, 0.2, 2.0, 20), outcome(0.5, 0.9, 1.5, 4, asked=8)]  # wall 2.0
    row = load_http.summarise_rounds("s", 1.0, [a, b], server={"kind": "command"})
    assert row["wall_s"] == pytest.approx(4.0) and row["completed"] == 4 and row["requests"] == 4
    assert row["output_tokens"] == 44 and row["output_tokens_per_s"] == pytest.approx(11.0)
    assert row["requests_per_s"] == pytest.approx(1.0) and row["short_outputs"] == 1
    # The percentiles are over the four requests together: 100, 200, 300, 900 ms.
    assert row["ttft_ms"]["p50"] == pytest.approx(250.0)
    assert row["ttft_ms"]["p99"] == pytest.approx(300.0 + 0.97 * 600.0)
    assert [r["completed"] for r in row["rounds"]] == [2, 2] and row["server"] == {"kind": "command"}
    assert row["rounds"][1]["ttft_ms_p99"] == pytest.approx(200.0 + 0.99 * 700.0)
    # One round is summarise's row, with no per-round list.
    assert load_http.summarise_rounds("s", 1.0, [a]) == load_http.summarise("s", 1.0, a)


def load_document():
    rows = [load_http.summarise("llama-server f32", rate, [outcome(0.0, 0.05, 0.5, 9), outcome(0.2, 0.07, 0.6, 9)])
            for rate in (1.0, "all_at_once")]
    return {"schema_version": 1, "kind": "load", "experiment": "t", "created": "2026-01-01T00:00:00Z",
            "environment": {"device": "cpu (x)", "dtype": "float32", "threads": 2, "hostname": "h"},
            "model": {"source": "m"}, "load": {"arrival": "poisson", "requests": 2}, "runs": rows}


def test_gengraph_to_frame_reads_the_rows():
    gengraph = pytest.importorskip("gengraph")
    df = gengraph.to_frame(load_document())
    assert list(df["rate"]) == [1.0, "all_at_once"] and list(df["completed"]) == [2, 2]
    assert df["ttft_ms_p50"][0] == pytest.approx(60.0) and df["queue_ms_p50"].isna().all()


def test_gengraph_show_reads_the_rows(tmp_path):
    if not (BUILD / "gengraph").exists():
        pytest.skip("build/gengraph is not built")
    doc = load_document()
    f = tmp_path / "t.json"
    f.write_text(json.dumps(doc))
    shown = cli("show", f).stdout
    assert "llama-server f32" in shown and "1/s" in shown and "all" in shown
    compared = cli("compare", f, f).stdout
    assert "1.00x" in compared


class StandIn(http.server.BaseHTTPRequestHandler):
    """Streams max_tokens chunks of text, then the usage and [DONE]; HTTP 400 for a prompt of []."""
    protocol_version = "HTTP/1.1"
    bodies = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        StandIn.bodies.append(body)
        if not body["prompt"]:
            msg = b'{"error": "empty prompt"}'
            self.send_response(400)
            self.send_header("Content-Length", str(len(msg)))
            self.end_headers()
            self.wfile.write(msg)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for i in range(body["max_tokens"]):
            self.wfile.write(f'data: {{"choices": [{{"index": 0, "text": "t{i}"}}]}}\n\n'.encode())
        usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": body["max_tokens"]}
        self.wfile.write(f'data: {{"choices": [], "usage": {json.dumps(usage)}}}\n\ndata: [DONE]\n\n'.encode())
        self.wfile.flush()
        self.close_connection = True

    def log_message(self, *args):
        pass


def test_a_replay_against_a_stand_in_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        requests = load_http.make_requests(0, 4, (3, 5), (2, 6), 50) + [{"prompt": [], "max_tokens": 3}]
        rows = load_http.sweep(url, "stand-in", requests, [50.0, "all_at_once"], 0, {"ignore_eos": True},
                               time_limit_s=30)
    finally:
        server.shutdown()
    assert [r["rate"] for r in rows] == [50.0, "all_at_once"]
    for row in rows:
        assert row["completed"] == 4 and row["failed"] == 1 and row["short_outputs"] == 0
        assert row["first_request_error"].startswith("HTTP 400")
        assert row["output_tokens"] == sum(r["max_tokens"] for r in requests[:4])
        assert 0 < row["ttft_ms"]["p50"] <= row["e2e_ms"]["p50"] and math.isfinite(row["tpot_ms"]["p99"])
    assert all(b["ignore_eos"] is True and b["stream"] is True for b in StandIn.bodies)


def test_the_server_bench_refuses_bad_rounds_by_name(tmp_path):
    """load.rounds and --rounds: an integer >= 1, refused by name before any server starts."""
    import subprocess
    tool = ROOT / "tools" / "bench_server.py"
    cfg = tmp_path / "b.yaml"
    for rounds, flag in (('"two"', []), ("0", []), ("true", []), ("1", ["--rounds", "0"])):
        cfg.write_text("name: b\nmodel: m\nload: {rates: [1], requests: 2, rounds: " + rounds + "}\nservers: []\n")
        r = subprocess.run([sys.executable, str(tool), str(cfg)] + flag, capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and "load.rounds (or --rounds): expected an integer >= 1" in r.stderr, r.stderr


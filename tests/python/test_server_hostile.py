"""`gengraph serve` under hostile load (tools/hostile_load.py, short: two rounds on a model made
here): clients leaving mid-stream, malformed and oversized requests, slow headers, a burst past the
queue and more connections than max_connections; every answer checked, the server alive after,
KV blocks back to 0, exit 0 on SIGTERM. Then hostile bodies one by one: JSON nested past the
parser's bound, a chunked body, a compressed one (tools/hostile_load.py's 10-minute run and its
plot are under docs/results/). Loopback only; bounded in count and time."""
import json
import socket
import subprocess
import sys
import time
import zlib

import pytest

from conftest import BUILD, ROOT

sys.path.insert(0, str(ROOT / "tools"))
import hostile_load  # noqa: E402
import serve_process  # noqa: E402

GENGRAPH = BUILD / "gengraph"
MAX_BODY = 65536


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return serve_process.make_model_folder(tmp_path_factory.mktemp("hostile") / "model")


def test_the_server_survives_hostile_load(folder, tmp_path):
    out = tmp_path / "run.json"
    doc = hostile_load.main(["--model", str(folder), "--gengraph", str(GENGRAPH), "--rounds", "2", "--duration", "50",
                             "--connections", "150", "--connections-every", "1",
                             "--max-connections", "32", "--max-body-bytes", str(MAX_BODY),
                             "--request-timeout", "30", "--output", str(out)])
    assert doc["failures"] == [] and doc["passed"], json.dumps(doc["failures"][:10], indent=1)
    counts = doc["counts"]
    assert doc["exit_status"] == 0 and doc["kv_blocks_in_use_after"] == 0
    assert counts["disconnect_mid_stream"].get("left", 0) > 0
    assert counts["burst"].get("429", 0) > 0 and counts["burst"].get("200", 0) > 0
    assert counts["connections"].get("503", 0) > 0 and counts["connections"].get("200", 0) > 0
    assert counts["body_past_limit"] == {"413": 2} and counts["another_model"] == {"404": 2}
    for name, _, statuses in hostile_load.malformed(1024, MAX_BODY):
        assert set(counts[name]) <= {str(s) for s in statuses}, (name, counts[name])
    answered = sum(counts.get(name, {}).get("200", 0) for name in ("greedy", "seeded", "ids", "chat"))
    assert answered + sum(counts.get(f"{n}_stream", {}).get("200", 0) for n in ("greedy", "seeded", "ids", "chat")) > 0


@pytest.fixture
def server(folder, tmp_path):
    s = serve_process.ServeProcess(GENGRAPH, ["--model", folder, "--model-id", "m", "--set",
                                              f"serve.max_body_bytes={MAX_BODY}"], tmp_path / "serve.log").start()
    yield s
    s.kill()


def post_raw(port, head, body, timeout=60):
    """One POST with the given head lines and body bytes; (status or None, body)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + head + b"\r\n" + body)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    except OSError:
        pass
    finally:
        sock.close()
    status_line, _, rest = data.partition(b"\r\n")
    return (int(status_line.split()[1]) if status_line.startswith(b"HTTP/1.1") else None), rest


@pytest.mark.parametrize("where", ["model", "gengraph"])
def test_deeply_nested_json_is_a_400(folder, tmp_path, where):
    server = serve_process.ServeProcess(GENGRAPH, ["--model", folder, "--model-id", "m"], tmp_path / "serve.log")
    server.start()  # max_body_bytes at its default, 1 MiB: room for the nesting
    d = 300000
    nest = b"[" * d + b"]" * d
    body = (b'{"model":' + nest + b"}") if where == "model" else (
        b'{"model":"m","prompt":"a","gengraph":{"x":' + nest + b"}}")
    status, _ = post_raw(server.port, b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body), body)
    time.sleep(0.3)
    alive = server.alive()
    server.kill()
    assert alive, f"the server died: exit {server.proc.poll()}"
    assert status == 400


def test_a_chunked_body_past_max_body_bytes_is_refused(server):
    data = b'{"model": "m", "prompt": "' + b"a" * (4 * MAX_BODY) + b'"}'
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(data[i:i + 8192]), data[i:i + 8192]) for i in range(0, len(data), 8192))
    status, _ = post_raw(server.port, b"Transfer-Encoding: chunked\r\n", chunks + b"0\r\n\r\n")
    assert status in (411, 413)


def test_a_compressed_body_does_not_inflate_past_max_body_bytes(server):
    inflated = b'{"model": "m", "prompt": "' + b"a" * (200 * MAX_BODY) + b'"}'
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    body = c.compress(inflated) + c.flush()
    assert len(body) < MAX_BODY
    status, answer = post_raw(server.port, b"Content-Encoding: gzip\r\nContent-Length: %d\r\n" % len(body), body)
    assert status in (413, 415), answer[-300:]


def test_the_listen_backlog_holds_max_connections(server):
    """httplib's own backlog (5 in Debian's build) dropped connections arriving at once."""
    listing = subprocess.run(["ss", "-ltnH", f"sport = :{server.port}"], capture_output=True, text=True).stdout
    backlog = int(listing.split()[2])
    assert backlog >= 512  # serve.max_connections' default

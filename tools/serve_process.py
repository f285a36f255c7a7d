"""What the server's tests and tools/hostile_load.py share: a model folder made here (a small
trained byte-level BPE tokenizer of SmolLM2's structure, a random GPT-2 of its vocabulary, a chat
template), a `gengraph serve` process on 127.0.0.1 with a free port (started, waited for, stopped
with SIGTERM), its /metrics read, and the official openai client from the set-up's own folder
(scripts/setup.sh installs it beside the venv)."""
import hashlib
import json
import os
import pathlib
import re
import select
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[1]
PYTHON = sys.executable
# SmolLM2's chat template, shortened: the same tokens around each message.
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                 "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
CONTEXT = 1024  # the test model's context (n_positions): room for long, slow requests


def make_model_folder(folder, context=CONTEXT):
    """Writes a model folder with a tokenizer gengraph reads natively and a chat template: the
    smollm2 family tokenizer of tools/make_family_tokenizers.py (trained here, about 3,000 tokens)
    and a GPT-2 of that vocabulary with random weights (seed 0). Nothing is downloaded."""
    folder = pathlib.Path(folder)
    scratch = folder.parent / (folder.name + ".tok")
    subprocess.run([PYTHON, str(ROOT / "tools" / "make_family_tokenizers.py"), str(scratch), "--only", "smollm2"],
                   check=True, capture_output=True)
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(scratch / "smollm2" / "tokenizer.json", folder / "tokenizer.json")
    shutil.rmtree(scratch)
    code = f"""
import os, sys, torch
os.environ["TRANSFORMERS_VERBOSITY"] = "error"
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast
folder = sys.argv[1]
tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(folder, "tokenizer.json"),
                              bos_token="<|im_start|>", eos_token="<|im_end|>")
torch.manual_seed(0)
config = GPT2Config(vocab_size=len(tok), n_positions={int(context)}, n_embd=64, n_layer=2, n_head=4,
                    bos_token_id=1, eos_token_id=2, initializer_range=0.2)
GPT2LMHeadModel(config).save_pretrained(folder)
tok.save_pretrained(folder)
"""
    subprocess.run([PYTHON, "-c", code, str(folder)], check=True, capture_output=True)
    (folder / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    return folder


def openai_client_folder():
    """The folder scripts/setup.sh installs the openai client into (tools/requirements-openai.txt,
    --no-deps --target), by the hash of its requirements as setup.sh names it."""
    req = ROOT / "tools" / "requirements-openai.txt"
    digest = hashlib.sha256(req.read_bytes()).hexdigest()[:12]
    cache = pathlib.Path(os.environ.get("GENGRAPH_CACHE", pathlib.Path.home() / ".cache" / "gengraph"))
    for candidate in (cache / f"openai-{digest}", ROOT / ".openai-client"):
        if (candidate / ".complete").exists() and (candidate / "openai").is_dir():
            return candidate
    return None


def import_openai():
    """The openai module, its folder appended to sys.path (after the venv's site-packages, so its
    few packages never shadow the venv's). Raises ImportError naming scripts/setup.sh without it."""
    folder = openai_client_folder()
    if folder is None:
        raise ImportError("the openai client is not installed: scripts/setup.sh installs it "
                          "(tools/requirements-openai.txt)")
    if str(folder) not in sys.path:
        sys.path.append(str(folder))
    import openai
    return openai


def http(method, url, body=None, headers=None, timeout=30):
    """One HTTP request with urllib: (status, headers, body bytes); no exception for 4xx/5xx."""
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None and "Content-Type" not in (headers or {}):
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def metrics(base):
    """/metrics as {name or name{labels}: value}."""
    status, _, body = http("GET", base + "/metrics")
    assert status == 200, body
    out = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def wait_for_idle(base, timeout=30):
    """Waits until no KV block is held and nothing runs or waits; returns the last metrics."""
    deadline = time.monotonic() + timeout
    while True:
        m = metrics(base)
        idle = (m.get("gengraph_kv_blocks_in_use") == 0 and m.get("gengraph_requests_running") == 0
                and m.get("gengraph_requests_waiting") == 0)
        if idle or time.monotonic() > deadline:
            return m
        time.sleep(0.1)


class ServeProcess:
    """`gengraph serve ARGS --port 0` on 127.0.0.1: start() waits for the "listening on" line and
    /health; stop() sends SIGTERM and returns the exit status (the process is killed if it has not
    exited within `timeout`). The server's stderr goes to `log` (a file, so no pipe fills)."""

    def __init__(self, gengraph, args, log, env=None):
        self.gengraph, self.args, self.log_path, self.env = str(gengraph), list(map(str, args)), log, env
        self.proc, self.port = None, None

    @property
    def base(self):
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout=120):
        self.log = open(self.log_path, "ab")
        env = dict(os.environ, **(self.env or {}))
        self.proc = subprocess.Popen([self.gengraph, "serve", *self.args, "--host", "127.0.0.1", "--port", "0"],
                                     stdout=subprocess.PIPE, stderr=self.log, env=env)
        deadline = time.monotonic() + timeout
        line = b""  # the server prints it once bound (read without blocking past the deadline)
        while not line.endswith(b"\n") and time.monotonic() < deadline:
            if select.select([self.proc.stdout], [], [], 0.5)[0]:
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    break
                line += chunk
        line = line.decode(errors="replace")
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if not m:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"gengraph serve did not start (exit {self.proc.returncode}): {line!r}; "
                               f"its log: {pathlib.Path(self.log_path).read_text()[-2000:]}")
        self.port = int(m.group(1))
        while time.monotonic() < deadline:
            try:
                if http("GET", self.base + "/health", timeout=5)[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        self.kill()
        raise RuntimeError("gengraph serve: /health did not answer 200 in time")

    def log_tail(self, chars=2000):
        """The end of the server's log (stderr)."""
        self.log.flush()
        return pathlib.Path(self.log_path).read_text(errors="replace")[-chars:]

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)

    def stop(self, timeout=60):
        """SIGTERM, then the exit status (None: it had to be killed)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            rc = None
        self.log.close()
        return rc

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def rss_bytes(self):
        """The server's resident memory (VmRSS), or None once it has exited."""
        try:
            for line in pathlib.Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None

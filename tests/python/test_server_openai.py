"""`gengraph serve` through the official openai client (tools/requirements-openai.txt, installed by
scripts/setup.sh beside the venv): completions and chat, whole and streamed, log-probs, stop
strings and n equal to what `gengraph generate` gives for the same settings (greedy, and seeded
sampling: choice i samples with seed + i, as generate with run.seed = seed + i on eager's paged
cache), and the errors the client raises on (400 naming the field or the numbers, 404, 401, 413,
429 with Retry-After). Also: a client gone mid-stream cancels its request and its KV blocks come
back; SIGTERM lets a stream in flight finish, answers new requests 503 and exits 0.

The model is made here (tools/serve_process.py: a trained byte-level BPE tokenizer, a random GPT-2,
a chat template); the real smollm2-135m is served too where it is set up. Servers bind 127.0.0.1
on a free port, and every test's requests are bounded in count and time."""
import json
import re
import signal
import socket
import sys
import threading
import time

import pytest

from conftest import BUILD, ROOT, cli

sys.path.insert(0, str(ROOT / "tools"))
import serve_process  # noqa: E402

GENGRAPH = BUILD / "gengraph"
MODEL_ID = "tiny-gpt2"
PAGED = "backend={name: eager, options: {cache: paged}}"  # the scheduler's solo reference
PROMPTS = ["Hello world, this is", "The quick brown fox jumps"]


@pytest.fixture(scope="module")
def openai():
    try:
        return serve_process.import_openai()
    except ImportError as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return serve_process.make_model_folder(tmp_path_factory.mktemp("serve") / "model")


def start_server(tmp_path_factory, folder, *args, env=None):
    log = tmp_path_factory.mktemp("log") / "serve.log"
    return serve_process.ServeProcess(GENGRAPH, ["--model", folder, "--model-id", MODEL_ID, *args], log,
                                      env=env).start()


@pytest.fixture(scope="module")
def server(tmp_path_factory, folder):
    s = start_server(tmp_path_factory, folder, "--set", "serve.max_body_bytes=65536")
    yield s
    rc = s.stop()
    assert rc == 0, f"gengraph serve: exit {rc} on SIGTERM; its log ends: {s.log_tail()}"


@pytest.fixture(scope="module")
def client(openai, server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def generate(folder, tmp_path_factory):
    """`gengraph generate` on the same folder: {tokens, text, scores, prompt_length}, memoised."""
    memo, out = {}, tmp_path_factory.mktemp("generate") / "out.json"

    def run(text, max_new, seed=None, chat=False, **sampling):
        key = (text, max_new, seed, chat, tuple(sorted(sampling.items())))
        if key not in memo:
            args = ["generate", "--model", folder, "--text", text, "--max-new-tokens", max_new, "--set", PAGED,
                    "--set", "generation.output_scores=true", "--quiet", "--output", out]
            args += ["--chat"] if chat else []
            args += ["--set", f"run.seed={seed}"] if seed is not None else []
            for k, v in sampling.items():
                args += ["--set", f"generation.{k}={v}"]
            cli(*args)
            o = json.loads(out.read_text())["runs"][0]["outputs"][0]
            s = o["sequences"][0]
            memo[key] = dict(tokens=s["tokens"], text=s["text"], scores=s["token_scores"],
                             prompt_length=o["prompt_length"])
        return memo[key]
    return run


SAMPLING = dict(do_sample="true", temperature=0.8, top_k=0, top_p=0.9)


def test_models_lists_the_served_model(client):
    assert [m.id for m in client.models.list().data] == [MODEL_ID]


def test_greedy_completions_equal_generate(client, generate):
    for prompt in PROMPTS:
        r = client.completions.create(model=MODEL_ID, prompt=prompt, max_tokens=12, temperature=0)
        g = generate(prompt, 12)
        assert r.choices[0].text == g["text"]
        assert r.choices[0].finish_reason == ("length" if len(g["tokens"]) == 12 else "stop")
        assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (g["prompt_length"], len(g["tokens"]))
        assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_seeded_sampling_equals_generate_choice_by_choice(client, generate):
    seed = 1234
    r = client.completions.create(model=MODEL_ID, prompt=PROMPTS[0], max_tokens=16, temperature=0.8,
                                  top_p=0.9, seed=seed, n=2, logprobs=0)
    assert [c.index for c in r.choices] == [0, 1]
    for i, c in enumerate(r.choices):
        g = generate(PROMPTS[0], 16, seed=seed + i, **SAMPLING)
        assert c.text == g["text"]
        assert c.logprobs.token_logprobs == g["scores"]  # to the bit: the scheduler is batch-invariant
    assert r.choices[0].text != r.choices[1].text
    again = client.completions.create(model=MODEL_ID, prompt=PROMPTS[0], max_tokens=16, temperature=0.8,
                                      top_p=0.9, seed=seed, n=2)
    assert [c.text for c in again.choices] == [c.text for c in r.choices]


def test_chat_equals_generate_chat(client, generate):
    text = "Tell me a story about a fox"
    r = client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": text}],
                                       max_tokens=10, temperature=0)
    g = generate(text, 10, chat=True)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == g["text"]
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (g["prompt_length"], len(g["tokens"]))
    seeded = client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": text}],
                                            max_tokens=10, temperature=0.8, top_p=0.9, seed=7)
    assert seeded.choices[0].message.content == generate(text, 10, seed=7, chat=True, **SAMPLING)["text"]


def test_streamed_completion_is_the_whole_answer_in_pieces(client):
    whole = client.completions.create(model=MODEL_ID, prompt=PROMPTS[1], max_tokens=20, temperature=0)
    chunks = list(client.completions.create(model=MODEL_ID, prompt=PROMPTS[1], max_tokens=20, temperature=0,
                                            stream=True, stream_options={"include_usage": True}))
    assert len(chunks) > 3
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole.choices[0].text
    with_choices = [c for c in chunks if c.choices]
    assert [c.choices[0].finish_reason for c in with_choices[:-1]] == [None] * (len(with_choices) - 1)
    assert with_choices[-1].choices[0].finish_reason == whole.choices[0].finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage == whole.usage  # the usage chunk, last
    assert all(c.usage is None for c in chunks[:-1])
    assert len({c.id for c in chunks}) == 1


def test_streamed_chat_is_the_whole_answer_in_pieces(client):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour"}]
    whole = client.chat.completions.create(model=MODEL_ID, messages=messages, max_tokens=16, temperature=0)
    chunks = list(client.chat.completions.create(model=MODEL_ID, messages=messages, max_tokens=16, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert [c for c in chunks if c.choices][-1].choices[0].finish_reason == whole.choices[0].finish_reason
    assert chunks[-1].usage == whole.usage
    # Without include_usage no chunk carries usage.
    plain = list(client.chat.completions.create(model=MODEL_ID, messages=messages, max_tokens=4, stream=True))
    assert all(c.usage is None and c.choices for c in plain)


def test_completion_logprobs_are_generates_scores(client, generate):
    r = client.completions.create(model=MODEL_ID, prompt=PROMPTS[0], max_tokens=12, temperature=0, logprobs=2)
    g = generate(PROMPTS[0], 12)
    lp = r.choices[0].logprobs
    assert lp.token_logprobs == g["scores"]
    assert "".join(lp.tokens) == r.choices[0].text
    assert lp.text_offset == [sum(len(t.encode()) for t in lp.tokens[:i]) for i in range(len(lp.tokens))]
    for token, chosen, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert 1 <= len(top) <= 2  # two alternatives, fewer where two tokens read the same
        assert max(top.values()) == chosen  # greedy: the chosen token is the most likely
        assert top.get(token) == chosen
    assert r.usage.completion_tokens == len(lp.tokens)


def test_chat_logprobs_list_the_best_first(client, generate):
    text = "What is two plus two?"
    r = client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": text}],
                                       max_tokens=8, temperature=0, logprobs=True, top_logprobs=3)
    g = generate(text, 8, chat=True)
    content = r.choices[0].logprobs.content
    assert [c.logprob for c in content] == g["scores"]
    for c in content:
        assert len(c.top_logprobs) == 3
        values = [t.logprob for t in c.top_logprobs]
        assert values == sorted(values, reverse=True)
        assert (c.top_logprobs[0].token, c.top_logprobs[0].logprob) == (c.token, c.logprob)
    streamed = [c for c in client.chat.completions.create(
        model=MODEL_ID, messages=[{"role": "user", "content": text}], max_tokens=8, temperature=0,
        logprobs=True, top_logprobs=3, stream=True) if c.choices and c.choices[0].logprobs]
    assert [t.logprob for c in streamed for t in c.choices[0].logprobs.content] == g["scores"]


@pytest.mark.xfail(strict=True, reason="server bug: a token's `bytes` are its decoded text's (U+FFFD for "
                                       "a partial character), not the token's own bytes")
def test_chat_logprob_bytes_join_to_the_text(client):
    r = client.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "Hi"}],
                                       max_tokens=200, temperature=1.0, seed=0, logprobs=True,
                                       extra_body={"gengraph": {"skip_special_tokens": False}})
    joined = b"".join(bytes(c.bytes) for c in r.choices[0].logprobs.content)
    assert joined.decode("utf-8", errors="replace") == r.choices[0].message.content


def ascii_word(text, start):
    """A run of 3 ASCII letters in `text` at or after `start` (a stop string to cut at)."""
    for i in range(start, len(text) - 3):
        if all(c.isascii() and c.isalpha() for c in text[i:i + 3]):
            return text[i:i + 3]
    return None


def test_a_stop_string_ends_the_text(client):
    prompt = PROMPTS[0]
    full = client.completions.create(model=MODEL_ID, prompt=prompt, max_tokens=30, temperature=0).choices[0].text
    stop = ascii_word(full, 4)
    assert stop is not None, f"no stop string to use in {full!r}"
    expected = full[:full.index(stop)]
    r = client.completions.create(model=MODEL_ID, prompt=prompt, max_tokens=30, temperature=0, stop=[stop, "\x00"])
    assert (r.choices[0].text, r.choices[0].finish_reason) == (expected, "stop")
    assert r.usage.completion_tokens < 30
    chunks = list(client.completions.create(model=MODEL_ID, prompt=prompt, max_tokens=30, temperature=0,
                                            stop=stop, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == expected
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_n_two_greedy_choices_are_the_same(client):
    r = client.completions.create(model=MODEL_ID, prompt=PROMPTS, max_tokens=6, temperature=0, n=2)
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    texts = [c.text for c in r.choices]
    assert texts[0] == texts[1] and texts[2] == texts[3] and texts[0] != texts[2]
    one = client.completions.create(model=MODEL_ID, prompt=PROMPTS[1], max_tokens=6, temperature=0)
    assert texts[2] == one.choices[0].text


def test_an_unknown_field_is_named(openai, client):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL_ID, prompt="hi", max_tokens=2, extra_body={"frobnicate": 1})
    assert e.value.status_code == 400 and e.value.param == "frobnicate" and "frobnicate" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL_ID, prompt="hi", max_tokens="many")
    assert e.value.param == "max_tokens"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL_ID, messages=[{"role": "wizard", "content": "x"}])
    assert e.value.param == "messages[0].role"


def test_another_model_is_not_found(openai, client):
    with pytest.raises(openai.NotFoundError) as e:
        client.completions.create(model="gpt-4o", prompt="hi", max_tokens=2)
    assert e.value.code == "model_not_found" and "gpt-4o" in e.value.message and MODEL_ID in e.value.message


def test_max_tokens_past_the_context_names_the_numbers(openai, client):
    ctx = serve_process.CONTEXT
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL_ID, prompt=[5, 6, 7], max_tokens=ctx)
    assert e.value.code == "context_length_exceeded" and e.value.param == "max_tokens"
    for number in (str(ctx), "3", str(ctx + 3)):
        assert number in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL_ID, prompt=[5] * ctx, max_tokens=1)
    assert e.value.param == "prompt" and str(ctx) in e.value.message and str(ctx - 1) in e.value.message


def test_a_body_past_max_body_bytes_is_413(server):
    body = json.dumps({"model": MODEL_ID, "prompt": "x " * 40000}).encode()
    status, _, answer = serve_process.http("POST", server.base + "/v1/completions", body)
    assert status == 413 and "max_body_bytes" in json.loads(answer)["error"]["message"]


def test_the_api_key_guards_every_endpoint_but_health(openai, tmp_path_factory, folder):
    s = start_server(tmp_path_factory, folder, "--api-key", "s3cret")
    try:
        good = openai.OpenAI(base_url=s.base + "/v1", api_key="s3cret", max_retries=0, timeout=60)
        assert good.completions.create(model=MODEL_ID, prompt="hi", max_tokens=2).usage.completion_tokens == 2
        assert [m.id for m in good.models.list().data] == [MODEL_ID]
        bad = openai.OpenAI(base_url=s.base + "/v1", api_key="wrong", max_retries=0, timeout=60)
        with pytest.raises(openai.AuthenticationError):
            bad.models.list()
        with pytest.raises(openai.AuthenticationError) as e:
            bad.completions.create(model=MODEL_ID, prompt="hi", max_tokens=2)
        assert e.value.code == "invalid_api_key"
        bad = openai.OpenAI(base_url=s.base + "/v1", api_key="wrong", max_retries=0, timeout=60)
        with pytest.raises(openai.AuthenticationError):
            bad.chat.completions.create(model=MODEL_ID, messages=[{"role": "user", "content": "hi"}])
        for path in ("/v1/models", "/metrics"):
            status, _, body = serve_process.http("GET", s.base + path)  # no Authorization at all
            assert status == 401 and json.loads(body)["error"]["code"] == "invalid_api_key"
        assert serve_process.http("GET", s.base + "/health")[0] == 200
    finally:
        assert s.stop() == 0


def exchange(port, *parts, gap=0.0, timeout=3.0):
    """Sends `parts` on one connection (`gap` seconds apart), then reads until the server closes it
    or `timeout` passes; returns the bytes read."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    out = b""
    try:
        for part in parts:
            sock.sendall(part)
            time.sleep(gap)
        while True:
            data = sock.recv(65536)
            if not data:
                break
            out += data
    except OSError:  # a timeout, or a reset after a refusal
        pass
    finally:
        sock.close()
    return out


def test_a_refused_body_is_never_read_as_the_next_request(tmp_path_factory, folder):
    s = start_server(tmp_path_factory, folder, "--api-key", "s3cret")
    body = json.dumps({"model": MODEL_ID, "prompt": "hi", "max_tokens": 2}).encode()
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
    try:
        for gap in (0.0, 0.2):  # the body with the head, or after it
            out = exchange(s.port, head, body, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                           gap=gap)
            first, _, rest = out.partition(b"\r\n\r\n")
            assert first.startswith(b"HTTP/1.1 401")
            # Either the refusal closes the connection, or the next request is answered as sent.
            assert b"Connection: close" in first or b"HTTP/1.1 200" in rest, out
    finally:
        assert s.stop() == 0


def test_a_full_queue_answers_429_with_retry_after(openai, tmp_path_factory, folder):
    s = start_server(tmp_path_factory, folder, "--max-queue", "1", "--set", "serving.max_running=1")
    try:
        c = openai.OpenAI(base_url=s.base + "/v1", api_key="x", max_retries=0, timeout=120)
        running = c.completions.create(model=MODEL_ID, prompt="hi", max_tokens=1000, temperature=0.8, seed=1,
                                       stream=True)
        next(iter(running))  # it runs: the one place in the batch is taken
        outcomes, lock = [], threading.Lock()

        def one():
            try:
                r = c.completions.create(model=MODEL_ID, prompt="hi", max_tokens=8, temperature=0)
                out = ("ok", r.usage.completion_tokens)
            except openai.RateLimitError as e:
                out = ("429", e.response.headers.get("retry-after"), e.type)
            with lock:
                outcomes.append(out)
        threads = [threading.Thread(target=one) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        refused = [o for o in outcomes if o[0] == "429"]
        assert len(outcomes) == 6 and len(refused) >= 4, outcomes  # one may wait in the queue
        assert all(o[1] == "1" and o[2] == "rate_limit_error" for o in refused)
        assert all(o == ("ok", 8) for o in outcomes if o[0] == "ok")
        running.close()
    finally:
        assert s.stop() == 0


def gone_mid_stream(client, server):
    """A stream of 4 x 1000 tokens whose client reads two chunks and closes the connection; the
    metrics before it and once the server is idle again."""
    before = serve_process.metrics(server.base)
    stream = client.completions.create(model=MODEL_ID, prompt="Once upon a time", max_tokens=1000, n=4,
                                       temperature=0.9, seed=5, stream=True)
    pieces = iter(stream)
    next(pieces)
    next(pieces)
    assert serve_process.metrics(server.base)["gengraph_kv_blocks_in_use"] > 0
    stream.close()  # the connection closes
    return before, serve_process.wait_for_idle(server.base)


def test_a_client_gone_mid_stream_stops_its_request(client, server):
    before, after = gone_mid_stream(client, server)
    assert after["gengraph_kv_blocks_in_use"] == 0
    # It stopped early: far fewer than its 4,000 tokens were generated (the server's request log).
    line = [x for x in server.log_tail(4000).splitlines() if x.startswith("request cmpl-")][-1]
    assert int(re.search(r"completion_tokens=(\d+)", line).group(1)) < 1000, line
    # The server goes on serving.
    assert client.completions.create(model=MODEL_ID, prompt="hi", max_tokens=3).usage.completion_tokens == 3


def test_a_client_gone_mid_stream_counts_as_cancelled(client, server):
    deltas = []
    for _ in range(3):
        before, _ = gone_mid_stream(client, server)
        # The counter moves as each choice's end reaches the server, a moment after the scheduler's
        # counters show it idle (they are taken before the step's results are delivered): wait for
        # it, up to 30 s.
        deadline = time.monotonic() + 30
        while True:
            delta = serve_process.metrics(server.base)["gengraph_cancelled_total"] - before["gengraph_cancelled_total"]
            if delta >= 4 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        deltas.append(delta)
    assert deltas == [4, 4, 4]  # each of the 4 choices in flight, whichever way the server noticed


def read_sse(sock_file):
    """The events of a server-sent-events body read from a raw socket's file (chunked encoding)."""
    events = []
    while True:
        size = sock_file.readline()
        if not size or int(size.strip(), 16) == 0:
            return events
        data = sock_file.read(int(size.strip(), 16))
        sock_file.readline()
        events += [line[6:] for line in data.decode().split("\n") if line.startswith("data: ")]


def test_sigterm_drains_the_stream_in_flight_then_exits_0(tmp_path_factory, folder):
    s = start_server(tmp_path_factory, folder)
    try:
        body = json.dumps({"model": MODEL_ID, "prompt": "Once", "max_tokens": 1000, "n": 8, "temperature": 0.9,
                           "seed": 11, "stream": True}).encode()
        sock = socket.create_connection(("127.0.0.1", s.port), timeout=60)
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        f = sock.makefile("rb")
        assert b" 200 " in f.readline()
        while f.readline() not in (b"\r\n", b""):
            pass
        first = f.read(int(f.readline().strip(), 16))
        assert first.startswith(b"data: ")
        f.readline()
        s.signal(signal.SIGTERM)
        time.sleep(0.2)
        status, _, answer = serve_process.http("POST", s.base + "/v1/completions",
                                               {"model": MODEL_ID, "prompt": "hi", "max_tokens": 2})
        assert status == 503 and json.loads(answer)["error"]["type"] == "server_error"
        assert serve_process.http("GET", s.base + "/health")[0] == 503
        events = read_sse(f)
        assert events[-1] == "[DONE]"
        finishes = [c["finish_reason"] for e in events[:-1] for c in json.loads(e)["choices"] if c["finish_reason"]]
        assert sorted(finishes) != [] and len(finishes) == 8 and set(finishes) <= {"length", "stop"}
        sock.close()
        assert s.proc.wait(timeout=60) == 0
    finally:
        s.kill()


def real_model_ready():
    """Whether `gengraph models` says smollm2-135m is set up here."""
    m = re.search(r"^  smollm2-135m\t.*?(?=^  \S|\Z)", cli("models", check=False).stdout, re.M | re.S)
    return m is not None and "set up here:" in m.group(0)


@pytest.mark.skipif(not real_model_ready(), reason="the real model smollm2-135m is not set up here")
def test_the_real_model_answers_as_generate(openai, tmp_path_factory):
    log = tmp_path_factory.mktemp("real") / "serve.log"
    s = serve_process.ServeProcess(GENGRAPH, ["--model", "smollm2-135m"], log).start()
    out = tmp_path_factory.mktemp("real") / "out.json"
    try:
        c = openai.OpenAI(base_url=s.base + "/v1", api_key="x", max_retries=0, timeout=300)
        r = c.chat.completions.create(model="smollm2-135m", messages=[{"role": "user", "content": "What is 2+2?"}],
                                      max_tokens=12, temperature=0)  # both leave special tokens out of chat
        cli("generate", "--model", "smollm2-135m", "--text", "What is 2+2?", "--chat", "--max-new-tokens", 12,
            "--set", PAGED, "--quiet", "--output", out)
        assert r.choices[0].message.content == json.loads(out.read_text())["runs"][0]["outputs"][0]["sequences"][0]["text"]
    finally:
        assert s.stop() == 0


def test_a_gguf_file_is_served(openai, tmp_path_factory):
    """A GGUF file serves as a model folder does (docs/gguf.md): one written without a vocabulary
    serves token ids, saying why, and its greedy answer is gengraph generate's."""
    file = ROOT / "tests" / "fixtures" / "gguf" / "models" / "llama-q8_0.gguf"
    log = tmp_path_factory.mktemp("gguf") / "serve.log"
    s = serve_process.ServeProcess(GENGRAPH, ["--model", file], log).start()
    out = tmp_path_factory.mktemp("gguf") / "out.json"
    try:
        c = openai.OpenAI(base_url=s.base + "/v1", api_key="x", max_retries=0, timeout=60)
        r = c.completions.create(model="llama-q8_0.gguf", prompt=[1, 5, 9], max_tokens=6, temperature=0,
                                 extra_body={"gengraph": {"min_new_tokens": 6}})
        cli("generate", "--model", file, "--prompt", "1,5,9", "--max-new-tokens", 6, "--set",
            "generation.min_new_tokens=6", "--set", PAGED, "--quiet", "--output", out)
        want = json.loads(out.read_text())["runs"][0]["outputs"][0]["sequences"][0]["tokens"]
        assert r.choices[0].model_extra["token_ids"] == want
        assert "has no tokenizer gengraph reads" in s.log_tail()
    finally:
        assert s.stop() == 0

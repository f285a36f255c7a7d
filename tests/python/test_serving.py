"""gengraph.Scheduler from Python: each request's tokens and scores equal Engine.generate's for
it alone (eager, cache paged, seeded with its seed), submitted from several threads, iterated
(for and async for), cancelled, refused; the KV pool empty once drained."""
import asyncio
import math
import threading

import pytest
import torch

import gengraph

PROMPTS = [[1, 2, 3], [4, 5, 6, 7, 8, 9, 10], [11], [12, 13, 14, 15, 16]]
GREEDY = dict(max_new_tokens=8, output_scores=True)
SAMPLING = dict(max_new_tokens=8, do_sample=True, temperature=0.9, top_k=50, output_scores=True)


@pytest.fixture(scope="module")
def model():
    return gengraph.Model("llama-tiny")


@pytest.fixture(scope="module")
def alone(model):
    """A request's tokens and scores as Engine.generate gives them for it alone."""
    engine = gengraph.Engine(model, backend_options={"cache": "paged"})
    memo = {}

    def run(prompt, seed, settings):
        key = (tuple(prompt), seed, tuple(sorted(settings.items())))
        if key not in memo:
            out = engine.generate([prompt], seed=seed, **settings)
            memo[key] = (out.tokens[0][0], out.token_scores[0][0])
        return memo[key]

    return run


@pytest.fixture()
def scheduler(model):
    with gengraph.Scheduler(model, kv_blocks=256, max_step_tokens=64, prefill_chunk=4) as s:
        yield s


def cases():
    return [(p, seed, settings) for settings in (GREEDY, SAMPLING)
            for seed, p in enumerate(PROMPTS, start=3)]


def test_results_equal_engine_generate_alone(scheduler, alone):
    submitted = [(scheduler.submit(p, seed=seed, **s), p, seed, s) for p, seed, s in cases()]
    for request, p, seed, s in submitted:
        r = request.wait()
        tokens, scores = alone(p, seed, s)
        assert r.finish in ("stop", "length") and r.error == ""
        assert r.tokens == tokens, (p, seed, s)
        assert r.token_scores == scores, (p, seed, s)  # to the bit
        assert r.prompt_length == len(p) and r.total_s >= r.time_to_first_token_s >= 0
        assert request.done and request.id == r.id
    stats = scheduler.stats()
    assert stats["blocks"]["in_use"] == 0 and stats["finished"] >= len(submitted)


def test_submits_from_several_threads(scheduler, alone):
    got, errors = {}, []

    def client(k):
        try:
            mine = [(i, scheduler.submit(p, seed=seed, **s))
                    for i, (p, seed, s) in enumerate(cases()) if i % 4 == k]
            for i, request in mine:
                got[i] = request.wait()
        except Exception as e:  # reported below, with the thread's case
            errors.append(e)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(got) == len(cases())
    for i, (p, seed, s) in enumerate(cases()):
        assert (got[i].tokens, got[i].token_scores) == alone(p, seed, s)
    scheduler.drain()
    assert scheduler.stats()["blocks"]["in_use"] == 0


def test_iterating_gives_each_token_as_chosen(scheduler, alone):
    requests = [scheduler.submit(p, seed=seed, **s) for p, seed, s in cases()[:3]]
    for request, (p, seed, s) in zip(requests, cases()[:3]):
        streamed = list(request)
        tokens, scores = alone(p, seed, s)
        assert [t.token for t in streamed] == tokens
        assert [t.step for t in streamed] == list(range(len(tokens)))
        assert [t.logprob for t in streamed] == scores
        assert request.wait().tokens == tokens
        assert list(request) == []  # each token is handed over once


def test_top_logprobs_equal_engine_generate_alone(scheduler, model):
    engine = gengraph.Engine(model, backend_options={"cache": "paged"})
    for p, seed, s in cases()[::3]:
        s = dict(s, top_logprobs=4)
        request = scheduler.submit(p, seed=seed, **s)
        streamed = list(request)
        want = engine.generate([p], seed=seed, **s).outputs[0][0].top_logprobs
        assert len(want) == len(streamed) and all(len(top) == 4 for top in want)
        assert request.wait().top_logprobs == want, (p, seed, s)  # to the bit
        assert [t.top for t in streamed] == want


def test_async_iteration(scheduler, alone):
    async def collect(request):
        return [t async for t in request]

    async def main():
        requests = [scheduler.submit(p, seed=seed, **s) for p, seed, s in cases()]
        return await asyncio.gather(*(collect(r) for r in requests))

    for streamed, (p, seed, s) in zip(asyncio.run(main()), cases()):
        assert [t.token for t in streamed] == alone(p, seed, s)[0]

    async def leave_early(request):
        async for t in request:
            if t.step == 2:
                break  # the iterator dropped: the request stops at its next token
        return await asyncio.get_running_loop().run_in_executor(None, request.wait)

    r = asyncio.run(leave_early(scheduler.submit([1, 2], max_new_tokens=200, min_new_tokens=200)))
    assert r.finish == "stopped" and len(r.tokens) < 200


def test_cancel_and_leaving_the_loop_early(scheduler):
    long = dict(max_new_tokens=200, min_new_tokens=200)
    request = scheduler.submit([1, 2, 3], **long)
    streamed = []
    for t in request:  # the loop ends with the request
        streamed.append(t.token)
        if t.step == 2:
            assert request.cancel()
    r = request.wait()
    assert r.finish == "cancelled" and 3 <= len(r.tokens) < 200 and streamed == r.tokens
    assert not request.cancel()  # it has ended

    # A wait with a timeout: TimeoutError while it runs, the result once it has ended.
    request = scheduler.submit([1, 2, 3], **long)
    with pytest.raises(TimeoutError, match=f"Request {request.id}: not ended after 0 s"):
        request.wait(timeout=0)
    assert request.cancel() and request.wait(timeout=30).finish == "cancelled"

    # Leaving the loop stops the request at its next token.
    request = scheduler.submit([4, 5], **long)
    for t in request:
        if t.step == 2:
            break
    r = request.wait()
    assert r.finish == "stopped" and len(r.tokens) < 200

    # Cancelled while waiting to run, or never iterated: nothing waits on a reader.
    quiet = [scheduler.submit([6, 7, 8], **long) for _ in range(3)]
    assert all(q.cancel() for q in quiet[1:])
    assert quiet[0].wait().finish == "length" and len(quiet[0].wait().tokens) == 200
    assert [q.wait().finish for q in quiet[1:]] == ["cancelled"] * 2
    scheduler.drain()
    stats = scheduler.stats()
    assert stats["blocks"]["in_use"] == 0 and stats["running"] == 0 and stats["waiting"] == 0


def test_refusals_name_the_cause(model, scheduler):
    with pytest.raises(gengraph.Error, match="num_beams"):
        scheduler.submit([1, 2, 3], max_new_tokens=4, num_beams=2)
    with pytest.raises(gengraph.Error, match="max_new_tokens"):
        scheduler.submit([1, 2], max_new_tokens=-1)
    with pytest.raises(TypeError, match="max_runing"):
        gengraph.Scheduler(model, max_runing=3)
    with pytest.raises(TypeError, match="submit: prompt"):
        scheduler.submit("a text")
    with pytest.raises(TypeError, match=r"submit: prompt\[1\]"):
        scheduler.submit([1, 2.5])
    with pytest.raises(gengraph.Error, match="kv_blocks"):
        gengraph.Scheduler(model, kv_blocks=-1)
    full = gengraph.Scheduler(model, kv_blocks=2, block_size=4)
    with pytest.raises(gengraph.Error, match="KV pool"):
        full.submit([1, 2, 3], max_new_tokens=20)
    full.close()


def test_close_keeps_results_and_refuses_submits(model):
    with gengraph.Scheduler(model, kv_blocks=64) as t:
        done = t.submit([1, 2, 3], max_new_tokens=4)
    assert done.wait().finish == "length" and len(done.wait().tokens) == 4  # drained at exit
    assert t.closed

    s = gengraph.Scheduler("llama-tiny")  # a name: loaded as a Model
    running = s.submit([1, 2, 3], max_new_tokens=240, min_new_tokens=240)
    tokens = iter(running)
    streamed = [next(tokens).token]  # it has started
    s.close()
    assert s.closed and running.wait().finish == "cancelled"
    streamed += [t.token for t in tokens]  # the iteration ends with the request
    assert streamed == running.wait().tokens and len(streamed) < 240
    assert s.stats()["blocks"]["in_use"] == 0 and list(running) == []
    with pytest.raises(gengraph.Error, match="closed"):
        s.submit([1, 2])
    s.close()  # again: nothing to do


def test_prompts_as_tensors(scheduler, alone):
    r = scheduler.submit(torch.tensor([1, 2, 3]), seed=3, **GREEDY).wait()
    assert r.tokens == alone([1, 2, 3], 3, GREEDY)[0]
    assert all(math.isfinite(x) and x <= 0 for x in r.token_scores)

"""Many requests at once: gengraph.Scheduler over the C++ gengraph::Scheduler (continuous
batching; docs/python.md#many-requests-at-once).

A Scheduler runs requests submitted from any thread through one model on a thread of its own.
Each request gives exactly what Engine.generate gives for it alone (backend eager, cache paged,
seeded with its seed). A Request can be waited for, cancelled, and iterated (`for`, `async for`)
for its tokens as they are chosen.
"""
import asyncio as _asyncio
import collections as _collections

from . import _check, _gengraph
from ._gengraph import RequestResult
from ._check import ArgumentTypeError, ArgumentValueError

__all__ = ["Scheduler", "Request", "RequestResult"]


class Request:
    """A submitted request (gengraph::RequestHandle): wait(), cancel(), or iterate its tokens.

    Iterating (`for token in request`, or `async for` in a coroutine) yields a
    gengraph.StreamedToken (token, step, logprob, last) per token as the scheduler chooses it,
    and ends when the request ends, whatever its finish. Each token is handed over once: iterate a
    request from one place. Leaving the loop early (break, an exception) stops the request at its
    next token; its result's finish is then "stopped". A request nobody iterates costs nothing:
    its tokens wait in a queue that never holds the scheduler up.
    """

    __slots__ = ("_r",)

    def __init__(self, handle):
        self._r = handle

    @property
    def id(self):
        return self._r.id

    @property
    def done(self):
        """Whether the request's result is known here (after wait(), or iteration's end)."""
        return self._r.finished

    def wait(self, timeout=None):
        """Blocks (the GIL released) until the request has ended; its gengraph.RequestResult:
        tokens, token_scores, finish ("stop", "length", "cancelled", "stopped", "failed"),
        error, prompt_length, queue_s, time_to_first_token_s, total_s, preemptions,
        reused_tokens. timeout: the most seconds to wait; past it, TimeoutError (the request
        goes on)."""
        if timeout is None:
            return self._r.wait()
        seconds = _check.number(timeout, "Request.wait: timeout")
        if seconds < 0:
            raise ArgumentValueError(f"Request.wait: timeout: expected seconds >= 0, found "
                                     f"{timeout!r}")
        result = self._r.wait_for(float(seconds))
        if result is None:
            raise TimeoutError(f"Request {self.id}: not ended after {timeout} s")
        return result

    def cancel(self):
        """Stops the request at the next step boundary; False when it had ended already."""
        return self._r.cancel()

    def __iter__(self):
        ended = False
        try:
            while not ended:
                tokens, ended = self._r.take(True)
                yield from tokens
        finally:
            if not ended:
                self._r.stop()

    def __aiter__(self):
        return _AsyncTokens(self._r)

    def __repr__(self):
        return f"gengraph.Request(id={self.id}{', done' if self.done else ''})"


class _AsyncTokens:
    """`async for token in request`: the module signals the request's eventfd whenever a token
    or the end arrives, and the loop watches it while the iterator waits, so no thread waits on
    the request's behalf. Dropped before the end (the loop left early), it stops the request at
    its next token, as the `for` loop's generator does."""

    def __init__(self, handle):
        self._r = handle
        self._ready = _collections.deque()
        self._started = self._ended = False

    def __aiter__(self):
        return self

    async def __anext__(self):
        self._started = True
        while not self._ready:
            if self._ended:
                raise StopAsyncIteration
            tokens, self._ended = self._r.take(False)
            self._ready.extend(tokens)
            if not tokens and not self._ended:
                await self._woken()
        return self._ready.popleft()

    async def _woken(self):
        loop = _asyncio.get_running_loop()
        woken = loop.create_future()
        fd = self._r.event_fd()

        def ready():
            self._r.clear_event()
            if not woken.done():
                woken.set_result(None)

        loop.add_reader(fd, ready)  # readable at once if something came since take()
        try:
            await woken
        finally:
            loop.remove_reader(fd)

    def __del__(self):
        if self._started and not self._ended:
            self._r.stop()


class Scheduler:
    """Runs many requests at once through one model (gengraph::Scheduler): continuous batching.

    model: a gengraph.Model (its weights shared) or what Model takes (a preset, a known model, a
    folder). backend: one that runs ragged batches ("eager"), with backend_options. The keywords
    are the C++ SchedulerOptions: policy ("fcfs", "shortest_prompt_first", "priority",
    "longest_prefix_first"), block_size (positions per KV block), kv_blocks (0: as many as
    kv_memory_mb holds), kv_memory_mb, max_step_tokens (tokens per forward step),
    prefill_chunk, max_running, max_queue (submit refuses past it), prefix_sharing,
    batch_invariant.

    submit, drain, stats and the Requests' calls may come from any thread. close() (or leaving a
    `with` block by an exception) cancels what has not finished; leaving it normally drains first.
    """

    def __init__(self, model, backend="eager", backend_options=None, *, policy="fcfs",
                 block_size=16, kv_blocks=0, kv_memory_mb=256, max_step_tokens=256,
                 prefill_chunk=256, max_running=64, max_queue=1024, prefix_sharing=True,
                 batch_invariant=True):
        from . import Model, _backend_options, _name

        call = "Scheduler"
        if not isinstance(model, Model):
            model = Model(model)
        self._s = _gengraph._Scheduler(
            model._model, _name(backend, f"{call}: backend"),
            _backend_options(backend_options, call),
            _check.text(policy, f"{call}: policy", "a policy name (str)"),
            _check.integer(block_size, f"{call}: block_size"),
            _check.integer(kv_blocks, f"{call}: kv_blocks"),
            float(_check.number(kv_memory_mb, f"{call}: kv_memory_mb")),
            _check.integer(max_step_tokens, f"{call}: max_step_tokens"),
            _check.integer(prefill_chunk, f"{call}: prefill_chunk"),
            _check.integer(max_running, f"{call}: max_running"),
            _check.integer(max_queue, f"{call}: max_queue"),
            _check.boolean(prefix_sharing, f"{call}: prefix_sharing"),
            _check.boolean(batch_invariant, f"{call}: batch_invariant"))

    def submit(self, prompt, *, seed=0, priority=0, **settings):
        """Queues one prompt (token ids: a list, or a 1-D tensor) and returns its Request.

        settings: Engine.generate's keywords (max_new_tokens, do_sample, temperature,
        output_scores, ...); seed: the request's own sampling generator, as
        Engine.manual_seed(seed); priority: the "priority" policy admits higher first. A request
        the scheduler cannot run (num_beams, a prompt past the KV pool, a full queue) raises
        gengraph.Error naming why.
        """
        from . import _settings

        return Request(self._s.submit(_prompt(prompt), _settings(settings, "submit"),
                                      _check.integer(seed, "submit: seed", 0, _check.UINT64_MAX,
                                                     "an int seed"),
                                      _check.integer(priority, "submit: priority")))

    def drain(self):
        """Blocks (the GIL released) until every request submitted so far has ended."""
        self._s.drain()

    def stats(self):
        """The counters: steps, tokens, running, waiting, finished, blocks (total, in_use,
        peak_in_use, cached), prefix_hits, reused_tokens, preemptions. After close(), as they
        were at the end."""
        return self._s.stats()

    def close(self):
        """Cancels what has not finished, waits for it, and frees the KV pool. Requests keep
        their results; submit() is refused from now on."""
        self._s.close()

    @property
    def closed(self):
        return self._s.closed

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        if exc_type is None:
            self.drain()
        self.close()

    def __repr__(self):
        return f"gengraph.Scheduler({'closed' if self.closed else 'open'})"


def _prompt(prompt):
    where = "submit: prompt"
    if isinstance(prompt, str):
        raise ArgumentTypeError(f"{where}: expected token ids (a list of int or a 1-D tensor), "
                                f"found a str; encode texts first (Engine.encode)")
    if hasattr(prompt, "dim") and prompt.dim() != 1:
        raise ArgumentValueError(f"{where}: expected a 1-D tensor of token ids, found shape "
                                 f"{list(prompt.shape)}")
    ids = _check._sequence(prompt)
    if ids is None or isinstance(prompt, (bytes, bytearray)):
        raise ArgumentTypeError(f"{where}: expected token ids (a list of int or a 1-D tensor), "
                                f"found {_check.describe(prompt)}")
    if ids and isinstance(ids[0], (list, tuple)):
        raise ArgumentTypeError(f"{where}: expected one prompt (a list of int), found a list of "
                                f"lists; submit one request per prompt")
    return _check.token_ids(ids, where)

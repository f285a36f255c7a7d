"""The contract of a backend defined in Python (docs/python.md#backends).

A backend runs the model forward for gengraph's decoding loop; it never sees decoding settings.
Subclassing Backend is optional: any object with prefill() and decode() will do.
"""


class Backend:
    """Base class of a Python backend. gengraph creates one per Engine (and per experiment row)
    as factory(model, options), then for every generation calls prepare(), prefill() once and
    decode() once per new token.

    model: a gengraph.ModelInfo (source, config, vocab_size, dtype, device, weights()).
    options: the row's backend options as strings (YAML `backends: [{name: ..., options: {...}}]`
    or Engine keywords); every option is the backend's to read or refuse.
    """

    def __init__(self, model, options):
        self.model = model
        self.options = options

    def prepare(self, rows, max_length):
        """Before every generation: `rows` sequences (batch x beams) of at most `max_length`
        tokens, prompt padding included. Drop the last generation's cache here."""

    def prefill(self, input_ids, positions, token_valid):
        """The prompt. input_ids, positions: int64 [rows, T]; token_valid: bool [rows, T], False
        for left padding. Returns the last position's logits, a floating tensor [rows, vocab] on
        the model's device."""
        raise NotImplementedError

    def decode(self, input_ids, positions, token_valid, parent_rows):
        """One new token per row (T = 1). parent_rows: None, or int64 [rows]: row r continues
        row parent_rows[r]'s history (beam search), so reorder the cache by it first. Returns
        [rows, vocab] logits."""
        raise NotImplementedError

    # Optional: rewind(length) keeps the first `length` positions of the cache (speculative
    # decoding drops the candidates it did not keep); report() returns a dict of str -> float
    # for the results' report block.


# --- A time limit on a Python backend's calls (call_timeout_s; docs/python.md#time-limits) ---
#
# A Python call cannot be stopped from outside while it waits in C code (time.sleep, a socket, a
# C extension that does not return to the interpreter), so the limit does not try to: each call
# of prefill, decode, prepare, rewind and report runs on the backend's helper thread while the
# generating thread waits for it, at most call_timeout_s. Past the limit the generation fails
# with a gengraph.Error naming the backend, the call and the limit; the helper thread is left
# to finish on its own (an exception is also set in it, which stops a call that is running
# Python code at its next line), and the backend object is dropped: the Engine's next
# generation creates a new one from the factory.

import ctypes as _ctypes
import queue as _queue
import threading as _threading
import weakref as _weakref

import torch as _torch

from . import _check

_METHODS = ("prepare", "prefill", "decode", "rewind", "report")
TIMEOUT_OPTION = "call_timeout_s"


class Refusal(Exception):
    """A refusal whose message is complete: the module shows it after the backend's name, as
    it is (no exception type, no place in the code)."""

    _gengraph_complete = True


class _Abandoned(BaseException):
    """Set in a helper thread whose call ran past its limit; a BaseException, so that a
    backend's `except Exception` does not swallow it."""


class _Job:
    __slots__ = ("fn", "args", "grad", "result", "error", "done")

    def __init__(self, fn, args):
        self.fn, self.args = fn, args
        self.grad = _torch.is_grad_enabled()  # thread-local in torch: the caller's, carried over
        self.result = self.error = None
        self.done = _threading.Event()


def _work(jobs, state):
    try:
        while not state["abandoned"]:
            job = jobs.get()
            if job is None:
                return
            try:
                with _torch.set_grad_enabled(job.grad):
                    job.result = job.fn(*job.args)
            except BaseException as e:  # handed to the caller, who raises it
                job.error = e
            finally:
                job.done.set()
                job = None
    except _Abandoned:
        pass


class _Helper:
    """One thread that runs a backend's calls, one at a time."""

    def __init__(self, name):
        self.jobs = _queue.SimpleQueue()
        self.state = {"abandoned": False}
        self.thread = _threading.Thread(target=_work, args=(self.jobs, self.state), daemon=True,
                                         name=f"gengraph backend '{name}'")
        self.thread.start()

    def abandon(self):
        self.state["abandoned"] = True
        self.jobs.put(None)
        if self.thread.ident is not None and self.thread.is_alive():
            _ctypes.pythonapi.PyThreadState_SetAsyncExc(_ctypes.c_ulong(self.thread.ident),
                                                        _ctypes.py_object(_Abandoned))


def _seconds(limit):
    return f"{limit:g} s"


class TimedBackend:
    """A Python backend whose calls have a time limit (see above)."""

    def __init__(self, name, factory, model, options, limit):
        self._name, self._factory, self._model = name, factory, model
        self._options, self._limit = options, limit
        self._impl = factory(model, dict(options))
        # The contract's methods the backend has: the module asks with hasattr() which optional
        # ones there are, also while the backend is dropped.
        self._has = frozenset(m for m in _METHODS if hasattr(self._impl, m))
        self._helper = None

    def __getattr__(self, method):
        if method in self.__dict__.get("_has", ()):
            return lambda *args: self._call(method, args)
        raise AttributeError(method)

    def _call(self, method, args):
        if self._impl is None:
            # The call that ran past its limit failed its generation: any call now belongs to a
            # later one (or is the Engine's report), made on a backend created anew.
            self._impl = self._factory(self._model, dict(self._options))
        if self._helper is None:
            self._helper = _Helper(self._name)
            _weakref.finalize(self, self._helper.jobs.put, None)  # the thread ends with us
        helper = self._helper
        job = _Job(getattr(self._impl, method), args)
        helper.jobs.put(job)
        try:
            finished = job.done.wait(self._limit)
        except BaseException:  # KeyboardInterrupt while waiting: the call goes on without us
            self._drop(helper)
            raise
        if not finished:
            self._drop(helper)
            raise Refusal(
                f"{method}() did not return within the limit of {_seconds(self._limit)} "
                f"(call_timeout_s); the call may go on running on its helper thread, which "
                f"gengraph cannot stop while it waits outside Python code (time.sleep, I/O, a "
                f"C extension); the next generation creates the backend anew")
        error, result = job.error, job.result
        job.result = job.error = None
        if error is not None:
            raise error
        return result

    def _drop(self, helper):
        helper.abandon()
        self._helper = None
        self._impl = None


def _limit(value, what):
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise _check.ArgumentValueError(f"{what}: expected a number of seconds > 0, found "
                                            f"{value!r}") from None
    if value is None:
        return None
    value = _check.number(value, what)
    if not value > 0:
        raise _check.ArgumentValueError(f"{what}: expected a number of seconds > 0, found "
                                        f"{value!r}")
    return float(value)


def timed_factory(name, factory, call_timeout_s):
    """The factory the module registers: the backend option call_timeout_s (a row's or an
    Engine's) over the registration's limit; without either, the backend itself, untouched."""
    default = _limit(call_timeout_s, f"register_backend('{name}'): call_timeout_s")

    def create(model, options):
        options = dict(options)
        limit = default
        if TIMEOUT_OPTION in options:
            try:
                limit = _limit(options.pop(TIMEOUT_OPTION), f"option {TIMEOUT_OPTION}")
            except _check.Error as e:
                raise Refusal(str(e)) from None
        if limit is None:
            return factory(model, options)
        return TimedBackend(name, factory, model, options, limit)

    create.__wrapped__ = factory
    return create


def without_timeout_option(available):
    """available(options) as the backend's author wrote it: without call_timeout_s."""
    if available is None:
        return None

    def check(options):
        return available({k: v for k, v in options.items() if k != TIMEOUT_OPTION})

    return check

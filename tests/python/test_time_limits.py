"""A time limit on a Python backend's calls (call_timeout_s; docs/python.md#time-limits): a call
that does not return fails the generation within the limit, naming the backend, the call and the
limit, and the Engine's next generation works on a backend created anew."""
import threading
import time

import pytest
import torch

import gengraph
from conftest import FIXTURES
from transformers_backend import TransformersBackend


class Fixed(gengraph.Backend):
    """No model: token 1 always the most likely. `stall` says which call hangs, and how."""

    stall = {}  # method -> "sleep" | "spin" | "once" (sleeps the first time only)
    spinning = []  # the threads that spun

    def prepare(self, rows, max_length):
        self.logits = torch.zeros(rows, self.model.vocab_size)
        self.logits[:, 1] = 1.0
        self._maybe_stall("prepare")

    def _maybe_stall(self, method):
        how = Fixed.stall.get(method)
        if how == "once":
            del Fixed.stall[method]
        if how in ("sleep", "once"):
            time.sleep(1000)
        elif how == "spin":
            Fixed.spinning.append(threading.current_thread())
            while True:
                pass

    def prefill(self, input_ids, positions, token_valid):
        self._maybe_stall("prefill")
        return self.logits

    def decode(self, input_ids, positions, token_valid, parent_rows):
        self._maybe_stall("decode")
        return self.logits

    def report(self):
        return {"fixed": 1.0}


@pytest.fixture(autouse=True)
def fresh():
    Fixed.stall = {}
    yield
    Fixed.stall = {}
    for name in ("timed", "untimed"):
        if name in gengraph._gengraph._python_backends():
            gengraph.unregister_backend(name)


def bounded(call, seconds=60):
    """Runs call() on a thread; what it returned or raised, and how long it took. Fails (rather
    than hanging the suite) if it has not returned within `seconds`."""
    box = {}

    def run():
        t0 = time.monotonic()
        try:
            box["value"] = call()
        except BaseException as e:  # noqa: B902 - handed back to the test
            box["error"] = e
        box["took"] = time.monotonic() - t0

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"still running after {seconds} s: the limit did not hold"
    return box


def test_a_sleeping_prefill_fails_within_the_limit_and_the_engine_recovers():
    gengraph.register_backend("timed", Fixed, call_timeout_s=1)
    engine = gengraph.Engine("gpt2-tiny", backend="timed")
    want = engine.generate([[3, 4]], max_new_tokens=4).tokens
    Fixed.stall = {"prefill": "once"}
    box = bounded(lambda: engine.generate([[3, 4]], max_new_tokens=4))
    error = box.get("error")
    assert isinstance(error, gengraph.Error), box
    assert str(error).startswith(
        "backend 'timed': prefill() did not return within the limit of 1 s (call_timeout_s)")
    assert "Traceback" not in str(error) and "At:" not in str(error)
    assert box["took"] < 30  # a bound on a hang, not a speed: the call sleeps 1000 s
    # The next generation creates the backend anew and runs.
    assert engine.generate([[3, 4]], max_new_tokens=4).tokens == want
    assert engine.backend_report() == {"fixed": 1.0}


def test_a_call_that_always_hangs_fails_clearly_every_time():
    gengraph.register_backend("untimed", Fixed)
    engine = gengraph.Engine("gpt2-tiny", backend="untimed", call_timeout_s=1)
    Fixed.stall = {"decode": "sleep"}
    for _ in range(2):
        box = bounded(lambda: engine.generate([[3, 4]], max_new_tokens=4))
        assert "backend 'untimed': decode() did not return within the limit of 1 s" in \
            str(box.get("error")), box
    # Between generations, the report is a new backend's.
    assert engine.backend_report() == {"fixed": 1.0}
    Fixed.stall = {}
    assert engine.generate([[3, 4]], max_new_tokens=4).steps == 4
    Fixed.stall = {"decode": "sleep"}
    # The stream's iterator reports it as well.
    stream = engine.stream([[3, 4]], max_new_tokens=4)
    box = bounded(lambda: list(stream))
    assert "decode() did not return within the limit of 1 s" in str(box.get("error")), box


def test_a_spinning_call_is_stopped_on_its_helper_thread():
    gengraph.register_backend("timed", Fixed, call_timeout_s=1)
    engine = gengraph.Engine("gpt2-tiny", backend="timed")
    Fixed.stall = {"prefill": "spin"}
    box = bounded(lambda: engine.generate([[3]], max_new_tokens=2))
    assert "prefill() did not return within the limit of 1 s" in str(box.get("error")), box
    Fixed.stall = {}
    assert len(Fixed.spinning) == 1 and Fixed.spinning[0] is not threading.current_thread()
    # The exception set in the helper thread ends the loop at its next line: the thread goes.
    Fixed.spinning[0].join(30)
    assert not Fixed.spinning[0].is_alive(), "the spinning call's helper thread still runs"
    assert engine.generate([[3]], max_new_tokens=2).steps == 2


def test_a_backend_with_prefill_and_decode_only_is_created_anew_too():
    class Bare:
        calls = 0

        def __init__(self, model, options):
            self.vocab = model.vocab_size

        def prefill(self, input_ids, positions, token_valid):
            Bare.calls += 1
            if Bare.calls == 1:
                time.sleep(1000)
            logits = torch.zeros(input_ids.shape[0], self.vocab)
            logits[:, 1] = 1.0
            return logits

        def decode(self, input_ids, positions, token_valid, parent_rows):
            return self.prefill(input_ids, positions, token_valid)

    gengraph.register_backend("timed", Bare, call_timeout_s=1)
    engine = gengraph.Engine("gpt2-tiny", backend="timed")
    box = bounded(lambda: engine.generate([[3]], max_new_tokens=3))
    assert "prefill() did not return within the limit of 1 s" in str(box.get("error")), box
    assert engine.generate([[3]], max_new_tokens=3).tokens == [[[1, 1, 1]]]


def test_errors_and_results_under_a_limit_are_the_backends_own():
    class Raises(Fixed):
        def prefill(self, input_ids, positions, token_valid):
            raise ValueError("no logits today")

    gengraph.register_backend("timed", Raises, call_timeout_s=5)
    engine = gengraph.Engine("gpt2-tiny", backend="timed")
    with pytest.raises(gengraph.Error, match=r"^backend 'timed': prefill\(\) raised ValueError: "
                                             r"no logits today \(at test_time_limits.py:\d+ in "
                                             r"prefill\)$"):
        engine.generate([[1]], max_new_tokens=2)


def test_a_timed_backend_still_conforms():
    gengraph.register_backend("timed", TransformersBackend, call_timeout_s=120)
    report = gengraph.check_backend("timed", models=[str(FIXTURES / "models" / "llama-a")])
    assert report["passed"] and not any(c["skipped"] for c in report["checks"]), report


def test_the_limit_is_checked():
    with pytest.raises(gengraph.ArgumentValueError,
                       match=r"register_backend\('timed'\): call_timeout_s: expected a number of "
                             r"seconds > 0, found 0"):
        gengraph.register_backend("timed", Fixed, call_timeout_s=0)
    with pytest.raises(gengraph.ArgumentValueError, match="expected a finite number, found nan"):
        gengraph.register_backend("timed", Fixed, call_timeout_s=float("nan"))
    with pytest.raises(gengraph.ArgumentTypeError, match="expected a number, found list"):
        gengraph.register_backend("timed", Fixed, call_timeout_s=[1])
    gengraph.register_backend("untimed", Fixed)
    with pytest.raises(gengraph.Error, match=r"^backend 'untimed': option call_timeout_s: "
                                             r"expected a number of seconds > 0, found 'soon'$"):
        gengraph.Engine("gpt2-tiny", backend="untimed", call_timeout_s="soon")

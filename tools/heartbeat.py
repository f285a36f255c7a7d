"""Progress of the Python tools' long work (issue 55): a peer's first install, a model's
conversion, a download. While the work runs, a plain line on standard error every period says what
it is, how long it has run and, when the usual time is known, about how long is left:

    [engine_peer] building llama-cpp-python: 1m30s so far, about 2m30s left

The period is GENGRAPH_PROGRESS_PERIOD_MS (milliseconds; tests shorten it), else 30 s: work shorter
than one period prints nothing. GENGRAPH_PROGRESS=0 (which gengraph's --quiet sets for the tools it
runs) or quiet=True silences it. The C++ side's display is framework/util/progress.h.

    with heartbeat("converting the model", prefix="[fetch_real_model] ", expected_s=60):
        convert(...)
"""
import contextlib
import os
import sys
import threading
import time


def period_s():
    """Seconds between lines: GENGRAPH_PROGRESS_PERIOD_MS when set (1 to 3600000), else 30."""
    text = os.environ.get("GENGRAPH_PROGRESS_PERIOD_MS", "")
    if text.isdigit() and 1 <= int(text) <= 3600000:
        return int(text) / 1000.0
    return 30.0


def duration(seconds):
    """12.3s, 4m05s, 2h10m (as the C++ display writes them)."""
    if seconds < 59.95:  # what rounds to 60.0s reads as 1m00s
        return f"{seconds:.1f}s"
    if round(seconds) < 3600:
        s = round(seconds)
        return f"{s // 60}m{s % 60:02d}s"
    m = round(seconds / 60)
    return f"{m // 60}h{m % 60:02d}m"


def line(what, elapsed, expected_s=0):
    """One progress line's text (without the prefix)."""
    text = f"{what}: {duration(elapsed)} so far"
    if expected_s > 0:
        text += (f", about {duration(expected_s - elapsed)} left" if elapsed < expected_s
                 else f", longer than the usual {duration(expected_s)}")
    return text


@contextlib.contextmanager
def heartbeat(what, prefix="", expected_s=0, quiet=False, stream=None):
    """Prints line(what, ...) to `stream` (standard error) every period_s() while the block runs."""
    if quiet or os.environ.get("GENGRAPH_PROGRESS") == "0":
        yield
        return
    out = stream if stream is not None else sys.stderr
    stop = threading.Event()
    start = time.monotonic()
    period = period_s()

    def beat():
        while not stop.wait(period):
            print(prefix + line(what, time.monotonic() - start, expected_s), file=out, flush=True)

    thread = threading.Thread(target=beat, name="heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()

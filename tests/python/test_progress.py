"""Progress on long work (issue 55): under a pseudo-terminal `gengraph generate` redraws one line
while a long prefill runs and while an aoti package builds; with --quiet, and without a terminal,
there is no display (plain lines instead, only once a period has passed). GENGRAPH_PROGRESS_PERIOD_MS
shortens the period so that a prefill of a second or less shows several updates. One aoti compile
(about a minute) in all: the other aoti cases run a stand-in exporter that only waits."""
import os
import pty
import re
import select
import stat
import subprocess

import pytest
from conftest import BUILD, ROOT

CLEAR = b"\r\x1b[K"
# A random model wide enough that a prefill of 2,000 positions takes a good part of a second.
MODEL = ["--model", "gpt2-tiny", "--set", "model.config.n_positions=2048",
         "--set", "model.config.n_embd=256", "--set", "model.config.n_layer=4"]
LONG_PROMPT = ",".join(str(1 + i % 1000) for i in range(2000))


def run(args, env, terminal):
    """Runs build/gengraph ARGS; standard error on a pseudo-terminal when `terminal`, else a pipe.
    Returns (exit status, standard error's bytes)."""
    env = {**os.environ, **env}
    if not terminal:
        p = subprocess.run([str(BUILD / "gengraph"), *args], env=env, stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=600)
        return p.returncode, p.stderr
    master, slave = pty.openpty()
    p = subprocess.Popen([str(BUILD / "gengraph"), *args], env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    got = b""
    while True:
        ready, _, _ = select.select([master], [], [], 600)
        if not ready:
            p.kill()
            raise AssertionError("no output for 600 s")
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        got += chunk
    os.close(master)
    return p.wait(timeout=600), got


def frames(err, what):
    """The display's drawings of `what` (one per update), as text."""
    return [f for f in err.decode(errors="replace").split("\r\x1b[K") if what in f]


def fast(**more):
    return {"GENGRAPH_PROGRESS_PERIOD_MS": "20", **more}


def test_a_long_prefill_is_shown_on_a_terminal():
    rc, err = run(["generate", *MODEL, "--prompt", LONG_PROMPT, "--max-new-tokens", "8"], fast(),
                  terminal=True)
    assert rc == 0, err.decode(errors="replace")
    shown = frames(err, "generating: ")
    prefill = [f for f in shown if "prefill of 2000 positions" in f]
    assert len(prefill) >= 2, err.decode(errors="replace")
    # It updates: the elapsed time moves on between drawings.
    times = {re.search(r"generating: ([0-9.]+s)", f).group(1) for f in prefill}
    assert len(times) >= 2, prefill
    assert err.count(CLEAR) >= len(shown)  # each drawing replaces the last, and the line is cleared


@pytest.mark.parametrize("terminal", [True, False])
def test_quiet_shows_nothing(terminal):
    rc, err = run(["generate", *MODEL, "--prompt", LONG_PROMPT, "--max-new-tokens", "8",
                   "--quiet"], fast(), terminal=terminal)
    assert rc == 0, err.decode(errors="replace")
    assert CLEAR not in err and b"generating" not in err, err


def test_without_a_terminal_no_display_and_plain_lines_only_after_a_period():
    args = ["generate", *MODEL, "--prompt", LONG_PROMPT, "--max-new-tokens", "8"]
    rc, err = run(args, {}, terminal=False)  # the default period (30 s): nothing
    assert rc == 0, err.decode(errors="replace")
    assert b"\x1b" not in err and b"\r" not in err and b"generating:" not in err, err
    rc, err = run(args, fast(), terminal=False)  # a short period: plain lines
    assert rc == 0, err.decode(errors="replace")
    lines = [ln for ln in err.decode().splitlines() if ln.startswith("generating: ")]
    assert lines and b"\x1b" not in err and b"\r" not in err, err


@pytest.fixture()
def slow_exporter(tmp_path):
    """A stand-in for the tools' Python that waits 1.5 s and fails: an aoti build's time without
    its compile."""
    fake = tmp_path / "slow-python"
    fake.write_text("#!/bin/sh\nsleep 1.5\necho 'stand-in exporter' >&2\nexit 3\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    return {"GENGRAPH_PYTHON": str(fake), "GENGRAPH_AOTI_CACHE": str(tmp_path / "aoti")}


AOTI = ["generate", "--model", "gpt2-tiny", "--backend", "aoti", "--prompt", "1,2,3",
        "--max-new-tokens", "4"]


def test_an_aoti_build_is_shown_on_a_terminal(tmp_path):
    """The one real compile: the package is built into a fresh cache folder."""
    rc, err = run(AOTI, fast(GENGRAPH_AOTI_CACHE=str(tmp_path / "aoti")), terminal=True)
    assert rc == 0, err.decode(errors="replace")
    shown = frames(err, "building the aoti package")
    assert len(shown) >= 2, err.decode(errors="replace")
    times = {re.search(r"package \(export, then compile\): ([0-9.ms]+)", f).group(1)
             for f in shown}
    assert len(times) >= 2, shown
    # The build recorded its time: the next build's display has an estimate from it.
    assert list((tmp_path / "aoti").glob("*.pt2.build.json"))


def test_an_aoti_build_estimate_comes_from_earlier_builds(tmp_path, slow_exporter):
    cache = tmp_path / "aoti"
    cache.mkdir()
    (cache / "earlier.pt2.build.json").write_text(
        '{"export_seconds": 20, "compile_seconds": 40, "sha256": "0"}')
    rc, err = run(AOTI, fast(**slow_exporter), terminal=True)
    assert rc == 1 and b"stand-in exporter" in err, err
    shown = frames(err, "building the aoti package")
    assert len(shown) >= 2 and all("left" in f for f in shown), shown


@pytest.mark.parametrize("terminal", [True, False])
def test_an_aoti_build_with_quiet_shows_nothing(slow_exporter, terminal):
    rc, err = run(AOTI + ["--quiet"], fast(**slow_exporter), terminal=terminal)
    assert rc == 1 and b"stand-in exporter" in err, err
    assert CLEAR not in err and b"building the aoti package" not in err, err


def test_an_aoti_build_without_a_terminal_has_no_display(slow_exporter):
    rc, err = run(AOTI, slow_exporter, terminal=False)  # the default period: nothing
    assert rc == 1 and b"stand-in exporter" in err, err
    assert b"\x1b" not in err and b"building the aoti package" not in err, err
    rc, err = run(AOTI, fast(**slow_exporter), terminal=False)
    assert rc == 1, err
    assert b"\x1b" not in err and b"\r" not in err, err
    assert re.search(rb"^building the aoti package \(export, then compile\): ", err, re.M), err


def test_the_python_tools_heartbeat(monkeypatch, capsys):
    import sys
    import time
    sys.path.insert(0, str(ROOT / "tools"))
    from heartbeat import heartbeat
    monkeypatch.setenv("GENGRAPH_PROGRESS_PERIOD_MS", "20")
    with heartbeat("converting", prefix="[t] ", expected_s=60):
        time.sleep(0.2)
    said = capsys.readouterr().err.splitlines()
    assert len(said) >= 2 and all(re.match(r"\[t\] converting: [0-9.]+s so far, about", s)
                                  for s in said), said
    monkeypatch.setenv("GENGRAPH_PROGRESS", "0")  # what gengraph's --quiet sets for its tools
    with heartbeat("converting"):
        time.sleep(0.1)
    assert capsys.readouterr().err == ""

"""docs/python.md's walk-through runs: every ```python block, in order, in one namespace (a block
starting with `# needs: smollm2-135m` only where the real model is set up)."""
import contextlib
import io
import re

import pytest

from conftest import ROOT, real_model_ready

BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


def blocks():
    return BLOCK.findall((ROOT / "docs" / "python.md").read_text())


def test_the_walk_through_has_blocks():
    assert len(blocks()) >= 8


def test_the_walk_through_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "walkthrough"}
    ran = 0
    for i, code in enumerate(blocks()):
        if code.startswith("# needs: smollm2-135m") and not real_model_ready():
            continue
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                exec(compile(code, f"docs/python.md block {i}", "exec"), namespace)
            except Exception as e:  # name the block that failed
                pytest.fail(f"docs/python.md block {i} raised {type(e).__name__}: {e}\n{code}")
        ran += 1
    assert ran >= len(blocks()) - 1

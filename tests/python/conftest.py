"""Shared set-up of the Python package's tests (CTest python_package runs them with the build's
package on PYTHONPATH and GENGRAPH_BUILD_DIR naming the build tree)."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("GENGRAPH_BUILD_DIR", ROOT / "build"))
FIXTURES = ROOT / "tests" / "fixtures"
sys.path.insert(0, str(ROOT / "python" / "examples"))


def cli(*args, check=True):
    """Runs build/gengraph with `args`; returns the completed process."""
    p = subprocess.run([str(BUILD / "gengraph"), *map(str, args)], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise AssertionError(f"gengraph {' '.join(map(str, args))}: exit {p.returncode}\n{p.stderr}")
    return p


def cli_outputs(tmp_path, *args):
    """The token ids `gengraph generate ARGS` writes to its results: per input, per sequence."""
    out = tmp_path / "cli.json"
    cli("generate", *args, "--quiet", "--output", out)
    doc = json.loads(out.read_text())
    return [[s["tokens"] for s in o["sequences"]] for o in doc["runs"][0]["outputs"]], doc


def real_model_ready():
    import gengraph
    return any(m["name"] == "smollm2-135m" and m["ready"] for m in gengraph.models())


@pytest.fixture(scope="session")
def parity_cases():
    return json.loads((FIXTURES / "hf_generate.json").read_text())

#!/usr/bin/env python3
"""Every tensor of a GGUF file dequantized by gengraph (GgufFile::to_float) against gguf-py's
reference dequantization (gguf.quants.dequantize, llama.cpp's own Python package), bit for bit.
Opt-in: it needs the file; tests/framework/model/test_gguf.cpp covers each type on a fixture.

    .venv/bin/python tools/gguf_dequant_parity.py FILE.gguf [--build build] [--output REPORT.txt]

gengraph's side runs in the test binary (GgufOnFile.HashesEveryTensorItIsGiven, skipped unless this
script sets GENGRAPH_GGUF_DEQUANT): the SHA-256 of each tensor's float32 values. This script hashes
gguf-py's float32 values of the same tensors and reports, per type, how many tensors are equal.
Exit 0 when all are, else 1.
"""
import argparse
import collections
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def gengraph_hashes(path, build):
    binary = os.path.join(build, "tests", "gengraph_tests")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.json")
        env = dict(os.environ, GENGRAPH_GGUF_DEQUANT=os.path.abspath(path),
                   GENGRAPH_GGUF_DEQUANT_OUT=out)
        r = subprocess.run([binary, "--gtest_filter=GgufOnFile.HashesEveryTensorItIsGiven"], env=env,
                           capture_output=True, text=True)
        if r.returncode != 0 or not os.path.exists(out):
            sys.exit(f"gengraph's side failed ({binary}):\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
        with open(out) as f:
            return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("gguf")
    ap.add_argument("--build", default=os.environ.get("GENGRAPH_BUILD_DIR", os.path.join(ROOT, "build")))
    ap.add_argument("--output")
    a = ap.parse_args()
    import gguf
    ours = gengraph_hashes(a.gguf, a.build)
    reader = gguf.GGUFReader(a.gguf)
    per_type = collections.defaultdict(lambda: [0, 0])
    lines = [f"$ tools/gguf_dequant_parity.py {' '.join(sys.argv[1:])}"]
    for t in reader.tensors:
        kind = t.tensor_type.name
        values = np.ascontiguousarray(gguf.quants.dequantize(t.data, t.tensor_type), np.float32)
        shape = [int(d) for d in reversed(t.shape)]  # GGUF lists the innermost dimension first
        digest = hashlib.sha256(values.tobytes()).hexdigest()
        got = ours.get(t.name)
        per_type[kind][1] += 1
        if got is None:
            lines.append(f"  {t.name} ({kind}): gengraph did not read it")
        elif got["shape"] != shape or list(values.shape) != shape:
            lines.append(f"  {t.name} ({kind}): shape {got['shape']} vs gguf-py {list(values.shape)}")
        elif got["sha256"] != digest:
            lines.append(f"  {t.name} ({kind}): values differ")
        else:
            per_type[kind][0] += 1
    equal = sum(v[0] for v in per_type.values())
    total = sum(v[1] for v in per_type.values())
    with open(a.gguf, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    lines.append(f"file: {os.path.basename(a.gguf)}, SHA-256 {digest}")
    lines.append(f"{total} tensors; bit-equal to gguf-py: "
                 + ", ".join(f"{k} {v[0]}/{v[1]}" for k, v in sorted(per_type.items())))
    lines.append(f"RESULT: {equal} of {total} tensors equal")
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if a.output:
        with open(a.output, "w") as f:
            f.write(text)
    return 0 if equal == total and len(ours) == total else 1


if __name__ == "__main__":
    sys.exit(main())

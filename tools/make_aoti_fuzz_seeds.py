#!/usr/bin/env python3
"""Seeds for the aoti_package fuzz target (tests/fuzz/corpus/aoti_package/): a package as
tools/export_aoti.py lays it out (stored zip entries, AOTInductor metadata, gengraph's manifest of
SHA-256 sums) around a tiny ELF shared library compiled here, small enough for libFuzzer's
64 KB inputs, and damaged neighbours of it. Run once; the seeds are committed.
Usage: tools/make_aoti_fuzz_seeds.py OUT_DIR"""
import hashlib
import io
import json
import os
import subprocess
import sys
import tempfile
import zipfile

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
with tempfile.TemporaryDirectory() as tmp:
    src = os.path.join(tmp, "m.c")
    with open(src, "w") as f:
        f.write("int aoti_seed(int x) { return x + 1; }\n")
    so_path = os.path.join(tmp, "m.so")
    subprocess.run(["cc", "-shared", "-fPIC", "-nostdlib", "-s", "-O2", "-o", so_path, src],
                   check=True)
    so = open(so_path, "rb").read()

meta = {"gengraph.format": "2", "gengraph.model_type": "gpt2", "gengraph.model_fingerprint": "1",
        "gengraph.layers": "2", "gengraph.kv_heads": "4", "gengraph.head_dim": "16",
        "gengraph.vocab_size": "1024", "gengraph.dtype": "float32", "gengraph.device": "cpu",
        "gengraph.max_rows": "1024", "gengraph.context": "256", "gengraph.freezing": "False",
        "gengraph.torch_version": "2.11.0", "gengraph.made_by": "tools/make_aoti_fuzz_seeds.py",
        "AOTI_DEVICE_KEY": "cpu"}


def package(entries, manifest=True, compress=()):
    """entries: name -> bytes, under the package's root folder 'pkg/'."""
    files = {"pkg/" + k: v for k, v in entries.items()}
    if manifest:
        sums = {k: hashlib.sha256(v).hexdigest() for k, v in files.items()}
        files["pkg/gengraph/manifest.json"] = json.dumps({"format": 1, "sha256": sums}).encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for k, v in files.items():
            kind = zipfile.ZIP_DEFLATED if any(k.endswith(c) for c in compress) else zipfile.ZIP_STORED
            z.writestr(zipfile.ZipInfo(k), v, compress_type=kind)
    return buf.getvalue()


base = {"data/aotinductor/model/m.wrapper.so": so,
        "data/aotinductor/model/m.wrapper.cpp": b"// the program's source\n",
        "data/aotinductor/model/m.wrapper_metadata.json": json.dumps(meta).encode(),
        "archive_format": b"pt2", "archive_version": b"0", "byteorder": b"little",
        ".data/version": b"6\n"}
seeds = {"valid": package(base)}
seeds["no_manifest"] = package(base, manifest=False)
valid = seeds["valid"]
seeds["truncated_half"] = valid[: len(valid) // 2]
seeds["truncated_directory"] = valid[:-10]
so_at = valid.find(so[:64])
damaged = bytearray(valid)
damaged[so_at + 200: so_at + 232] = b"\xff" * 32  # inside the .so: the manifest sum differs
seeds["so_bytes_changed"] = bytes(damaged)
short = dict(base)
short["data/aotinductor/model/m.wrapper.so"] = so[: len(so) // 3]
seeds["so_truncated_in_zip"] = package(short, manifest=False)
seeds["so_compressed"] = package(base, compress=(".so",))
escape = dict(base)
escape["../outside.so"] = so
seeds["entry_outside_package"] = package(escape, manifest=False)
bad_meta = dict(base)
bad_meta["data/aotinductor/model/m.wrapper_metadata.json"] = b'{"gengraph.layers": 2}'
seeds["metadata_not_strings"] = package(bad_meta)
seeds["not_a_zip"] = so
for name, data in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
    print(name, len(data))

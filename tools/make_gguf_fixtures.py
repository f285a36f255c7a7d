#!/usr/bin/env python3
"""Regenerates the GGUF reader's fixtures with llama.cpp's own Python package (gguf-py).

    .venv/bin/python tools/make_gguf_fixtures.py            # rewrite the files below
    .venv/bin/python tools/make_gguf_fixtures.py --check    # regenerate in a temp dir and compare

tests/fixtures/gguf/
  quants.gguf           written by gguf.GGUFWriter: metadata of every value type, and one tensor of
                        each type gengraph reads (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K,
                        Q6_K, Q5_0, Q5_1). F16/F32/BF16/Q8_0/Q4_0/Q4_1/Q5_0/Q5_1 hold random normal
                        values quantized by gguf.quants.quantize; the K-quants (gguf-py has no quantizer for them) hold
                        random bytes with finite fp16 scales.
  reference.safetensors the same tensors in float32 as gguf.quants.dequantize gives them (llama.cpp's
                        reference dequantization), under the same names; the C++ test
                        (tests/framework/model/test_gguf.cpp) compares GgufFile::to_float to these
                        bit for bit.
tests/fuzz/corpus/gguf_file/
  seed_valid            a smaller file of the same kinds, the fuzz target's seed
  seed_truncated        its first half

Never edit the outputs by hand. --check exits non-zero when the committed files differ from what
the pinned gguf-py and numpy produce.
"""
import argparse
import filecmp
import os
import sys
import tempfile

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V
from safetensors.numpy import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join("tests", "fixtures", "gguf")
CORPUS = os.path.join("tests", "fuzz", "corpus", "gguf_file")
OUTPUTS = [os.path.join(FIXTURES, "quants.gguf"), os.path.join(FIXTURES, "reference.safetensors"),
           os.path.join(CORPUS, "seed_valid"), os.path.join(CORPUS, "seed_truncated")]

# Byte offsets of the fp16 fields in each K-quant block (ggml's block_q4_K, block_q5_K, block_q6_K).
K_SCALES = {Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,)}


def special_values():
    """Values the float conversions must carry exactly: zeros, infinities, subnormals, extremes."""
    return np.array([0.0, -0.0, np.inf, -np.inf, 6.0e-8, -6.0e-8, 1.0e-5, 65504.0, -65504.0,
                     1.0, -1.0, 0.5, 3.0e38, -1.0e-40, 2.0, 0.1], dtype=np.float32)


def make_tensor(rng, qtype, rows, cols):
    """The stored form of a (rows, cols) tensor of type qtype: what GGUFWriter.add_tensor takes."""
    data = rng.standard_normal((rows, cols)).astype(np.float32)
    if qtype == Q.F32:
        data.flat[:16] = special_values()
        return data
    if qtype == Q.F16:
        data.flat[:16] = special_values()
        with np.errstate(over="ignore"):  # 3e38 becomes inf, as intended
            return gguf.quants.quantize(data, Q.F16)
    if qtype == Q.BF16:
        data.flat[:16] = special_values()
        data.flat[16] = np.nan
    if qtype in (Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1):
        return gguf.quants.quantize(data, qtype)
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(rows * cols // block, size), dtype=np.uint8)
    for off in K_SCALES[qtype]:
        # Finite scales across the fp16 range: small, ordinary and a few subnormal.
        scale = (rng.standard_normal(raw.shape[0]) * 10.0 ** rng.integers(-6, 2, raw.shape[0]))
        raw[:, off:off + 2] = scale.astype(np.float16).view(np.uint8).reshape(-1, 2)
    return raw.reshape(rows, cols // block * size)


def write(out_dir, rows, extra_metadata):
    """quants-like GGUF file and its float32 reference into out_dir; returns their paths."""
    rng = np.random.default_rng(20261206 + rows)
    path = os.path.join(out_dir, "quants.gguf")
    w = gguf.GGUFWriter(path, "llama")
    if extra_metadata:
        w.add_uint8("test.u8", 200)
        w.add_int8("test.i8", -100)
        w.add_uint16("test.u16", 60000)
        w.add_int16("test.i16", -30000)
        w.add_uint32("test.u32", 4000000000)
        w.add_int32("test.i32", -2000000000)
        w.add_float32("test.f32", 0.1)
        w.add_uint64("test.u64", 2 ** 64 - 1)
        w.add_int64("test.i64", -(2 ** 62))
        w.add_float64("test.f64", 0.1)
        w.add_bool("test.bool", True)
        w.add_string("test.string", "caf\u00e9 \U0001F600")
        w.add_array("test.strings", ["a", "", "\u00e9\u00e8"])
        w.add_key_value("test.u64s", [1, 2 ** 63 + 5], V.ARRAY, sub_type=V.UINT64)
        w.add_key_value("test.i16s", [-1, 2, -3], V.ARRAY, sub_type=V.INT16)
        w.add_key_value("test.f64s", [0.25, -1.5], V.ARRAY, sub_type=V.FLOAT64)
        w.add_array("test.f32s", [0.5, -2.0, 0.1])
        w.add_array("test.bools", [True, False, True])
        w.add_uint32("llama.block_count", 2)
    reference = {}
    types = [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.Q5_0, Q.Q5_1]
    for qtype in types:
        name = qtype.name.lower()
        stored = make_tensor(rng, qtype, rows, 512)
        w.add_tensor(name, stored, raw_dtype=None if qtype in (Q.F32, Q.F16) else qtype)
        reference[name] = np.ascontiguousarray(gguf.quants.dequantize(stored, qtype), np.float32)
    # A three-dimensional tensor: GGUF stores its dimensions innermost first.
    cube = rng.standard_normal((2, 3, 32)).astype(np.float32)
    w.add_tensor("cube", cube)
    reference["cube"] = cube
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    ref_path = os.path.join(out_dir, "reference.safetensors")
    save_file(reference, ref_path)
    # Read back with gguf-py's own reader: the file is what it expects.
    r = gguf.GGUFReader(path)
    assert len(r.tensors) == len(types) + 1
    return path, ref_path


def generate(root):
    os.makedirs(os.path.join(root, FIXTURES), exist_ok=True)
    os.makedirs(os.path.join(root, CORPUS), exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        big = os.path.join(tmp, "big")
        small = os.path.join(tmp, "small")
        os.makedirs(big)
        os.makedirs(small)
        g, ref = write(big, 3, True)
        os.replace(g, os.path.join(root, OUTPUTS[0]))
        os.replace(ref, os.path.join(root, OUTPUTS[1]))
        g, _ = write(small, 1, True)
        with open(g, "rb") as f:
            seed = f.read()
    with open(os.path.join(root, OUTPUTS[2]), "wb") as f:
        f.write(seed)
    with open(os.path.join(root, OUTPUTS[3]), "wb") as f:
        f.write(seed[:len(seed) // 2])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true",
                    help="regenerate in a temporary folder and compare with the committed files")
    args = ap.parse_args()
    if not args.check:
        generate(ROOT)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        generate(tmp)
        differ = [p for p in OUTPUTS
                  if not os.path.exists(os.path.join(ROOT, p))
                  or not filecmp.cmp(os.path.join(tmp, p), os.path.join(ROOT, p), shallow=False)]
    for p in differ:
        print(f"{p}: differs from what tools/make_gguf_fixtures.py produces", file=sys.stderr)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())

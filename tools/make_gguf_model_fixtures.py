#!/usr/bin/env python3
"""GGUF model fixtures: small random-weight models written as GGUF files by llama.cpp's own
converter and quantizer, with what the pinned transformers computes on each file.

For each architecture below, a Hugging Face model with random weights (seeded) is saved, converted
by the converter vendored in the llama-cpp-python sdist (convert_hf_to_gguf.py, float32, no
vocabulary) and quantized by llama.cpp's llama_model_quantize (Q8_0, Q4_0, Q4_1): the way people
make the GGUF files they hold. transformers then loads each GGUF file itself (from_pretrained with
gguf_file: its own reading, undoing the converter's permutations and dequantizing; on the float32
file it must give the source model's logits, else the script stops) and its float32 logits on a fixed prompt, at every position, are the oracle the C++ test
(tests/framework/model/test_gguf_model.cpp) holds gengraph's GGUF loading to.

    .venv/bin/python tools/make_gguf_model_fixtures.py          # rewrite tests/fixtures/gguf/models/
    .venv/bin/python tools/make_gguf_model_fixtures.py --check  # regenerate aside and compare

Writes <arch>-<type>.gguf and expected.safetensors (tensor "<arch>-<type>": logits [1, T, vocab];
"prompt": the ids) and manifest.json. Needs llama-cpp-python built in gengraph's peers cache (a
llama_cpp row of any experiment builds it; tools/peer_llama_cpp.py). Never edit the output by hand.
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

TOOLS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TOOLS)
OUT = os.path.join(ROOT, "tests", "fixtures", "gguf", "models")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

PROMPT = [1, 5, 9, 100, 17, 3, 64, 2]
TYPES = ["f32", "q8_0", "q4_0", "q4_1"]


def configs():
    from transformers import Gemma3TextConfig, GPT2Config, LlamaConfig, Qwen2Config
    return {
        # SmolLM2's layout in small: grouped-query attention, a tied head.
        "llama": LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                             rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True,
                             bos_token_id=1, eos_token_id=2),
        "gpt2": GPT2Config(vocab_size=128, n_positions=64, n_ctx=64, n_embd=64, n_layer=2, n_head=4, bos_token_id=1,
                           eos_token_id=2),
        "qwen2": Qwen2Config(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                             rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False,
                             bos_token_id=1, eos_token_id=2),
        # Gemma 3 as a GGUF file says it: five sliding layers of six (the pattern llama.cpp and
        # transformers both assume for a file), the attention scaled by the head size (256, which
        # is also transformers' default query_pre_attn_scalar), local rope base 10000. The window
        # (4) is shorter than the prompt, so it matters.
        "gemma3": Gemma3TextConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=6,
                                   num_attention_heads=2, num_key_value_heads=1, head_dim=256,
                                   query_pre_attn_scalar=256, sliding_window=4, max_position_embeddings=128,
                                   rms_norm_eps=1e-6, bos_token_id=2, eos_token_id=1, pad_token_id=0),
    }


def perturb_norms(model):
    """Gemma's norms start at zero (it scales by 1 + weight); random ones make the converter's +1 and
    the reader's -1 matter."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(torch.randn_like(p) * 0.1)


def vocab_stub(folder, vocab_size):
    """llama.cpp's Gemma 3 converter counts the vocabulary in tokenizer.json even with --no-vocab;
    a word-level one of the model's size answers it (the GGUF file gets no vocabulary)."""
    vocab = {f"t{i}": i for i in range(vocab_size)}
    with open(os.path.join(folder, "tokenizer.json"), "w") as f:
        json.dump({"version": "1.0", "added_tokens": [], "model": {"type": "WordLevel", "vocab": vocab,
                                                                    "unk_token": "t0"}}, f)


def llama_cpp_dirs():
    base = os.environ.get("GENGRAPH_CACHE", os.path.expanduser("~/.cache/gengraph"))
    found = sorted(glob.glob(os.path.join(base, "peers", "llama-cpp-python-0.3.36-py*")))
    found = [d for d in found if os.path.isdir(os.path.join(d, "llama.cpp")) and os.path.isdir(os.path.join(d, "site"))]
    if not found:
        sys.exit("make_gguf_model_fixtures: llama-cpp-python is not built in the peers cache "
                 f"({base}/peers); run an experiment with a llama_cpp peer first")
    return os.path.join(found[-1], "llama.cpp"), os.path.join(found[-1], "site")


def main():
    import argparse
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true",
                    help="regenerate in a temporary folder and compare with the committed fixtures byte for byte")
    a = ap.parse_args()
    if a.check:
        aside = tempfile.mkdtemp(prefix="gguf-fixtures-check-")
        try:
            generate(os.path.join(aside, "models"))
            return compare(os.path.join(aside, "models"), OUT)
        finally:
            shutil.rmtree(aside, ignore_errors=True)
    generate(OUT)
    print(f"wrote {OUT}")
    return 0


def compare(fresh, committed):
    """0 when both folders hold the same files with the same bytes; else names what differs."""
    import filecmp
    names = sorted(set(os.listdir(fresh)) | set(os.listdir(committed)))
    bad = [n for n in names if not (os.path.isfile(os.path.join(fresh, n)) and os.path.isfile(os.path.join(committed, n))
                                    and filecmp.cmp(os.path.join(fresh, n), os.path.join(committed, n), shallow=False))]
    for n in bad:
        print(f"make_gguf_model_fixtures --check: {n} differs from what the pinned versions produce", file=sys.stderr)
    if not bad:
        print(f"make_gguf_model_fixtures --check: the {len(names)} files in {committed} are reproduced exactly")
    return 1 if bad else 0


def generate(dest):
    from transformers import AutoModelForCausalLM
    llama_dir, site = llama_cpp_dirs()
    peer = os.path.join(TOOLS, "peer_llama_cpp.py")
    tmp = tempfile.mkdtemp(prefix="gguf-fixtures-")
    out_tmp = dest + ".tmp"
    shutil.rmtree(out_tmp, ignore_errors=True)
    os.makedirs(out_tmp)
    expected, manifest = {"prompt": torch.tensor(PROMPT, dtype=torch.int64)}, {}
    try:
        for arch, cfg in configs().items():
            torch.manual_seed(0)
            folder = os.path.join(tmp, arch)
            source = AutoModelForCausalLM.from_config(cfg).eval()
            if arch == "gemma3":
                perturb_norms(source)
            source.save_pretrained(folder)
            if arch == "gemma3":
                vocab_stub(folder, cfg.vocab_size)
            with torch.no_grad():
                source_logits = source(torch.tensor([PROMPT])).logits
            f32 = os.path.join(out_tmp, f"{arch}-f32.gguf")
            subprocess.run([sys.executable, peer, "convert", "--llama-dir", llama_dir, "--model", folder,
                            "--out", f32, "--outtype", "f32", "--no-vocab"], check=True, capture_output=True)
            for t in TYPES[1:]:
                subprocess.run([sys.executable, "-c", QUANTIZE, site, f32, os.path.join(out_tmp, f"{arch}-{t}.gguf"), t],
                               check=True, capture_output=True)
            for t in TYPES:
                name = f"{arch}-{t}.gguf"
                model = AutoModelForCausalLM.from_pretrained(out_tmp, gguf_file=name, dtype=torch.float32).eval()
                with torch.no_grad():
                    logits = model(torch.tensor([PROMPT])).logits
                if t == "f32" and not torch.allclose(logits, source_logits, rtol=0, atol=1e-5):
                    sys.exit(f"make_gguf_model_fixtures: transformers reads {name} with logits "
                             f"{(logits - source_logits).abs().max().item():.3g} away from the model it was "
                             "converted from; the oracle would be wrong")
                expected[f"{arch}-{t}"] = logits.contiguous()
                manifest[name] = {"architecture": arch, "type": t, "transformers_class": type(model).__name__}
        save_file(expected, os.path.join(out_tmp, "expected.safetensors"))
        import transformers
        with open(os.path.join(out_tmp, "manifest.json"), "w") as f:
            json.dump({"transformers": transformers.__version__, "llama_cpp_python": "0.3.36",
                       "prompt": PROMPT, "files": manifest}, f, indent=1, sort_keys=True)
            f.write("\n")
        shutil.rmtree(dest, ignore_errors=True)
        os.rename(out_tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(out_tmp, ignore_errors=True)


# llama.cpp's quantizer (a child process: the bindings load their shared library).
QUANTIZE = """
import ctypes, sys
sys.path.append(sys.argv[1])
import llama_cpp as L
p = L.llama_model_quantize_default_params()
p.ftype = {"q8_0": L.LLAMA_FTYPE_MOSTLY_Q8_0, "q4_0": L.LLAMA_FTYPE_MOSTLY_Q4_0,
           "q4_1": L.LLAMA_FTYPE_MOSTLY_Q4_1}[sys.argv[4]]
p.nthread = 1
rc = L.llama_model_quantize(sys.argv[2].encode(), sys.argv[3].encode(), ctypes.byref(p))
sys.exit(f"llama_model_quantize failed with {rc}" if rc else 0)
"""

if __name__ == "__main__":
    sys.exit(main())

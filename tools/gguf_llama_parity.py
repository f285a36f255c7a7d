#!/usr/bin/env python3
"""Where gengraph's greedy tokens on a GGUF file part from llama.cpp's on the same file, and the
margin between the two best choices there (docs/gguf.md#beside-llamacpp).

    gguf_llama_parity.py --gguf FILE --llama LLAMA.json [--output OUT.json]

LLAMA.json is tools/llama_cpp_perplexity.py's output for the same file: its prompts' ids (llama.cpp's
tokenization) and llama.cpp's greedy tokens with its first-to-second logit margin at each step.
gengraph (the Python package over the build) generates greedily from the very same ids, as many
tokens, with top_logprobs=2: its margin is the difference of its two best log-probabilities (the
logit difference). For each prompt: the tokens in common, and where they part, both engines'
choices and margins there. Two engines that compute the same model in different arithmetic
(llama.cpp multiplies Q4_1 weights by activations quantized to 8 bits; gengraph by float32
activations) may part only where the two best choices are nearly tied.
"""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_cpp_perplexity import emit  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--llama", required=True)
    ap.add_argument("--output")
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(os.environ.get("GENGRAPH_BUILD_DIR", os.path.join(ROOT, "build")), "python"))
    import gengraph
    llama = json.load(open(a.llama))
    engine = gengraph.Engine(a.gguf)
    rows = []
    for g in llama["greedy"]:
        n = len(g["tokens"])
        # No min_new_tokens: it would ban EOS, which llama.cpp's argmax may choose; a generation
        # that ends at EOS is compared up to there.
        out = engine.generate([g["prompt_ids"]], max_new_tokens=n, do_sample=False, top_logprobs=2)
        seq = out.outputs[0][0]
        ours = list(seq.tokens)
        tops = seq.top_logprobs
        common = next((i for i, (x, y) in enumerate(zip(ours, g["tokens"])) if x != y), len(ours))
        row = {"prompt_ids": g["prompt_ids"], "common_prefix": common, "of": len(ours),
               "ended_at_eos": len(ours) < n}
        if common < len(ours):
            row.update({"gengraph": {"token": ours[common], "margin": tops[common][0][1] - tops[common][1][1]},
                        "llama.cpp": {"token": g["tokens"][common], "margin": g["top2_logit_margin"][common]}})
        rows.append(row)
    doc = {"gguf": a.gguf, "llama": a.llama, "prompts": rows}
    emit(doc, a.output)


if __name__ == "__main__":
    main()

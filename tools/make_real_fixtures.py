#!/usr/bin/env python3
"""Parity fixtures on the set-up's real model (smollm2-135m, SmolLM2-135M-Instruct converted by
tools/fetch_real_model.py into a Hugging Face folder under gengraph's cache).

Records, for the C++ test tests/parity/test_real_model.cpp, what the pinned transformers does on
that folder on CPU in float32 (sdpa attention, as tools/make_fixtures.py): the model's identity
(gengraph_model.json's name and wheel_sha256), three English prompts as text and as the ids of
AutoTokenizer on the folder (tok(text)), and generate() over the three prompts left-padded as one
ragged batch for greedy search, beam search, seeded sampling and greedy search through logits
processors, with the decoded text of every expected sequence (tok.decode, special tokens kept).
The generation itself is make_fixtures.py's run_case. Never edit the output by hand: run

    .venv/bin/python tools/make_real_fixtures.py            # rewrite tests/fixtures/real/smollm2-135m.json
    .venv/bin/python tools/make_real_fixtures.py --check    # regenerate in a temp dir and compare

--check exits 1 when the committed file differs from what the pinned versions produce on the
folder (scores within REAL_SCORE_TOLERANCE, below; all else exactly). Both modes exit
77 (a skip for CTest) when the real model is not set up here, saying why.
"""
import argparse
import json
import os
import re
import sys
import tempfile

TOOLS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TOOLS)
sys.path.insert(0, TOOLS)

# make_fixtures sets the environment (one thread, offline, quiet) before importing transformers.
from make_fixtures import json_difference, load_for_oracle, run_case  # noqa: E402

import torch  # noqa: E402

# The real model's scores are log-probabilities through 30 float32 layers, and another CPU's
# kernels round them differently: transformers' own scores on other CPUs came out a few 1e-5 apart
# from the committed file's (docs/results/measurements-from-comments.md). The check holds
# them within 5e-5 relative (absolute below 1): 10x tighter than the parity tests that read these
# scores (5e-4, tests/parity/test_real_model.cpp); tokens and everything else exactly.
REAL_SCORE_TOLERANCE = 5e-5
import transformers  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

NAME = "smollm2-135m"
DEFAULT_OUT = os.path.join(ROOT, "tests", "fixtures", "real", NAME + ".json")
SKIP = 77

# Three lengths: a short one, a sentence, a paragraph (the ids are what the tokenizer makes).
PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    "Photosynthesis is the process by which green plants use sunlight, water and carbon dioxide "
    "to make their own food. It takes place mainly in the leaves, inside small structures called "
    "chloroplasts. In simple words, photosynthesis means that",
]

CASES = [
    {"name": "greedy", "generation": {"max_new_tokens": 24}},
    {"name": "beam_search",
     "generation": {"max_new_tokens": 16, "num_beams": 4, "num_return_sequences": 2}},
    {"name": "sampling", "seed": 1234,
     "generation": {"max_new_tokens": 24, "do_sample": True, "temperature": 0.8, "top_k": 50,
                    "top_p": 0.9}},
    {"name": "processors",
     "generation": {"max_new_tokens": 24, "repetition_penalty": 1.3, "no_repeat_ngram_size": 3}},
]


def cache_dir():
    env = os.environ.get("GENGRAPH_CACHE")
    return env if env else os.path.join(os.path.expanduser("~"), ".cache", "gengraph")


def model_folder():
    """The folder of the real model, or exits 77 saying why it is not set up here."""
    from real_model_cache import check  # noqa: E402  (standard library only)
    models = os.path.join(cache_dir(), "models")
    link = os.path.join(models, NAME)
    state, where, fault = check(models) if os.path.isdir(models) else ("missing", link, None)
    if state == "ok":  # the link, the marker and every file as the conversion wrote them
        return where
    if fault:
        print(f"make_real_fixtures: the real model {NAME} in '{where}' is not what the set-up "
              f"made: {fault} (run scripts/setup.sh, or .venv/bin/python "
              "tools/fetch_real_model.py, to convert it again)", file=sys.stderr)
        sys.exit(SKIP)
    why = ""
    unavailable = link + ".unavailable"
    if os.path.isfile(unavailable):
        with open(unavailable, errors="replace") as f:
            why = f.read().strip()
    print(f"make_real_fixtures: the real model {NAME} is not set up: no model folder at '{link}'"
          + (f"; the set-up said: {why}" if why else "")
          + " (run scripts/setup.sh, or .venv/bin/python tools/fetch_real_model.py)", file=sys.stderr)
    sys.exit(SKIP)


def identity(folder):
    path = os.path.join(folder, "gengraph_model.json")
    with open(path) as f:
        marker = json.load(f)
    for key in ("name", "wheel_sha256"):
        if not isinstance(marker.get(key), str) or not marker[key]:
            sys.exit(f"make_real_fixtures: {path}: expected a non-empty string at '{key}', "
                     f"found {marker.get(key)!r}")
    if marker["name"] != NAME:
        sys.exit(f"make_real_fixtures: {path}: name is {marker['name']!r}, expected {NAME!r}")
    return {"name": marker["name"], "wheel_sha256": marker["wheel_sha256"],
            "source": marker.get("source", "")}


def generate(folder):
    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(folder)
    prompts = [{"text": t, "ids": tok(t)["input_ids"]} for t in PROMPTS]
    ids = [p["ids"] for p in prompts]
    model = load_for_oracle(folder)
    records = []
    for c in CASES:
        rec = run_case(model, {"name": c["name"], "model": NAME, "prompts": ids,
                               "generation": dict(c["generation"]), "seed": c.get("seed", 0)},
                       folder)
        del rec["prompts"]  # the document's prompts, once
        for per_input in rec["expected"]:
            for hyp in per_input:
                hyp["text"] = tok.decode(hyp["tokens"], skip_special_tokens=False)
        records.append(rec)
    return {"model": identity(folder), "transformers_version": transformers.__version__,
            "torch_version": torch.__version__.split("+")[0], "dtype": "float32",
            "attn_implementation": "sdpa", "prompts": prompts, "cases": records}


def write_json(doc, path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=os.path.dirname(path))
    try:
        text = json.dumps(doc, indent=1, ensure_ascii=False)
        # Token lists on one line each: a file to read, and diffs of a line per sequence.
        text = re.sub(r"\[\s*(-?\d+(?:,\s*-?\d+)*)\s*\]",
                      lambda m: "[" + ", ".join(re.split(r",\s*", m.group(1))) + "]", text)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text + "\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=DEFAULT_OUT, help="fixture file (default %(default)s)")
    ap.add_argument("--check", action="store_true", help="regenerate into a temp dir and compare")
    args = ap.parse_args()
    if transformers.__version__ != "5.17.0":
        sys.exit(f"make_real_fixtures: transformers {transformers.__version__} found; "
                 "fixtures are pinned to 5.17.0")
    folder = model_folder()
    if not args.check:
        doc = generate(folder)
        write_json(doc, args.out)
        print(f"wrote {len(doc['cases'])} cases on {NAME} to {args.out}")
        return
    if not os.path.isfile(args.out):
        sys.exit(f"make_real_fixtures: '{args.out}' does not exist; run tools/make_real_fixtures.py")
    with open(args.out) as f:
        committed = json.load(f)
    with tempfile.TemporaryDirectory() as tmp:
        fresh_path = os.path.join(tmp, NAME + ".json")
        write_json(generate(folder), fresh_path)
        with open(fresh_path) as f:
            fresh = json.load(f)  # as written: floats rounded the way the committed file was
    have = fresh["model"]["wheel_sha256"]
    want = committed.get("model", {}).get("wheel_sha256")
    if have != want:
        print(f"real fixtures are NOT from this model: '{args.out}' records wheel_sha256 {want}, "
              f"the folder '{folder}' has {have}; regenerate with "
              ".venv/bin/python tools/make_real_fixtures.py")
        sys.exit(1)
    found, worst = json_difference(fresh, committed, tolerance=REAL_SCORE_TOLERANCE)
    if found:
        print("real fixtures are NOT reproducible from tools/make_real_fixtures.py:", found, sep="\n  ")
        sys.exit(1)
    print(f"real fixtures reproducible: {len(fresh['cases'])} cases on {NAME} match "
          f"(scores within {REAL_SCORE_TOLERANCE:g}, largest difference {worst:.2g})")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Regenerates gengraph's parity fixtures from the pinned transformers version.

Makes small random GPT-2 models with fixed seeds (saved with save_pretrained: config.json,
generation_config.json, safetensors — single file, sharded, float16 storage) and records what
transformers' generate() returns for them on CPU float32. The C++ parity tests compare gengraph's
tokens to these exactly. Never edit the output by hand: run

    .venv/bin/python tools/make_fixtures.py            # rewrite tests/fixtures
    .venv/bin/python tools/make_fixtures.py --check    # regenerate in a temp dir and compare

--check exits non-zero when the committed fixtures differ from what the pinned versions produce.
"""
import argparse
import filecmp
import json
import os
import shutil
import subprocess
import sys
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

hf_logging.disable_progress_bar()

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fixture_cases  # noqa: E402  (decoding matrix on GPT-2)
import fixture_cases_arch  # noqa: E402  (one entry per further architecture)
from padding import left_pad  # noqa: E402

MODELS = fixture_cases.MODELS + fixture_cases_arch.MODELS


def cases():
    return fixture_cases.cases() + fixture_cases_arch.cases()

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(ROOT, "tests", "fixtures")


def make_model(spec, out_dir):
    """Builds a random model of spec["model_type"] (default gpt2) from a seed and saves it as
    transformers would."""
    torch.manual_seed(spec["seed"])
    config = AutoConfig.for_model(spec.get("model_type", "gpt2"), **spec["config"])
    model = AutoModelForCausalLM.from_config(config, attn_implementation=spec.get("attn_implementation", "sdpa")).eval()
    if spec.get("random_norms"):
        # Norm weights drawn too (Gemma's initialise to zero, which would leave the norms' scales
        # untested): normal with this standard deviation, from the same seeded generator.
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "norm" in name:
                    p.normal_(0.0, spec["random_norms"])
    if spec.get("storage_dtype") == "float16":
        model = model.to(torch.float16)
    path = os.path.join(out_dir, "models", spec["name"])
    model.save_pretrained(path, safe_serialization=True, max_shard_size=spec.get("max_shard_size", "5GB"))
    return path


def load_for_oracle(path, attn="sdpa"):
    """Models run with sdpa attention, or what the model entry names (GPT-J has no sdpa path)."""
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation=attn).eval()


def effective_eos(model, gen):
    eos = gen.get("eos_token_id", model.generation_config.eos_token_id)
    if eos is None:
        return []
    return [eos] if isinstance(eos, int) else list(eos)


def resolve_auto_eos(model, case, gen):
    """Replaces "auto:ROW,STEP" eos entries by the token plain greedy search emits there."""
    eos = gen.get("eos_token_id")
    items = eos if isinstance(eos, list) else [eos]
    if not any(isinstance(e, str) for e in items):
        return gen
    ids, mask = left_pad(case["prompts"], 0)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, eos_token_id=None, pad_token_id=0,
                             max_new_tokens=gen.get("max_new_tokens", 20))
    resolved = []
    for e in items:
        if isinstance(e, str):
            row, step = (int(x) for x in e.split(":")[1].split(","))
            e = int(out[row, ids.shape[1] + step])
        resolved.append(e)
    gen["eos_token_id"] = resolved if isinstance(eos, list) else resolved[0]
    return gen


def cut_at_eos(row, eos):
    for j, t in enumerate(row):
        if t in eos:
            return row[: j + 1]
    return row


def run_groupbeam_case(path, case, gen, pad):
    """Diverse beam search: recorded with transformers 4.55.4 (see tools/groupbeam_oracle.py)."""
    oracle_path = os.path.join(ROOT, ".oracle-groupbeam")
    if not os.path.isdir(oracle_path):
        sys.exit("make_fixtures: .oracle-groupbeam is missing; run scripts/setup.sh first")
    env = dict(os.environ, PYTHONPATH=oracle_path)
    req = {"model": path, "prompts": case["prompts"], "pad": pad, "generation": gen}
    res = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "groupbeam_oracle.py")],
                         input=json.dumps(req), capture_output=True, text=True, env=env, check=False)
    if res.returncode != 0:
        sys.exit(f"make_fixtures: group beam oracle failed for {case['name']}:\n{res.stderr}")
    return json.loads(res.stdout)


def run_case(model, case, path):
    gen = resolve_auto_eos(model, case, dict(case["generation"]))
    eos = effective_eos(model, gen)
    pad = gen.get("pad_token_id", model.generation_config.pad_token_id)
    if pad is None:
        pad = eos[0] if eos else 0
    seed = case.get("seed", 0)
    if gen.get("num_beam_groups", 1) > 1:
        res = run_groupbeam_case(path, case, gen, pad)
        return {"name": case["name"], "model": case["model"], "prompts": case["prompts"],
                "generation": gen, "seed": seed, "expected": res["expected"],
                "oracle": "transformers " + res["transformers_version"]}
    ids, mask = left_pad(case["prompts"], pad)
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, return_dict_in_generate=True,
                             output_scores=True, **gen)
    prompt_len = ids.shape[1]
    seqs = out.sequences.tolist()
    per_input = len(seqs) // len(case["prompts"])
    beams = gen.get("num_beams", 1) > 1
    # Each generated token's score as compute_transition_scores gives it: for beam strategies the
    # processed log-probability through the beam indices; otherwise the log-softmax of the
    # processed scores (normalize_logits=True): the token's log-probability under the
    # distribution it was chosen from.
    if beams:
        transition = model.compute_transition_scores(out.sequences, out.scores, out.beam_indices,
                                                     normalize_logits=False)
    else:
        transition = model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)
    hyps = []
    for i, row in enumerate(seqs):
        if beams:
            # A returned hypothesis is as long as its beam history (transformers pads the rest).
            n = int((out.beam_indices[i] != -1).sum())
            hyps.append({"tokens": row[prompt_len:prompt_len + n], "score": float(out.sequences_scores[i])})
        else:
            tokens = cut_at_eos(row[prompt_len:], eos)
            n = len(tokens)
            hyps.append({"tokens": tokens, "score": None})
        hyps[-1]["token_scores"] = [float(x) for x in transition[i][:n]]
    expected = [hyps[i * per_input:(i + 1) * per_input] for i in range(len(case["prompts"]))]
    return {"name": case["name"], "model": case["model"], "prompts": case["prompts"],
            "generation": gen, "seed": seed, "expected": expected}


def prompt_lookup_cases():
    """transformers' PromptLookupCandidateGenerator on seeded random histories over a small
    vocabulary (so that n-grams recur): the candidates it proposes, for the C++ PromptLookup to
    equal (tests/framework/decoding/test_speculative.cpp)."""
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    gen = torch.Generator().manual_seed(31)
    cases = []
    for i in range(120):
        length = int(torch.randint(2, 40, (1,), generator=gen))
        vocab = int(torch.randint(3, 9, (1,), generator=gen))
        history = torch.randint(0, vocab, (1, length), generator=gen)
        num_tokens = [1, 3, 10][i % 3]
        ngram = [1, 2, 3, 4][(i // 3) % 4]
        eos = [] if i % 5 < 3 else [int(torch.randint(0, vocab, (1,), generator=gen))]
        # Room for every candidate, or none (max_length one past the history).
        max_length = length + 1 if i % 11 == 0 else length + 64
        lookup = PromptLookupCandidateGenerator(
            eos_token_id=torch.tensor(eos) if eos else None, num_output_tokens=num_tokens,
            max_matching_ngram_size=ngram, max_length=max_length)
        out, _ = lookup.get_candidates(history)
        cases.append({"history": history[0].tolist(), "num_tokens": num_tokens,
                      "max_matching_ngram_size": ngram, "eos": eos, "max_length": max_length,
                      "candidates": out[0, length:].tolist()})
    return cases


def generate(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(1)
    paths = {spec["name"]: make_model(spec, out_dir) for spec in MODELS}
    records = []
    for case in cases():
        spec = next(m for m in MODELS if m["name"] == case["model"])
        model = load_for_oracle(paths[case["model"]], spec.get("attn_implementation", "sdpa"))
        records.append(run_case(model, case, paths[case["model"]]))
    doc = {"transformers_version": transformers.__version__, "torch_version": torch.__version__.split("+")[0],
           "cases": records}
    with open(os.path.join(out_dir, "hf_generate.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    with open(os.path.join(out_dir, "prompt_lookup.json"), "w") as f:
        json.dump({"transformers_version": transformers.__version__,
                   "cases": prompt_lookup_cases()}, f, indent=1)
        f.write("\n")
    return doc


# Scores are sums of float32 log-probabilities: another CPU (its kernels, its vector width) may
# round them differently in the last bits. Everything else must match exactly.
SCORE_TOLERANCE = 1e-5


def json_difference(x, y, path="$", tolerance=SCORE_TOLERANCE):
    """The first difference between two JSON documents, floats compared within SCORE_TOLERANCE
    relative, absolute below 1 (as tests/parity/expect_outputs.h compares gengraph's scores with
    these files), or None; and the largest float difference seen. Before 2026-12-02 the floor was
    an absolute 1e-6, stricter than the parity tests themselves: the real model's beam score
    -0.67667627 (generated on an Intel AVX-512 machine) came out -0.67666888 on an AMD AVX2 one,
    7.4e-6 apart, and the check failed there while the parity tests passed."""
    worst = [0.0]

    def walk(x, y, path):
        if isinstance(x, float) and isinstance(y, (float, int)) and not isinstance(y, bool):
            d = abs(x - y)
            worst[0] = max(worst[0], d)
            return None if d <= tolerance * max(1.0, abs(y)) else f"{path}: {x} != {y}"
        if type(x) is not type(y):
            return f"{path}: {x!r} != {y!r}"
        if isinstance(x, dict):
            if x.keys() != y.keys():
                return f"{path}: keys {sorted(x)} != {sorted(y)}"
            for k in x:
                found = walk(x[k], y[k], f"{path}.{k}")
                if found:
                    return found
            return None
        if isinstance(x, list):
            if len(x) != len(y):
                return f"{path}: {len(x)} items != {len(y)}"
            for i, (u, v) in enumerate(zip(x, y)):
                found = walk(u, v, f"{path}[{i}]")
                if found:
                    return found
            return None
        return None if x == y else f"{path}: {x!r} != {y!r}"

    return walk(x, y, path), worst[0]


# Folders of tests/fixtures that other generators write, each checked by its own --check where
# it has one: the real model's fixture (make_real_fixtures.py), the GGUF reader's
# (make_gguf_fixtures.py), the GGUF tokenizer's (make_gguf_tokenizer_fixtures.py), the chat
# templates' (make_chat_fixtures.py); gguf/models inside gguf/ is make_gguf_model_fixtures.py's.
OTHER_GENERATORS = ("real", "gguf", "gguf_tokenizer", "chat")


def compare_trees(a, b):
    """Lists files that differ between two fixture trees: byte for byte, except hf_generate.json,
    whose scores may differ within SCORE_TOLERANCE (tokens and everything else exactly)."""
    problems = []
    notes = []
    for dirpath, _, files in os.walk(a):
        for name in files:
            pa = os.path.join(dirpath, name)
            pb = os.path.join(b, os.path.relpath(pa, a))
            if not os.path.exists(pb):
                problems.append(f"missing from the committed fixtures: {os.path.relpath(pa, a)}")
            elif not filecmp.cmp(pa, pb, shallow=False):
                rel = os.path.relpath(pa, a)
                if name == "hf_generate.json":
                    with open(pa) as fa, open(pb) as fb:
                        found, worst = json_difference(json.load(fa), json.load(fb))
                    if found:
                        problems.append(f"differs: {rel}: {found}")
                    else:
                        notes.append(f"{rel}: equal; scores within {SCORE_TOLERANCE:g} "
                                     f"(largest difference {worst:.2g})")
                else:
                    problems.append(f"differs: {rel}")
    for dirpath, dirs, files in os.walk(b):
        # Other generators' folders (OTHER_GENERATORS) are theirs to check.
        if os.path.abspath(dirpath) == os.path.abspath(b):
            dirs[:] = [d for d in dirs if d not in OTHER_GENERATORS]
        for name in files:
            pb = os.path.join(dirpath, name)
            if not os.path.exists(os.path.join(a, os.path.relpath(pb, b))):
                problems.append(f"not produced by the generator (stale?): {os.path.relpath(pb, b)}")
    for n in notes:
        print(n)
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=DEFAULT_OUT, help="fixture folder (default tests/fixtures)")
    ap.add_argument("--check", action="store_true", help="regenerate into a temp dir and compare")
    args = ap.parse_args()
    if transformers.__version__ != "5.17.0":
        sys.exit(f"make_fixtures: transformers {transformers.__version__} found; fixtures are pinned to 5.17.0")
    if not args.check:
        if os.path.isdir(args.out):
            shutil.rmtree(os.path.join(args.out, "models"), ignore_errors=True)
        doc = generate(args.out)
        print(f"wrote {len(doc['cases'])} cases and {len(MODELS)} models to {args.out}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        doc = generate(tmp)
        problems = compare_trees(tmp, args.out)
    if problems:
        print("fixtures are NOT reproducible from tools/make_fixtures.py:", *problems, sep="\n  ")
        sys.exit(1)
    print(f"fixtures reproducible: {len(doc['cases'])} cases and {len(MODELS)} models match")


if __name__ == "__main__":
    main()

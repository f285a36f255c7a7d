#!/usr/bin/env python3
"""Runs diverse (group) beam search with transformers 4.55.4, the last release that had it in its
core. Called by make_fixtures.py with PYTHONPATH pointing at that release (see
tools/requirements-groupbeam.txt); reads one JSON request on stdin and writes the result on stdout.

Request: {"model": PATH, "prompts": [[ids]], "pad": ID, "generation": {...}}
Result:  {"transformers_version": ..., "expected": [[{"tokens": [...], "score": x,
          "token_scores": [...] or null}, ...] per input]}

Token scores: 4.55's compute_transition_scores over its beam indices, recorded only for the
sequences where they add up to 4.55's own sequence score (sum / generated_length **
length_penalty, to 1e-5 relative). 4.55's group beam search keeps beam indices local to a group
(`beam_idx` indexes the group's rows, not the batch's) and joins the groups' histories in an order
its scorer does not read them in, so the transition scores of a group after the first, and of
later inputs, come from other beams; those are null and only the sequence score is compared.
"""
import json
import os
import sys
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
warnings.filterwarnings("ignore")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from padding import left_pad  # noqa: E402


def main():
    req = json.load(sys.stdin)
    torch.set_num_threads(1)
    # Eager attention: 4.55's GPT-2 sdpa path ignores scale_attn_by_inverse_layer_idx (its eager
    # path and 5.17's sdpa path agree to 5e-7 on such a model), so eager is the faithful oracle.
    model = AutoModelForCausalLM.from_pretrained(req["model"], torch_dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    prompts, pad, gen = req["prompts"], req["pad"], req["generation"]
    ids, mask = left_pad(prompts, pad)
    width = ids.shape[1]
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, return_dict_in_generate=True,
                             output_scores=True, **gen)
    eos = gen.get("eos_token_id", model.generation_config.eos_token_id)
    eos = [] if eos is None else ([eos] if isinstance(eos, int) else list(eos))
    length_penalty = gen.get("length_penalty", model.generation_config.length_penalty)
    transition = model.compute_transition_scores(out.sequences, out.scores, out.beam_indices,
                                                 normalize_logits=False)
    rows = out.sequences[:, width:].tolist()
    per_input = len(rows) // len(prompts)
    hyps = []
    for i, row in enumerate(rows):
        # The returned sequence ends at its (appended) EOS; shorter ones are padded after it.
        n = len(row)
        for j, t in enumerate(row):
            if t in eos:
                n = j + 1
                break
        score = float(out.sequences_scores[i])
        # The tokens a step chose (an appended EOS has no beam index and scores 0).
        chosen = int((out.beam_indices[i] != -1).sum())
        token_scores = [float(x) for x in transition[i][:n]]
        total = sum(token_scores[:chosen]) / chosen ** length_penalty
        right = abs(total - score) <= 1e-5 * max(1.0, abs(score))
        hyps.append({"tokens": row[:n], "score": score,
                     "token_scores": token_scores if right else None})
    json.dump({"transformers_version": transformers.__version__,
               "expected": [hyps[i * per_input:(i + 1) * per_input] for i in range(len(prompts))]},
              sys.stdout)


if __name__ == "__main__":
    main()

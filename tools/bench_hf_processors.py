#!/usr/bin/env python3
"""transformers' own logits processors and search steps, timed on the shapes of gengraph's
processor/ and strategy_step/ benchmarks (bench/bench_decoding.cpp), and the comparison of the two.

The usual way (docs/decoding-benchmarks.md): one run that also drives gengraph_bench, group by
group (a processor, a strategy), the two sides back to back in alternating order, over several
rounds, then prints and writes the comparison (OUT/table.md):
    OMP_NUM_THREADS=1 .venv/bin/python tools/bench_hf_processors.py --clock thread_cpu \
        --gengraph-bench build-bench/bench/gengraph_bench --rounds 3 --repeats 1 --out-dir OUT
transformers alone (JSON; entry names match gengraph_bench's), and a comparison of separate runs:
    OMP_NUM_THREADS=1 .venv/bin/python tools/bench_hf_processors.py --clock thread_cpu --out hf.json
    .venv/bin/python tools/bench_hf_processors.py --compare gengraph.json --hf hf.json --md table.md

Each case is timed as timeit does: `number` calls per repeat (calibrated so a repeat lasts at least
--min-time seconds of timed calls), per-call time per repeat, median over --repeats. Only the call
itself is timed: refreshing the input scores (only for a processor that edits them in place) and
restarting a finished search are not.
--clock thread_cpu times the calls in this thread's CPU time (as GENGRAPH_BENCH_CLOCK=thread_cpu
does for gengraph_bench): steadier on a shared machine, meaningful only with one torch thread.

Processors are called directly (one class), the sampling chain through LogitsProcessorList as
generate() does. Search steps are the body of transformers 5.17's GenerationMixin._sample and
_beam_search loops after the forward pass, transcribed with their own helpers (the beam helpers
are GenerationMixin's, called unbound) and their own stopping criteria classes.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_hf_report import compare  # noqa: E402  (the report half of this tool)

PROMPT = 64  # history: 64 prompt tokens ...
GENERATED = 64  # ... and 64 generated ones
MAX_NEW = 128  # search steps restart after this many steps
EOS = 50256  # GPT-2's <|endoftext|>; inside both vocabularies
SEED = 0


# --- the cases ------------------------------------------------------------------------------------


def hf_processors() -> dict[str, tuple[Callable[[], object], str]]:
    """gengraph processor name -> (factory of transformers' equivalent, note). Same parameters as
    processor_params() in bench/bench_decoding.cpp."""
    from transformers.generation import logits_process as lp

    return {
        "sequence_bias": (
            lambda: lp.SequenceBiasLogitsProcessor(
                [[[11], 2.0], [[12, 13], -1.5], [[14, 15, 16], 1.0], [[17, 18], -2.0]]
            ),
            "",
        ),
        "logit_bias": (
            lambda: lp.SequenceBiasLogitsProcessor([[[11], 2.0], [[12], -1.5], [[13], 1.0], [[14], -100.0]]),
            "transformers has no logit_bias: SequenceBias with one-token sequences",
        ),
        "repetition_penalty": (lambda: lp.RepetitionPenaltyLogitsProcessor(1.2), ""),
        "no_repeat_ngram": (lambda: lp.NoRepeatNGramLogitsProcessor(3), ""),
        "bad_words": (lambda: lp.NoBadWordsLogitsProcessor([[11], [12, 13], [14, 15, 16], [17, 18]], EOS), ""),
        "min_length": (lambda: lp.MinLengthLogitsProcessor(256, EOS), ""),
        "min_new_tokens": (lambda: lp.MinNewTokensLengthLogitsProcessor(PROMPT, 128, EOS), ""),
        "forced_bos": (lambda: lp.ForcedBOSTokenLogitsProcessor(0), "inactive at this length"),
        "forced_eos": (lambda: lp.ForcedEOSTokenLogitsProcessor(PROMPT + GENERATED + 1, EOS), ""),
        "remove_invalid_values": (lambda: lp.InfNanRemoveLogitsProcessor(), ""),
        "exponential_decay_length_penalty": (lambda: lp.ExponentialDecayLengthPenalty((10, 1.05), EOS, PROMPT), ""),
        "suppress_tokens": (lambda: lp.SuppressTokensLogitsProcessor(list(range(11, 21))), ""),
        "begin_suppress_tokens": (
            lambda: lp.SuppressTokensAtBeginLogitsProcessor([220, EOS], PROMPT),
            "inactive at this length",
        ),
        "temperature": (lambda: lp.TemperatureLogitsWarper(0.7), ""),
        "top_k": (lambda: lp.TopKLogitsWarper(50), ""),
        "top_p": (lambda: lp.TopPLogitsWarper(0.9), ""),
        "min_p": (lambda: lp.MinPLogitsWarper(0.05), ""),
        "typical_p": (lambda: lp.TypicalLogitsWarper(0.9), ""),
        "epsilon_cutoff": (lambda: lp.EpsilonLogitsWarper(3e-4), ""),
        "eta_cutoff": (lambda: lp.EtaLogitsWarper(3e-4), ""),
        "renormalize": (lambda: lp.LogitNormalization(), ""),
        "chain_sampling_default": (
            lambda: lp.LogitsProcessorList(
                [
                    lp.RepetitionPenaltyLogitsProcessor(1.2),
                    lp.TemperatureLogitsWarper(0.7),
                    lp.TopKLogitsWarper(50),
                    lp.TopPLogitsWarper(0.9),
                ]
            ),
            "through LogitsProcessorList",
        ),
    }


# gengraph processors without a transformers class (shown as such in the comparison).

STRATEGIES = {"greedy": (1, False), "sample": (1, True), "beam4": (4, False), "beam_sample4": (4, True)}


def grids(smoke: bool) -> tuple[list[int], list[int], list[int]]:
    """(vocab sizes, rows, rows of the entries compared with decode_step/gpt2), as the C++ grid."""
    if smoke:
        return [50257], [1, 4], [1, 4]
    return [50257, 151936], [1, 4, 16, 64], [1, 4, 8, 16, 64]


# --- search steps -----------------------------------------------------------------------------------


class RowwiseStep:
    """transformers 5.17 GenerationMixin._sample, the loop body after the forward pass."""

    def __init__(self, rows: int, vocab: int, sample: bool, logits):
        import torch
        from transformers.generation.logits_process import LogitsProcessorList
        from transformers.generation.stopping_criteria import (
            EosTokenCriteria,
            MaxLengthCriteria,
            StoppingCriteriaList,
        )
        from transformers.generation.utils import StopCheck

        self.torch, self.rows, self.vocab, self.sample, self.logits = torch, rows, vocab, sample, logits
        self.processors = LogitsProcessorList()
        self.stopping = StoppingCriteriaList([MaxLengthCriteria(PROMPT + MAX_NEW), EosTokenCriteria(EOS)])
        self.stop_check = StopCheck()
        self.pad_token_id = torch.tensor(EOS)  # GPT-2: no pad, so generate() pads with EOS
        self.restart()

    def restart(self):
        torch = self.torch
        self.input_ids = torch.randint(self.vocab, (self.rows, PROMPT))
        self.unfinished_sequences = torch.ones(self.rows, dtype=torch.long)
        self.this_peer_finished = False

    def finished(self) -> bool:
        return self.this_peer_finished or self.input_ids.shape[1] >= PROMPT + MAX_NEW

    def step(self):
        torch = self.torch
        next_token_scores = self.processors(self.input_ids, self.logits)
        if self.sample:
            probs = torch.nn.functional.softmax(next_token_scores, dim=-1)
            next_tokens = torch.multinomial(probs, num_samples=1).squeeze(1)
        else:
            next_tokens = torch.argmax(next_token_scores, dim=-1)
        unfinished = self.unfinished_sequences
        next_tokens = next_tokens * unfinished + self.pad_token_id * (1 - unfinished)
        self.input_ids = torch.cat([self.input_ids, next_tokens[:, None]], dim=-1)
        self.unfinished_sequences = unfinished & ~self.stopping(self.input_ids, None)
        self.this_peer_finished = self.stop_check(self.unfinished_sequences, next_tokens, self.input_ids.shape[1])


class BeamStep:
    """transformers 5.17 GenerationMixin._beam_search, the loop body after the forward pass (cache
    reordering excluded: that is the model's side), with GenerationMixin's own helpers."""

    def __init__(self, rows: int, vocab: int, sample: bool, num_beams: int, logits):
        import torch
        from transformers.generation.logits_process import LogitsProcessorList
        from transformers.generation.stopping_criteria import (
            EosTokenCriteria,
            MaxLengthCriteria,
            StoppingCriteriaList,
        )
        from transformers.generation.utils import GenerationMixin

        self.torch, self.G = torch, GenerationMixin
        self.rows, self.vocab, self.sample, self.num_beams, self.logits = rows, vocab, sample, num_beams, logits
        self.batch = rows // num_beams
        self.max_length = PROMPT + MAX_NEW
        self.processors = LogitsProcessorList()
        self.stopping = StoppingCriteriaList([MaxLengthCriteria(self.max_length), EosTokenCriteria(EOS)])
        self.beams_to_keep = max(2, 1 + 1) * num_beams  # one EOS id
        self.top_num_beam_mask = torch.cat(
            (torch.ones(num_beams, dtype=torch.bool), torch.zeros(self.beams_to_keep - num_beams, dtype=torch.bool))
        )
        self.restart()

    def restart(self):
        torch, G, b, nb = self.torch, self.G, self.batch, self.num_beams
        input_ids = torch.randint(self.vocab, (self.rows, PROMPT))
        self.cur_len = self.prompt_len = PROMPT
        self.running_sequences = torch.full((b, nb, self.max_length), EOS, dtype=torch.int64)
        self.running_sequences[:, :, : self.cur_len] = G._unflatten_beam_dim(input_ids, b, nb)
        self.sequences = self.running_sequences.detach().clone()
        self.running_beam_scores = torch.zeros((b, nb), dtype=torch.float)
        self.running_beam_scores[:, 1:] = -1e9
        self.beam_scores = torch.full((b, nb), fill_value=-1e9, dtype=torch.float)
        self.is_sent_finished = torch.zeros((b, nb), dtype=torch.bool)
        self.is_early_stop_heuristic_unsatisfied = torch.ones((b, 1), dtype=torch.bool)
        self.running_beam_indices = torch.full((b, nb, self.max_length - self.cur_len), -1, dtype=torch.int32)
        self.beam_indices = self.running_beam_indices.detach().clone()
        self.flat_running_sequences = input_ids
        self.first = True
        self.this_peer_finished = False

    def finished(self) -> bool:
        return self.this_peer_finished or self.cur_len >= self.max_length

    def step(self):
        torch, G, b, nb, vocab = self.torch, self.G, self.batch, self.num_beams, self.vocab
        cur_len = self.cur_len
        if not self.first:
            self.flat_running_sequences = G._flatten_beam_dim(self.running_sequences[:, :, :cur_len])
        self.first = False
        log_probs = torch.nn.functional.log_softmax(self.logits, dim=-1)
        log_probs = self.processors(self.flat_running_sequences, log_probs)
        log_probs = G._unflatten_beam_dim(log_probs, b, nb)
        log_probs = log_probs + self.running_beam_scores[:, :, None]
        log_probs = torch.reshape(log_probs, (b, nb * vocab))
        topk_log_probs, topk_running_sequences, topk_running_beam_indices = G._get_top_k_continuations(
            G,
            accumulated_log_probs=log_probs,
            running_sequences=self.running_sequences,
            running_beam_indices=self.running_beam_indices,
            cur_len=cur_len,
            decoder_prompt_len=self.prompt_len,
            do_sample=self.sample,
            beams_to_keep=self.beams_to_keep,
            num_beams=nb,
            vocab_size=vocab,
            batch_size=b,
        )
        hits = self.stopping(G._flatten_beam_dim(topk_running_sequences[:, :, : cur_len + 1]), None)
        hits = G._unflatten_beam_dim(hits, b, self.beams_to_keep)
        self.running_sequences, self.running_beam_scores, self.running_beam_indices = (
            G._get_running_beams_for_next_iteration(
                G,
                topk_log_probs=topk_log_probs,
                topk_running_sequences=topk_running_sequences,
                topk_running_beam_indices=topk_running_beam_indices,
                next_token_hits_stopping_criteria=hits,
                num_beams=nb,
            )
        )
        self.sequences, self.beam_scores, self.beam_indices, self.is_sent_finished = G._update_finished_beams(
            G,
            sequences=self.sequences,
            topk_running_sequences=topk_running_sequences,
            beam_scores=self.beam_scores,
            topk_log_probs=topk_log_probs,
            beam_indices=self.beam_indices,
            topk_running_beam_indices=topk_running_beam_indices,
            is_early_stop_heuristic_unsatisfied=self.is_early_stop_heuristic_unsatisfied,
            is_sent_finished=self.is_sent_finished,
            next_token_hits_stopping_criteria=hits,
            top_num_beam_mask=self.top_num_beam_mask,
            num_beams=nb,
            cur_len=cur_len,
            decoder_prompt_len=self.prompt_len,
            length_penalty=1.0,
            early_stopping=False,
        )
        self.cur_len = cur_len = cur_len + 1
        self.is_early_stop_heuristic_unsatisfied = G._check_early_stop_heuristic(
            is_early_stop_heuristic_unsatisfied=self.is_early_stop_heuristic_unsatisfied,
            running_beam_scores=self.running_beam_scores,
            beam_scores=self.beam_scores,
            is_sent_finished=self.is_sent_finished,
            cur_len=cur_len,
            max_length=self.max_length,
            decoder_prompt_len=self.prompt_len,
            early_stopping=False,
            length_penalty=1.0,
        )
        self.this_peer_finished = not G._beam_search_has_unfinished_sequences(
            self.is_early_stop_heuristic_unsatisfied, self.is_sent_finished, hits, False
        )


# --- timing -----------------------------------------------------------------------------------------


def time_case(prepare, call, min_time: float, repeats: int, clock, number: int = 0):
    """Per-call times (seconds) of `repeats` repeats of `number` calls each, `prepare` untimed; with
    number 0, calibrated first so that a repeat lasts at least min_time. -> (times, number)"""

    def batch(number: int) -> float:
        total = 0.0
        for _ in range(number):
            prepare()
            t0 = clock()
            out = call()
            total += clock() - t0
            del out
        return total

    batch(1)  # warm-up (lazy initialisation in some processors)
    if not number:
        number = 1
        while (total := batch(number)) < min_time:
            number = max(number * 2, int(number * min_time / max(total, 1e-9) * 1.1))
    return [batch(number) / number for _ in range(repeats)], number


class Case:
    """One entry: its name, its group (a gengraph_bench filter prefix) and how to set it up."""

    def __init__(self, name: str, group: str, setup: Callable[[], tuple], note: str = ""):
        self.name, self.group, self.setup, self.note = name, group, setup, note
        self.times: list[float] = []
        self.number = 0
        self.changed: int | None = None

    def measure(self, args, clock, repeats: int):
        prepare, call, changed = self.setup()
        times, self.number = time_case(prepare, call, args.min_time, repeats, clock, self.number)
        self.times += times
        self.changed = changed
        median_us = statistics.median(times) * 1e6
        print(f"{self.name:64s} {median_us:12.1f} us  (x{self.number})", file=sys.stderr, flush=True)

    def result(self) -> dict:
        r = {"name": self.name, "us": statistics.median(self.times) * 1e6, "number": self.number}
        r["repeats_us"] = [t * 1e6 for t in self.times]
        r.update({"note": self.note} if self.note else {})
        r.update({"changed": self.changed} if self.changed is not None else {})
        return r


def processor_setup(torch, factory, vocab: int, rows: int):
    def setup():
        torch.manual_seed(SEED)
        logits = torch.randn(rows, vocab)  # [rows, vocab] float32, as the C++ entry
        input_ids = torch.randint(vocab, (rows, PROMPT + GENERATED))  # [rows, 128]
        scores = logits.clone()
        proc = factory()
        # As the C++ entry, untimed: how many scores change; refresh the input only if edited.
        changed = int(proc(input_ids, scores).ne(logits).sum())
        edits_input = not torch.equal(scores, logits)
        refresh = (lambda: scores.copy_(logits)) if edits_input else (lambda: None)
        return refresh, lambda: proc(input_ids, scores), changed

    return setup


def strategy_setup(torch, vocab: int, rows: int, beams: int, sample: bool):
    def setup():
        torch.manual_seed(SEED)
        logits = torch.randn(rows, vocab)  # [rows, vocab]
        logits[:, EOS] = -1e4  # EOS never wins: rows run to max_length
        s = RowwiseStep(rows, vocab, sample, logits) if beams == 1 else BeamStep(rows, vocab, sample, beams, logits)

        def prepare():
            if s.finished():
                s.restart()

        return prepare, s.step, None

    return setup


def all_cases(args, torch) -> list[Case]:
    vocabs, rows_grid, rows_grid_8 = grids(args.smoke)
    vocabs = args.vocab or vocabs
    pattern = re.compile(args.filter) if args.filter else None
    out = []
    for name, (factory, note) in hf_processors().items():
        for vocab in vocabs:
            for rows in rows_grid_8 if name == "chain_sampling_default" else rows_grid:
                full = f"processor/{name}/vocab:{vocab}/rows:{rows}"
                out.append(Case(full, f"processor/{name}", processor_setup(torch, factory, vocab, rows), note))
    for label, (beams, sample) in STRATEGIES.items():
        for vocab in vocabs:
            for rows in rows_grid_8 if beams == 1 else rows_grid:
                if rows >= beams and rows % beams == 0:
                    full = f"strategy_step/{label}/vocab:{vocab}/rows:{rows}"
                    out.append(Case(full, f"strategy_step/{label}", strategy_setup(torch, vocab, rows, beams, sample)))
    return [c for c in out if not pattern or pattern.search(c.name)]


def gengraph_env(args) -> dict[str, str]:
    """gengraph_bench's environment: this run's thread count and clock (and grid)."""
    import torch

    env = dict(os.environ, OMP_NUM_THREADS=str(torch.get_num_threads()), GENGRAPH_BENCH_CLOCK=args.clock)
    if args.smoke:
        env["GENGRAPH_BENCH_SMOKE"] = "1"
    return env


def gengraph_groups(args) -> list[str]:
    """processor/<name> and strategy_step/<name> groups that gengraph_bench registers."""
    cmd = [args.gengraph_bench, "--benchmark_list_tests", "--benchmark_filter=^(processor|strategy_step)/"]
    listing = subprocess.run(cmd, env=gengraph_env(args), check=True, capture_output=True, text=True).stdout
    return list(dict.fromkeys("/".join(line.split("/")[:2]) for line in listing.split()))


def run_gengraph(args, group: str, vocabs: list[int], out: str):
    """One gengraph_bench run over a group's entries (one repetition), on this run's threads and clock."""
    env = gengraph_env(args)
    pattern = f"^{group}/" + (f"vocab:({'|'.join(map(str, vocabs))})/" if vocabs else "")
    cmd = [args.gengraph_bench, f"--benchmark_filter={pattern}", f"--benchmark_min_time={args.min_time}",
           f"--benchmark_out={out}", "--benchmark_out_format=json"]
    print(f"[gengraph_bench] {pattern}", file=sys.stderr, flush=True)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-4000:]}")


def run(args) -> int:
    import torch
    import transformers

    if args.threads:
        torch.set_num_threads(args.threads)
    clock = time.thread_time if args.clock == "thread_cpu" else time.perf_counter
    cases = all_cases(args, torch)
    groups = list(dict.fromkeys(c.group for c in cases))
    if args.gengraph_bench:
        os.makedirs(args.out_dir, exist_ok=True)
        for stale in glob.glob(os.path.join(args.out_dir, "gengraph_r*.json")):
            os.remove(stale)
        if not args.filter:  # gengraph-only groups too (processors that transformers lacks)
            groups += [g for g in gengraph_groups(args) if g not in groups]
        groups.append(args.decode_entry)  # gengraph only: the decode step the chain is compared with
    for r in range(args.rounds):
        # Round after round, each group runs on both sides back to back, first one side then the
        # other (alternating), so that both see the same background load.
        for i, group in enumerate(groups):
            sides = ["gengraph", "transformers"] if (r + i) % 2 == 0 else ["transformers", "gengraph"]
            for side in sides:
                if side == "gengraph" and args.gengraph_bench:
                    vocabs = [] if group == args.decode_entry else (args.vocab or [])
                    run_gengraph(args, group, vocabs, os.path.join(args.out_dir, f"gengraph_r{r}_{i:02d}.json"))
                elif side == "transformers":
                    for c in (c for c in cases if c.group == group):
                        c.measure(args, clock, args.repeats)
    doc = {
        "threads": torch.get_num_threads(),
        "clock": args.clock,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "min_time_s": args.min_time,
        "repeats": args.repeats,
        "rounds": args.rounds,
        "results": [c.result() for c in cases],
    }
    out = os.path.join(args.out_dir, "transformers.json") if args.gengraph_bench else args.out
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"wrote {out} ({len(cases)} cases, {doc['threads']} threads)", file=sys.stderr)
    if args.gengraph_bench:
        args.compare = sorted(glob.glob(os.path.join(args.out_dir, "gengraph_r*.json")))
        args.hf = [out]
        args.md = args.md or os.path.join(args.out_dir, "table.md")
        return compare(args)
    return 0


# --- comparison -------------------------------------------------------------------------------------

def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="hf_processors.json", help="JSON written by a run")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (default: OMP_NUM_THREADS's)")
    p.add_argument("--smoke", action="store_true", help="the GENGRAPH_BENCH_SMOKE=1 grid: vocab 50257, rows 1 and 4")
    p.add_argument("--vocab", type=int, nargs="*", help="restrict the vocabulary sizes")
    p.add_argument("--filter", help="regular expression on the entry names")
    # As gengraph_bench --benchmark_min_time=0.2 --benchmark_repetitions=3 (median of the repeats).
    p.add_argument("--min-time", type=float, default=0.2, help="seconds of timed calls per repeat")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--clock", choices=["wall", "thread_cpu"], default="wall", help="clock of the timed calls")
    p.add_argument("--compare", metavar="GENGRAPH_JSON", nargs="+", help="compare gengraph_bench JSONs ...")
    p.add_argument("--hf", nargs="+", default=["hf_processors.json"], help="... with these runs' JSONs")
    p.add_argument("--md", help="also write the comparison (markdown) here")
    p.add_argument("--decode-entry", help="decode-step entry without /rows:N (default: decode_step/gpt2/eager, "
                   "decode_step/gpt2-tiny/eager with --smoke)")
    p.add_argument("--gengraph-bench", metavar="BIN", help="run gengraph_bench too, group by group, interleaved")
    p.add_argument("--rounds", type=int, default=1, help="with --gengraph-bench: rounds over all groups")
    p.add_argument("--out-dir", default="decoding-bench", help="with --gengraph-bench: where the JSONs go")
    args = p.parse_args()
    args.decode_entry = args.decode_entry or f"decode_step/{'gpt2-tiny' if args.smoke else 'gpt2'}/eager"
    return compare(args) if args.compare else run(args)


if __name__ == "__main__":
    sys.exit(main())

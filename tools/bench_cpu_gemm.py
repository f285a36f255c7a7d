#!/usr/bin/env python3
"""The CPU GEMM paths LibTorch offers for a decode step's projections, timed side by side.

Runs every projection of a GPT-2-small-shaped model (12 layers x c_attn, c_proj, c_fc, mlp c_proj,
then the 50257-word head: 49 distinct float32 weights, 498 MB, so they stream from memory as in a
real step) for a few rows, each path once per repeat, interleaved, and prints the median time of
one pass per path and row count:

  mkl_linear      at::linear(x, W)            W as the checkpoint stores it, [out, in] (MKL)
  onednn          mkldnn::_linear_pointwise   the same W, through oneDNN (gengraph's CPU path)
  mkl_pretransposed  x @ Wt                   a second, transposed copy Wt [in, out] (MKL)
  mkl_transposed_out (W @ x^T)^T              the output computed transposed (MKL)
  onednn_transposed_out                       the same through oneDNN

Usage: .venv/bin/python tools/bench_cpu_gemm.py [--rows 1,2,4,8] [--repeats 8] [--threads 2]
"""
import argparse
import statistics
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1,2,4,8")
    ap.add_argument("--repeats", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    shapes = [(2304, 768), (768, 768), (3072, 768), (768, 3072)] * 12 + [(50257, 768)]
    weights = [torch.randn(o, i) * 0.02 for o, i in shapes]
    transposed = [w.t().contiguous() for w in weights]
    onednn = torch.ops.mkldnn._linear_pointwise

    def path(kind: str, rows: int):
        xs = {768: torch.randn(rows, 768), 3072: torch.randn(rows, 3072)}

        def run() -> None:
            for w, wt in zip(weights, transposed):
                x = xs[w.shape[1]]
                if kind == "mkl_linear":
                    torch.nn.functional.linear(x, w)
                elif kind == "onednn":
                    onednn(x, w, None, "none", [], "")
                elif kind == "mkl_pretransposed":
                    torch.mm(x, wt)
                elif kind == "mkl_transposed_out":
                    torch.mm(w, x.t())
                elif kind == "onednn_transposed_out":
                    onednn(w, x, None, "none", [], "")

        return run

    kinds = ["mkl_linear", "onednn", "mkl_pretransposed", "mkl_transposed_out",
             "onednn_transposed_out"]
    print(f"torch {torch.__version__}, {args.threads} threads, median ms per pass over "
          f"{len(weights)} weights ({sum(w.numel() for w in weights) * 4 / 1e6:.0f} MB), "
          f"{args.repeats} interleaved repeats")
    print("rows  " + "  ".join(f"{k:>22}" for k in kinds))
    for rows in [int(r) for r in args.rows.split(",")]:
        runs = {k: path(k, rows) for k in kinds}
        for run in runs.values():
            run()  # warm-up
        times = {k: [] for k in kinds}
        for _ in range(args.repeats):
            for k, run in runs.items():
                t0 = time.perf_counter()
                run()
                times[k].append((time.perf_counter() - t0) * 1e3)
        print(f"{rows:>4}  " + "  ".join(f"{statistics.median(times[k]):>22.1f}" for k in kinds))


if __name__ == "__main__":
    main()

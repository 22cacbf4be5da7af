"""Benchmark of the attention variants of chapter 7 at sizes too large for the book's build.

First, tfmlib's two paths against PyTorch's fused kernel, forward + backward, causal, B=2 H=4 d=32, at
n = 256, 1024, 2048, one thread, in interleaved rounds (each round runs every variant once, so that all
see the same machine load; the best time of the rounds is kept):
  fused     torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)   the reference
  fast      tfmlib.fast_attention(q, k, v, causal=True)                                  MultiHeadAttention's default
  teaching  tfmlib.scaled_dot_product_attention(q, k, v, causal_mask(n))                  with need_weights
and the ratios fast/fused and teaching/fused.  Then, for each sequence length n, the best wall time (ms) and the
peak tensor memory (MiB) of
  dense    tfmlib.scaled_dot_product_attention, no mask            O(n²) time and memory
  masked   the same with sliding_window_mask(n, w)                  still O(n²): the mask saves nothing
  banded   tfmlib.banded_attention(q, k, v, w)                      O(n·w)
  block    tfmlib.blockwise_attention(q, k, v, block)               O(n²) time, O(n) extra memory
then the fitted exponents (slope of log cost vs log n), and the time of a DecoderLM's greedy generation
with and without the KV cache (every position scheme: scripts/bench_training.py).  Not run by the tests.

    python scripts/bench_attention.py                   # n = 256 … 8192 on tfmlib.get_device()
    python scripts/bench_attention.py --tables fused --rounds 10
    python scripts/bench_attention.py --max-n 16384 --threads 2
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import tfmlib


def slope(xs, ys):
    """Least-squares slope of log y on log x: the exponent c in y ≈ k·x^c."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


def fused_table(args, device):
    b, h, d = 2, 4, 32
    print(f"causal attention, forward + backward, B={b} H={h} d={d}, on {device} ({torch.get_num_threads()} "
          f"threads), best of {args.rounds} interleaved rounds")
    print(f"{'n':>6} {'fused ms':>9} {'fast ms':>9} {'teaching ms':>12} {'fast/fused':>11} {'teaching/fused':>15}")
    for n in args.fused_n:
        q, k, v = (torch.randn(b, h, n, d, device=device, requires_grad=True) for _ in range(3))
        mask = tfmlib.causal_mask(n, device=device)
        variants = {
            "fused": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
            "fast": lambda: tfmlib.fast_attention(q, k, v, causal=True),
            "teaching": lambda: tfmlib.scaled_dot_product_attention(q, k, v, mask)[0],
        }
        best = {name: float("inf") for name in variants}
        for r in range(args.rounds + 1):                     # round 0 is a warm-up
            for name, fn in variants.items():
                sync(device)
                t0 = time.perf_counter()
                fn().sum().backward()
                sync(device)
                if r:
                    best[name] = min(best[name], time.perf_counter() - t0)
        print(f"{n:6d} {1e3 * best['fused']:9.2f} {1e3 * best['fast']:9.2f} {1e3 * best['teaching']:12.2f} "
              f"{best['fast'] / best['fused']:11.2f} {best['teaching'] / best['fused']:15.2f}", flush=True)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def attention_table(args, device):
    variants = {
        "dense": lambda q, k, v, m: tfmlib.scaled_dot_product_attention(q, k, v),
        "masked": lambda q, k, v, m: tfmlib.scaled_dot_product_attention(q, k, v, m),
        "banded": lambda q, k, v, m: tfmlib.banded_attention(q, k, v, args.window),
        "block": lambda q, k, v, m: tfmlib.blockwise_attention(q, k, v, args.block),
    }
    ns, rows = [], {name: ([], []) for name in variants}
    print(f"attention, B=1 H={args.heads} d={args.d} window={args.window} block={args.block} on {device}")
    print(f"{'n':>7} " + " ".join(f"{name + ' ms':>11} {name + ' MiB':>11}" for name in variants))
    n = args.min_n
    while n <= args.max_n:
        q, k, v = torch.randn(3, 1, args.heads, n, args.d, device=device).unbind(0)
        mask = tfmlib.sliding_window_mask(n, args.window, device=device)
        cells = []
        for name, fn in variants.items():
            with torch.no_grad():
                t = tfmlib.time_fn(lambda: fn(q, k, v, mask), repeats=args.repeats)
                mem = tfmlib.peak_memory(lambda: fn(q, k, v, mask), device=device)
            rows[name][0].append(t)
            rows[name][1].append(mem)
            cells.append(f"{1e3 * t:11.2f} {mem / 2**20:11.2f}")
        ns.append(n)
        print(f"{n:7d} " + " ".join(cells), flush=True)
        n *= 2
    print("fitted exponents over the largest half of the lengths (cost ∝ n^c):")
    half = len(ns) // 2
    for name, (times, mems) in rows.items():
        print(f"  {name:7s} time c = {slope(ns[half:], times[half:]):.2f}   "
              f"memory c = {slope(ns[half:], mems[half:]):.2f}")


def kv_cache_table(args, device):
    torch.manual_seed(0)
    model = tfmlib.DecoderLM(100, d_model=args.lm_d, n_heads=4, n_layers=args.lm_layers,
                             max_len=args.lm_len + 1, pos="learned").to(device).eval()
    prompt = torch.randint(0, 100, (1, 1), device=device)
    print(f"\ndecoding, DecoderLM d_model={args.lm_d} layers={args.lm_layers}, greedy, on {device}")
    print(f"{'tokens':>7} {'no cache s':>11} {'cache s':>11} {'speed-up':>9}")
    n = 64
    while n <= args.lm_len:
        t_full = tfmlib.time_fn(lambda: model.generate(prompt, n, greedy=True, use_cache=False), repeats=1, warmup=0)
        t_cache = tfmlib.time_fn(lambda: model.generate(prompt, n, greedy=True), repeats=1, warmup=0)
        print(f"{n:7d} {t_full:11.3f} {t_cache:11.3f} {t_full / t_cache:9.1f}", flush=True)
        n *= 2


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--min-n", type=int, default=256)
    p.add_argument("--max-n", type=int, default=8192)
    p.add_argument("--d", type=int, default=64, help="head dimension")
    p.add_argument("--heads", type=int, default=1)
    p.add_argument("--window", type=int, default=32)
    p.add_argument("--block", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--lm-d", type=int, default=128)
    p.add_argument("--lm-layers", type=int, default=2)
    p.add_argument("--lm-len", type=int, default=1024, help="longest generation for the KV-cache table")
    p.add_argument("--device", default=None)
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the fused table")
    p.add_argument("--fused-n", type=int, nargs="+", default=[256, 1024, 2048])
    p.add_argument("--tables", default="fused,variants,cache", help="comma-separated: fused, variants, cache")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device) if args.device else tfmlib.get_device()
    tables = args.tables.split(",")
    if "fused" in tables:
        fused_table(args, device)
    if "variants" in tables:
        attention_table(args, device)
    if "cache" in tables:
        kv_cache_table(args, device)


if __name__ == "__main__":
    main()

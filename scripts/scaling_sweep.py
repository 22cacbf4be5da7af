"""The larger scaling sweep of chapter 8: tiny decoder LMs of several sizes trained on a Markov source of
known entropy; the held-out loss of each model at several token budgets goes to a CSV.

    python scripts/scaling_sweep.py --train-seed 0 --out sweep_t0.csv      # about 10 minutes of one CPU core
    python scripts/scaling_sweep.py --train-seed 1 --out sweep_t1.csv      # (the three can run in parallel)
    python scripts/scaling_sweep.py --train-seed 2 --out sweep_t2.csv
    python scripts/scaling_sweep.py --merge sweep_t0.csv sweep_t1.csv sweep_t2.csv --out book/data/scaling_sweep.csv

regenerate the CSV the chapter ships: the same grid trained on three training seeds.  ``--seed`` fixes the
Markov source and its evaluation tokens, ``--train-seed`` (default: ``--seed``) only the models'
initial weights and training batches, so the three sweeps measure the same language on the same tokens.
Each model is trained once with a constant learning rate and evaluated at every budget of ``--eval-at``
(steps): the state after s steps of a long constant-rate run is the state a run of s steps would reach.
``--merge`` concatenates sweeps of one source into one file (a sweep written before the ``train_seed``
column existed counts as trained on its source seed).
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tfmlib
from tfmlib.data import MarkovSource
from tfmlib.scaling import train_on_source


FIELDS = ["d_model", "n_layers", "train_seed", "N", "D", "C", "steps", "loss"]


def read_sweep(path):
    """The comment lines (``# ...``) and the rows of a CSV this script wrote."""
    with open(path) as f:
        lines = f.read().splitlines()
    comments = [ln for ln in lines if ln.startswith("#")]
    source = [ln for ln in comments if ln.startswith("# source:")]
    if len(source) != 1:
        raise ValueError(f"{path}: expected one '# source:' line, found {len(source)}")
    seed = int(source[0].split("seed=")[1].split(")")[0])
    rows = list(csv.DictReader(ln for ln in lines if not ln.startswith("#")))
    for r in rows:
        r.setdefault("train_seed", str(seed))
    return comments, source[0], rows


def merge(parts, out, argv):
    """Write the rows of several sweeps of one source to ``out``, with the command lines that made them."""
    header = [f"# python scripts/scaling_sweep.py {' '.join(argv)}"]
    sources, rows = set(), []
    for path in parts:
        comments, source, part_rows = read_sweep(path)
        header += [f"# part {path}: {c[2:]}" for c in comments if not c.startswith("# source:")]
        sources.add(source)
        rows += part_rows
    if len(sources) != 1:
        raise ValueError(f"--merge: the parts come from different sources: {sorted(sources)}")
    seeds = [r["train_seed"] for r in rows]
    if len({(r["train_seed"], r["d_model"], r["steps"]) for r in rows}) != len(rows):
        raise ValueError(f"--merge: a (train_seed, d_model, steps) occurs twice; train seeds {sorted(set(seeds))}")
    with open(out, "w", newline="") as f:
        f.write("\n".join(header + [sources.pop()]) + "\n")
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {len(rows)} rows of train seeds {sorted(set(seeds), key=int)} to {out}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, default=128)
    ap.add_argument("--order", type=int, default=1)
    ap.add_argument("--sharpness", type=float, default=3.0)
    ap.add_argument("--widths", type=int, nargs="+", default=[4, 6, 8, 12, 16, 24, 32, 48, 64])
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--eval-at", type=int, nargs="+", default=[25, 50, 100, 200, 400, 800, 1600, 3200])
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--eval-batch", type=int, default=4096)
    ap.add_argument("--zipf", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0,
                    help="seeds the Markov source and its evaluation set (and the training, unless --train-seed)")
    ap.add_argument("--train-seed", type=int, default=None,
                    help="seeds only the models' initialisation and batches (default: --seed)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="book/data/scaling_sweep.csv")
    ap.add_argument("--merge", nargs="+", metavar="CSV", help="concatenate these sweeps into --out; train nothing")
    args = ap.parse_args(argv)
    if args.merge:
        return merge(args.merge, args.out, argv if argv is not None else sys.argv[1:])
    if args.train_seed is None:
        args.train_seed = args.seed

    torch.set_num_threads(args.threads)
    source = MarkovSource(args.vocab, args.order, args.sharpness, args.zipf, seed=args.seed)
    eval_x = source.sample(args.eval_batch, args.seq_len + args.order,
                           torch.Generator().manual_seed(args.seed + 1))
    entropy, floor = source.entropy_rate(), float(source.nll(eval_x).mean())
    print(f"entropy rate H = {entropy:.4f} nats/token; true model on the eval set: {floor:.4f}")
    rows = []
    for width in args.widths:
        g = tfmlib.seed_everything(args.train_seed)
        model = tfmlib.DecoderLM(args.vocab, d_model=width, n_heads=max(1, width // 16), n_layers=args.layers,
                                 max_len=args.seq_len + args.order, pos="none")
        t0 = time.process_time()
        for row in train_on_source(model, source, args.eval_at, args.batch_size, args.seq_len, args.lr,
                                   eval_x=eval_x, generator=g, desc=f"d_model={width}"):
            rows.append({"d_model": width, "n_layers": args.layers, "train_seed": args.train_seed, **row})
        print(f"d_model={width}: N={rows[-1]['N']}, final loss {rows[-1]['loss']:.4f}, "
              f"{time.process_time() - t0:.0f} s CPU", flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", newline="") as f:
        f.write(f"# python scripts/scaling_sweep.py {' '.join(argv if argv is not None else sys.argv[1:])}\n")
        f.write(f"# source: MarkovSource(vocab_size={args.vocab}, order={args.order}, sharpness={args.sharpness}, "
                f"zipf={args.zipf}, seed={args.seed}); entropy rate {entropy:.6f}; "
                f"true model on eval set {floor:.6f}\n")
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(r for r in rows if r["D"] > 0)
    print(f"wrote {len(rows)} rows to {args.out}")


if __name__ == "__main__":
    main()

"""Constant vs decayed learning rate at the budgets where chapter 8's fit decides E and β.

    python scripts/schedule_sweep.py --out book/data/schedule_sweep.csv

For each seed and each learning rate, one model of the sweep's family (scripts/scaling_sweep.py: same source,
same held-out tokens, same width and heads) is trained once at a constant rate, with its held-out loss read at
every budget of ``--budgets`` (steps), and once per budget with the rate falling along a cosine to a tenth of
it by that budget's last step (``tfmlib.train.lr_factor``).  All runs of one seed start from the same weights
and see the same batches in the same order, so the difference between the two schedules at a budget is the
schedule's alone.  The defaults write the CSV chapter 8 reads (about 6 minutes of CPU time, 40 s per seed and
rate; seeds can run as separate processes, each with its own ``--seeds`` and ``--out``, and their rows be joined).
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tfmlib
from tfmlib.data import MarkovSource
from tfmlib.scaling import count_parameters, train_on_source
from tfmlib.train import train


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, default=128)
    ap.add_argument("--sharpness", type=float, default=3.0)
    ap.add_argument("--zipf", type=float, default=1.0)
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--budgets", type=int, nargs="+", default=[100, 400, 1600])
    ap.add_argument("--lrs", type=float, nargs="+", default=[3e-3, 1e-2, 3e-2])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=32)
    ap.add_argument("--eval-batch", type=int, default=4096)
    ap.add_argument("--source-seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="book/data/schedule_sweep.csv")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    source = MarkovSource(args.vocab, 1, args.sharpness, args.zipf, seed=args.source_seed)
    eval_x = source.sample(args.eval_batch, args.seq_len + 1, torch.Generator().manual_seed(args.source_seed + 1))
    budgets = sorted(set(args.budgets))
    rows = []

    def new_model():
        return tfmlib.DecoderLM(args.vocab, d_model=args.width, n_heads=max(1, args.width // 16), n_layers=1,
                                max_len=args.seq_len + 1, pos="none")

    def lm_loss(model, x):                       # position t predicts t + 1, as train_on_source
        logits = model(x[:, :-1])
        return F.cross_entropy(logits.reshape(-1, args.vocab), x[:, 1:].reshape(-1))

    for seed in args.seeds:
        tfmlib.seed_everything(seed)
        start = new_model().state_dict()
        for lr in args.lrs:
            t0 = time.process_time()
            model = new_model()
            model.load_state_dict(start)
            batches = torch.Generator().manual_seed(1000 + seed)
            for r in train_on_source(model, source, budgets, args.batch_size, args.seq_len, lr, eval_x=eval_x,
                                     generator=batches, desc=f"seed {seed} lr {lr:g} constant"):
                rows.append({"seed": seed, "lr": lr, "schedule": "constant", **r})
            for steps in budgets:
                model = new_model()
                model.load_state_dict(start)
                batches = torch.Generator().manual_seed(1000 + seed)      # the same batches as the constant run
                train(model, lambda s, m=model, b=batches: lm_loss(m, source.sample(args.batch_size,
                                                                                   args.seq_len + 1, b)),
                      steps, lr=lr, decay=True, desc=f"seed {seed} lr {lr:g} cosine {steps}")
                with torch.no_grad():
                    loss = float(lm_loss(model, eval_x))
                n, d = count_parameters(model), steps * args.batch_size * args.seq_len
                rows.append({"seed": seed, "lr": lr, "schedule": "cosine", "N": n, "D": d, "C": 6 * n * d,
                             "steps": steps, "loss": loss})
            print(f"seed {seed}, lr {lr:g}: " + ", ".join(f"{r['schedule']} {r['steps']} {r['loss']:.4f}"
                                                         for r in rows if r["seed"] == seed and r["lr"] == lr)
                  + f" ({time.process_time() - t0:.0f} s CPU)", flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", newline="") as f:
        f.write(f"# python scripts/schedule_sweep.py {' '.join(argv if argv is not None else sys.argv[1:])}\n")
        f.write(f"# source: MarkovSource(vocab_size={args.vocab}, order=1, sharpness={args.sharpness}, "
                f"zipf={args.zipf}, seed={args.source_seed}); d_model={args.width}, one layer; "
                f"entropy rate {source.entropy_rate():.6f}; "
                f"true model on eval set {float(source.nll(eval_x).mean()):.6f}\n")
        w = csv.DictWriter(f, fieldnames=["seed", "lr", "schedule", "N", "D", "C", "steps", "loss"])
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {len(rows)} rows to {args.out}")


if __name__ == "__main__":
    main()

"""Training and generation speed of tfmlib's DecoderLM against a reference GPT built from PyTorch's own layers.

Training: tokens per second of a full step (forward, cross-entropy, backward, AdamW) of
  tfmlib     DecoderLM(pos="learned", norm_first=True, activation="gelu", tie_weights=True, bias=False)
  reference  the same shape from nn.TransformerEncoderLayer(norm_first=True, GELU) with a causal mask
  fused      the same shape written as nanoGPT's model is described (one [Q; K; V] matmul, fused causal
             attention, no biases; our own code)
at nanoGPT's small CPU shape (4 layers, 4 heads, d=128, vocab 65) for T=64 batch 12 and T=256 batch 4,
measured in interleaved rounds (A, B, C, A, B, C, …) in one run so that all see the same machine load; the
ratios are reference time / tfmlib time (> 1: tfmlib is faster).  On the CPU, and on CUDA when present.

Generation: time per new token at 64, 256 and 1024 tokens of context, with and without the KV cache,
for every position scheme of chapter 5 (greedy, batch 1).  With the cache the time should hardly grow.

Chapter 9: tokens per second of a training step of ``tfmlib.modern_gpt`` (RMSNorm, SwiGLU, RoPE, 2 of 4 kv
heads, tied) against nanoGPT's ``model.py`` (Karpathy's GPT: LayerNorm, GELU, learned positions, multi-head,
tied, no biases) at the same shape (4 layers, 4 heads, d=128, vocab 512, T=128, batch 8), in interleaved
rounds in one run.  nanoGPT's file is imported from ``--nanogpt`` at run time (default:
``../shared/bench/nanogpt/model.py`` next to the checkout); it is not part of this repository.

    python scripts/bench_training.py                    # all three tables
    python scripts/bench_training.py --skip-generation --rounds 10
    python scripts/bench_training.py --only-nanogpt     # chapter 9's line alone
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import tfmlib
from tfmlib.models import POSITION_SCHEMES


class ReferenceGPT(nn.Module):
    """A GPT from PyTorch's layers: token + learned position embeddings, pre-norm encoder layers with a
    causal mask, a final LayerNorm and a head tied to the token embedding."""

    def __init__(self, vocab, d_model, n_heads, n_layers, max_len):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(d_model, n_heads, 4 * d_model, dropout=0.0, activation="gelu",
                                       batch_first=True, norm_first=True) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        mask = nn.Transformer.generate_square_subsequent_mask(t, device=idx.device)
        for layer in self.layers:
            x = layer(x, src_mask=mask, is_causal=True)
        return self.head(self.norm(x))


class FusedGPT(nn.Module):
    """A second reference written the way nanoGPT's model is described: one matmul for [Q; K; V], PyTorch's fused
    attention with is_causal, a 4x GELU MLP, pre-norm LayerNorms, no biases, a head tied to the embedding."""

    def __init__(self, vocab, d_model, n_heads, n_layers, max_len):
        super().__init__()
        self.n_heads = n_heads
        self.tok, self.pos = nn.Embedding(vocab, d_model), nn.Embedding(max_len, d_model)
        self.layers = nn.ModuleList(nn.ModuleDict({
            "ln1": nn.LayerNorm(d_model, bias=False), "qkv": nn.Linear(d_model, 3 * d_model, bias=False),
            "proj": nn.Linear(d_model, d_model, bias=False), "ln2": nn.LayerNorm(d_model, bias=False),
            "up": nn.Linear(d_model, 4 * d_model, bias=False), "down": nn.Linear(4 * d_model, d_model, bias=False),
        }) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model, bias=False)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx):
        b, t = idx.shape
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for m in self.layers:
            q, k, v = (z.view(b, t, self.n_heads, -1).transpose(1, 2) for z in m["qkv"](m["ln1"](x)).chunk(3, -1))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + m["proj"](a.transpose(1, 2).reshape(b, t, -1))
            x = x + m["down"](F.gelu(m["up"](m["ln2"](x))))
        return self.head(self.norm(x))


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def train_step_fn(model, batch, t, vocab, device, loss_fn=None):
    """One training step on a fixed random batch: cross-entropy of ``model(x)``'s logits, or ``loss_fn(x, y)``."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, vocab, (batch, t), generator=g).to(device)
    y = torch.randint(0, vocab, (batch, t), generator=g).to(device)

    def step():
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten()) if loss_fn is None else loss_fn(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


def interleaved(fns, rounds, device):
    """Best time of each fn over ``rounds`` rounds, the fns taking turns within a round."""
    best = {name: float("inf") for name in fns}
    for fn in fns.values():                      # warm-up
        fn()
        fn()
    for _ in range(rounds):
        for name, fn in fns.items():
            sync(device)
            t0 = time.perf_counter()
            fn()
            sync(device)
            best[name] = min(best[name], time.perf_counter() - t0)
    return best


def training_table(args, device):
    print(f"training step, 4 layers, 4 heads, d=128, vocab {args.vocab}, tfmlib bias={args.bias}, on {device} "
          f"({torch.get_num_threads()} threads), best of {args.rounds} interleaved rounds")
    print(f"{'T':>5} {'batch':>5} {'tfmlib ms':>10} {'ref ms':>9} {'fused ms':>9} {'tfmlib tok/s':>13} "
          f"{'ref tok/s':>10} {'fused tok/s':>10} {'ref/tfmlib':>11} {'fused/tfmlib':>13}")
    for t, batch in ((64, 12), (256, 4)):
        torch.manual_seed(0)
        ours = tfmlib.DecoderLM(args.vocab, d_model=128, n_heads=4, n_layers=4, max_len=t, pos="learned",
                                norm_first=True, activation="gelu", tie_weights=True, bias=args.bias).to(device).train()
        ref = ReferenceGPT(args.vocab, 128, 4, 4, t).to(device).train()
        fused = FusedGPT(args.vocab, 128, 4, 4, t).to(device).train()
        best = interleaved({"tfmlib": train_step_fn(ours, batch, t, args.vocab, device),
                            "ref": train_step_fn(ref, batch, t, args.vocab, device),
                            "fused": train_step_fn(fused, batch, t, args.vocab, device)}, args.rounds, device)
        tok = batch * t
        print(f"{t:5d} {batch:5d} {1e3 * best['tfmlib']:10.2f} {1e3 * best['ref']:9.2f} {1e3 * best['fused']:9.2f} "
              f"{tok / best['tfmlib']:13.0f} {tok / best['ref']:10.0f} {tok / best['fused']:10.0f} "
              f"{best['ref'] / best['tfmlib']:11.2f} {best['fused'] / best['tfmlib']:13.2f}", flush=True)


def per_step(fn, steps, device):
    """Median wall time of ``fn(s)`` for s = 0 … steps−1."""
    times = []
    for s in range(steps):
        sync(device)
        t0 = time.perf_counter()
        fn(s)
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def generation_table(args, device):
    contexts, steps = (64, 256, 1024), args.gen_steps
    print(f"\ngeneration, DecoderLM d=128, 4 layers, 4 heads, batch 1, on {device}: ms per new token at a "
          f"context of t tokens (median of {steps} steps); last column: cached cost at t=1024 / at t=64")
    print(f"{'pos':>10} " + " ".join(f"{'t=' + str(t) + ' full':>11} {'cache':>6}" for t in contexts)
          + f" {'cache 1024/64':>14}")
    for pos in POSITION_SCHEMES:
        torch.manual_seed(0)
        model = tfmlib.DecoderLM(args.vocab, d_model=128, n_heads=4, n_layers=4, max_len=max(contexts) + 16,
                                 pos=pos, norm_first=True).to(device).eval()
        cells, cached = [], []
        for t in contexts:
            idx = torch.randint(0, args.vocab, (1, t + steps), device=device)
            cache = model.new_cache(t + steps)
            with torch.no_grad():
                full = per_step(lambda s: model(idx[:, : t + s + 1]), steps, device)   # the whole prefix
                model(idx[:, :t], cache=cache)
                fast = per_step(lambda s: model(idx[:, t + s: t + s + 1], cache=cache), steps, device)
            cached.append(fast)
            cells.append(f"{1e3 * full:11.2f} {1e3 * fast:6.2f}")
        print(f"{pos:>10} " + " ".join(cells) + f" {cached[-1] / cached[0]:14.2f}", flush=True)


def load_nanogpt(path: str):
    """nanoGPT's model.py as a module, imported from ``path`` (never copied into this repository)."""
    if not os.path.exists(path):
        raise SystemExit(f"nanoGPT's model.py not found at {path}: pass --nanogpt PATH")
    spec = importlib.util.spec_from_file_location("nanogpt_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def nanogpt_table(args, device):
    """Chapter 9's model against nanoGPT's at the same shape: tokens per second of a training step."""
    nanogpt = load_nanogpt(args.nanogpt)
    vocab, t, batch = 512, 128, 8
    torch.manual_seed(0)
    ours = tfmlib.modern_gpt(vocab, d_model=128, n_heads=4, n_layers=4, n_kv_heads=2, max_len=t).to(device).train()
    config = nanogpt.GPTConfig(block_size=t, vocab_size=vocab, n_layer=4, n_head=4, n_embd=128, dropout=0.0, bias=False)
    theirs = nanogpt.GPT(config).to(device).train()
    theirs_step = train_step_fn(theirs, batch, t, vocab, device, loss_fn=lambda x, y: theirs(x, y)[1])  # its own loss
    best = interleaved({"tfmlib": train_step_fn(ours, batch, t, vocab, device), "nanoGPT": theirs_step},
                       args.rounds, device)
    n_ours, n_theirs = (sum(p.numel() for p in m.parameters()) for m in (ours, theirs))
    tok = batch * t
    print(f"chapter 9 vs nanoGPT, training step, 4 layers, 4 heads, d=128, vocab {vocab}, T={t}, batch {batch}, "
          f"on {device} ({torch.get_num_threads()} threads), best of {args.rounds} interleaved rounds: "
          f"tfmlib.modern_gpt {tok / best['tfmlib']:.0f} tok/s ({n_ours:,} parameters), "
          f"nanoGPT {tok / best['nanoGPT']:.0f} tok/s ({n_theirs:,} parameters), "
          f"nanoGPT/tfmlib time {best['nanoGPT'] / best['tfmlib']:.2f}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    p.add_argument("--vocab", type=int, default=65)
    p.add_argument("--skip-generation", action="store_true")
    p.add_argument("--bias", action=argparse.BooleanOptionalAction, default=False,
                   help="biases in tfmlib's DecoderLM (nanoGPT's CPU config has none; the references as described)")
    p.add_argument("--gen-steps", type=int, default=16, help="decoding steps timed per context length")
    p.add_argument("--devices", default=None, help="comma-separated; default: cpu, and cuda when present")
    p.add_argument("--nanogpt", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "bench",
                                                     "nanogpt", "model.py"),
                   help="nanoGPT's model.py, imported at run time for chapter 9's comparison")
    p.add_argument("--skip-nanogpt", action="store_true")
    p.add_argument("--only-nanogpt", action="store_true", help="chapter 9's comparison alone")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    devices = args.devices.split(",") if args.devices else ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for name in devices:
        device = torch.device(name)
        if not args.only_nanogpt:
            training_table(args, device)
            if not args.skip_generation:
                generation_table(args, device)
        if not args.skip_nanogpt:
            nanogpt_table(args, device)
        print()


if __name__ == "__main__":
    main()

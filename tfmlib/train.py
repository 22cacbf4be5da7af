"""One small training loop for every chapter: AdamW, gradient clipping, a tqdm bar, a loss history."""
from __future__ import annotations

import math
import sys

import torch
import torch.nn.functional as F
from tqdm import tqdm

from .data import PAD


def sequence_loss(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = PAD) -> torch.Tensor:
    """Mean cross-entropy in nats per token: logits ``(B, T, V)``, targets ``(B, T)``; ``ignore_index`` skipped."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=ignore_index)


def lr_factor(step: int, steps: int, warmup: int = 0, decay: bool = False) -> float:
    """Learning-rate multiplier at ``step``: linear warm-up from 1/warmup to 1 over ``warmup`` steps,
    then 1, or (``decay``) a cosine from 1 down to 0.1 at the last step — chapter 6 (post-norm needs warm-up)."""
    if warmup < 0 or steps < 1:
        raise ValueError(f"need warmup >= 0 and steps >= 1, got warmup={warmup}, steps={steps}")
    if step < warmup:
        return (step + 1) / warmup
    if not decay:
        return 1.0
    progress = (step - warmup) / max(1, steps - 1 - warmup)
    return 0.1 + 0.45 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def train(model, loss_fn, steps: int, lr: float = 3e-3, weight_decay: float = 0.0, clip: float = 1.0,
          desc: str = "training", progress: bool = True, log_every: int = 1, warmup: int = 0,
          decay: bool = False):
    """Minimise ``loss_fn(step) -> scalar loss`` over ``model``'s parameters for ``steps`` steps.

    ``loss_fn`` builds its own batch (so each chapter decides its data) and returns the loss.
    The learning rate is ``lr`` times ``lr_factor(step, steps, warmup, decay)`` (1 by default).
    Returns the list of losses (floats), one every ``log_every`` steps.
    """
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, steps, warmup, decay))
    model.train()
    history = []
    bar = tqdm(range(steps), desc=desc, disable=not progress, file=sys.stdout, mininterval=10.0, ncols=80)
    for step in bar:
        loss = loss_fn(step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        sched.step()
        if step % log_every == 0:
            history.append(loss.item())
            bar.set_postfix(loss=f"{history[-1]:.3f}", refresh=False)
    model.eval()
    return history

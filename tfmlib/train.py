"""One small training loop for every chapter: AdamW, gradient clipping, a tqdm bar, a loss history."""
from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from tqdm import tqdm

from .data import PAD


def sequence_loss(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = PAD) -> torch.Tensor:
    """Mean cross-entropy in nats per token: logits ``(B, T, V)``, targets ``(B, T)``; ``ignore_index`` skipped."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=ignore_index)


def train(model, loss_fn, steps: int, lr: float = 3e-3, weight_decay: float = 0.0, clip: float = 1.0,
          desc: str = "training", progress: bool = True, log_every: int = 1):
    """Minimise ``loss_fn(step) -> scalar loss`` over ``model``'s parameters for ``steps`` steps.

    ``loss_fn`` builds its own batch (so each chapter decides its data) and returns the loss.
    Returns the list of losses (floats), one every ``log_every`` steps.
    """
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    model.train()
    history = []
    bar = tqdm(range(steps), desc=desc, disable=not progress, file=sys.stdout, mininterval=2.0, ncols=80)
    for step in bar:
        loss = loss_fn(step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        if step % log_every == 0:
            history.append(loss.item())
            bar.set_postfix(loss=f"{history[-1]:.3f}", refresh=False)
    model.eval()
    return history

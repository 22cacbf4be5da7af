"""Token ids shared by every task and model of the course, and right-padding of ragged batches.

PAD = 0 (skipped by ``tfmlib.train.sequence_loss``), BOS = 1, EOS = 2; the symbols of a task start at
``FIRST_SYMBOL`` = 3.
"""
from __future__ import annotations

import torch

PAD, BOS, EOS = 0, 1, 2
FIRST_SYMBOL = 3


def pad_batch(seqs, pad_id: int = PAD) -> torch.Tensor:
    """List of 1-D long tensors → ``(B, max_len)`` long tensor padded on the right with ``pad_id``."""
    if len(seqs) == 0:
        raise ValueError("seqs must hold at least one sequence, got an empty list")
    shapes = [tuple(s.shape) for s in seqs]
    if any(len(shape) != 1 for shape in shapes):
        raise ValueError(f"seqs must be 1-D tensors, got shapes {shapes}")
    max_len = max(len(s) for s in seqs)
    out = torch.full((len(seqs), max_len), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = s
    return out

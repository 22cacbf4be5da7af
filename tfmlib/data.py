"""Synthetic data for the chapters: generated on the spot, never downloaded.

Token ids: PAD = 0, BOS = 1, EOS = 2; task symbols start at ``FIRST_SYMBOL`` = 3.
"""
from __future__ import annotations

import torch

PAD, BOS, EOS = 0, 1, 2
FIRST_SYMBOL = 3


def pad_batch(seqs, pad_id: int = PAD) -> torch.Tensor:
    """List of 1-D long tensors → ``(B, max_len)`` long tensor padded on the right with ``pad_id``."""
    max_len = max(len(s) for s in seqs)
    out = torch.full((len(seqs), max_len), pad_id, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = s
    return out


class SyntheticTranslation:
    """A toy "language pair" with a fixed lexicon and word-order rule — chapters 2 and 6.

    Each source symbol s translates to ``lexicon[s]`` (a fixed random permutation of the symbols),
    and the target lists the translated words in reverse order, so the alignment between source
    position j and target position i is the anti-diagonal i = S − 1 − j.
    Vocabulary size (source and target alike) is ``FIRST_SYMBOL + n_symbols``.
    """

    def __init__(self, n_symbols: int = 20, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.n_symbols = n_symbols
        self.vocab_size = FIRST_SYMBOL + n_symbols
        self.lexicon = torch.arange(self.vocab_size)
        self.lexicon[FIRST_SYMBOL:] = FIRST_SYMBOL + torch.randperm(n_symbols, generator=g)

    def translate(self, src: torch.Tensor) -> torch.Tensor:
        """1-D source symbols (no specials) → 1-D target symbols."""
        return self.lexicon[src].flip(0)

    def batch(self, batch_size: int, min_len: int, max_len: int, generator: torch.Generator | None = None):
        """Random pairs with lengths in [min_len, max_len].

        Returns ``src (B, S)``, ``tgt_in (B, T+1)`` (BOS + target) and ``tgt_out (B, T+1)``
        (target + EOS), all PAD-padded.
        """
        lengths = torch.randint(min_len, max_len + 1, (batch_size,), generator=generator)
        srcs = [FIRST_SYMBOL + torch.randint(0, self.n_symbols, (int(n),), generator=generator) for n in lengths]
        tgts = [self.translate(s) for s in srcs]
        src = pad_batch(srcs)
        tgt_in = pad_batch([torch.cat([torch.tensor([BOS]), t]) for t in tgts])
        tgt_out = pad_batch([torch.cat([t, torch.tensor([EOS])]) for t in tgts])
        return src, tgt_in, tgt_out


def exact_match(pred: torch.Tensor, tgt_out: torch.Tensor) -> torch.Tensor:
    """Per-sequence exact match ``(B,)`` bool: pred ``(B, ≥T)`` equals tgt_out ``(B, T)`` up to and
    including its EOS (positions after EOS and padding are ignored)."""
    pred = pred[:, : tgt_out.shape[1]]
    if pred.shape[1] < tgt_out.shape[1]:
        return torch.zeros(len(tgt_out), dtype=torch.bool)
    care = tgt_out != PAD
    return ((pred == tgt_out) | ~care).all(dim=1)

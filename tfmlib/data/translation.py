"""A toy language pair and its exact-match score — chapters 2 and 6 (also 1 and 7)."""
from __future__ import annotations

import torch

from .task import Task, check_positive
from .tokens import BOS, EOS, FIRST_SYMBOL, PAD, pad_batch


class SyntheticTranslation(Task):
    """A toy "language pair" with a fixed lexicon and word-order rule — chapters 2 and 6.

    Each source symbol s translates to ``lexicon[s]`` (a fixed random permutation of the symbols,
    drawn from ``seed``), and the target lists the translated words in reverse order, so the alignment
    between source position j and target position i is the anti-diagonal i = S − 1 − j.  Sentences have
    ``min_len`` to ``max_len`` words.  Vocabulary size (source and target alike) is
    ``FIRST_SYMBOL + n_symbols``.
    """

    def __init__(self, n_symbols: int = 20, min_len: int = 1, max_len: int = 12, seed: int = 0):
        check_positive(n_symbols=n_symbols, min_len=min_len)
        if max_len < min_len:
            raise ValueError(f"max_len must be >= min_len, got min_len={min_len}, max_len={max_len}")
        g = torch.Generator().manual_seed(seed)
        self.n_symbols, self.min_len, self.max_len = n_symbols, min_len, max_len
        self.vocab_size = FIRST_SYMBOL + n_symbols
        self.lexicon = torch.arange(self.vocab_size)
        self.lexicon[FIRST_SYMBOL:] = FIRST_SYMBOL + torch.randperm(n_symbols, generator=g)

    def translate(self, src: torch.Tensor) -> torch.Tensor:
        """1-D source symbols (no specials) → 1-D target symbols."""
        return self.lexicon[src].flip(0)

    def batch(self, batch_size: int, generator: torch.Generator | None = None, *, length: int | None = None):
        """Random pairs: ``src (B, S)``, ``tgt_in (B, T+1)`` (BOS + target), ``tgt_out (B, T+1)``
        (target + EOS), all PAD-padded; S = T = the longest sentence of the batch.

        ``length`` None draws each sentence's length uniformly from [min_len, max_len]; an int gives
        every sentence that length (to test by length, also beyond the training range).
        """
        check_positive(batch_size=batch_size)
        if length is not None:
            check_positive(length=length)
        lo, hi = (self.min_len, self.max_len) if length is None else (length, length)
        lengths = torch.randint(lo, hi + 1, (batch_size,), generator=generator)
        srcs = [FIRST_SYMBOL + torch.randint(0, self.n_symbols, (int(n),), generator=generator) for n in lengths]
        tgts = [self.translate(s) for s in srcs]
        src = pad_batch(srcs)
        tgt_in = pad_batch([torch.cat([torch.tensor([BOS]), t]) for t in tgts])
        tgt_out = pad_batch([torch.cat([t, torch.tensor([EOS])]) for t in tgts])
        return src, tgt_in, tgt_out


def exact_match(pred: torch.Tensor, tgt_out: torch.Tensor) -> torch.Tensor:
    """Per-sequence exact match ``(B,)`` bool: pred ``(B, ≥T)`` equals tgt_out ``(B, T)`` up to and
    including its EOS (positions after EOS and padding are ignored)."""
    if pred.dim() != 2 or tgt_out.dim() != 2 or len(pred) != len(tgt_out):
        raise ValueError(f"pred and tgt_out must be (B, ·) with the same B, "
                         f"got shapes {tuple(pred.shape)} and {tuple(tgt_out.shape)}")
    pred = pred[:, : tgt_out.shape[1]]
    if pred.shape[1] < tgt_out.shape[1]:
        return torch.zeros(len(tgt_out), dtype=torch.bool)
    care = tgt_out != PAD
    return ((pred == tgt_out) | ~care).all(dim=1)

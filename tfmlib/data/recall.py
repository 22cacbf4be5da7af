"""Long-range recall: name the one marked symbol of a sequence — chapters 1 and 7."""
from __future__ import annotations

import torch

from .task import Task, check_positive
from .tokens import FIRST_SYMBOL


class MarkedRecall(Task):
    """Long-range recall — chapter 1: read a sequence, then name the one symbol that was marked.

    A sequence holds ``seq_len`` random symbols; exactly one of them is *marked* (it uses a second
    copy of the alphabet, ids ``FIRST_SYMBOL + n_symbols + s``).  The answer is the marked symbol's
    class ``s`` in ``[0, n_symbols)``.  The *distance* is the number of steps from the marked token
    to the end, ``seq_len − 1 − position``: how long a recurrent model must carry the answer.
    Vocabulary size is ``FIRST_SYMBOL + 2 · n_symbols``; chance accuracy is ``1 / n_symbols``.
    """

    def __init__(self, n_symbols: int = 8, seq_len: int = 64):
        if n_symbols < 2 or seq_len < 1:
            raise ValueError(f"n_symbols must be ≥ 2 and seq_len ≥ 1, got n_symbols={n_symbols}, seq_len={seq_len}")
        self.n_symbols, self.seq_len = n_symbols, seq_len
        self.vocab_size = FIRST_SYMBOL + 2 * n_symbols

    def batch(self, batch_size: int, generator: torch.Generator | None = None, *, distance: int | None = None):
        """``tokens (B, seq_len)`` long, ``target (B,)`` classes, ``distance (B,)`` long.

        ``distance`` None draws it uniformly from ``[0, seq_len)``; an int fixes it for the whole batch.
        """
        check_positive(batch_size=batch_size)
        n, t = self.n_symbols, self.seq_len
        if distance is None:
            distance = torch.randint(0, t, (batch_size,), generator=generator)
        elif not 0 <= int(distance) < t:
            raise ValueError(f"distance must lie in [0, seq_len={t}), got {distance}")
        else:
            distance = torch.full((batch_size,), int(distance), dtype=torch.long)
        symbols = torch.randint(0, n, (batch_size, t), generator=generator)
        rows, pos = torch.arange(batch_size), t - 1 - distance
        tokens = FIRST_SYMBOL + symbols
        tokens[rows, pos] += n  # the marked copy of the same symbol
        return tokens, symbols[rows, pos], distance

"""The one interface every sequence task of the course follows.

A task is built once with everything that shapes its data (alphabet size, lengths, lag, …) and then
only draws batches::

    task = CopyTask(n_symbols=8, half_len=8)
    x, y = task.batch(64, generator=g)       # a tuple of long tensors, first dimension 64

``task.vocab_size`` is the number of token ids; every token tensor holds ids in ``[0, vocab_size)``
with the conventions of ``tokens.py`` (PAD = 0, BOS = 1, EOS = 2, symbols from 3 on).  The only
randomness is ``generator``: the same seed gives the same batch.  What each task returns:

=========================  ========  =============================================================
task                       chapters  ``batch(B)`` returns
=========================  ========  =============================================================
``SyntheticTranslation``   1 2 6 7   src ``(B, S)``, tgt_in ``(B, T+1)``, tgt_out ``(B, T+1)``
``MarkedRecall``           1 7       tokens ``(B, seq_len)``, class ``(B,)``, distance ``(B,)``
``CopyTask``               3         x ``(B, 2·half_len)``, y ``(B, 2·half_len)``
``TwoRelationTask``        4         x ``(B, n_keys + n_queries)``, y the same shape
``LagTask``                5         x ``(B, seq_len)``, y ``(B, seq_len)``
=========================  ========  =============================================================

(MarkedRecall's class and distance are not token ids: they lie in ``[0, n_symbols)`` and
``[0, seq_len)``.)  Two tasks add a keyword for evaluation that fixes what is otherwise drawn:
``MarkedRecall.batch(B, g, distance=k)`` and ``SyntheticTranslation.batch(B, g, length=n)``.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import torch


class Task(ABC):
    """A sequence task: ``vocab_size`` token ids and ``batch(batch_size, generator)`` → long tensors."""

    vocab_size: int

    @abstractmethod
    def batch(self, batch_size: int, generator: torch.Generator | None = None) -> tuple[torch.Tensor, ...]:
        """A fresh batch: a tuple of long tensors whose first dimension is ``batch_size``."""


def check_positive(**sizes: int) -> None:
    """Raise ``ValueError`` naming every argument below 1, e.g. ``check_positive(batch_size=0)``."""
    bad = [f"{name} must be >= 1, got {value}" for name, value in sizes.items() if value < 1]
    if bad:
        raise ValueError("; ".join(bad))

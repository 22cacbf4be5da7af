"""Probe tasks of chapters 3–5, each solvable only by attending to the right positions:
copy the first half (``CopyTask``, chapter 3), combine an offset with a lookup (``TwoRelationTask``,
chapter 4), repeat the token a fixed number of steps back (``LagTask``, chapter 5)."""
from __future__ import annotations

import torch

from .task import Task, check_positive
from .tokens import BOS, FIRST_SYMBOL, PAD


class CopyTask(Task):
    """Next-token data for the sequence BOS a_1 … a_m a_1 … a_m (m = ``half_len``) — chapter 3.

    The a_i are uniform over ``n_symbols`` symbols (ids ``FIRST_SYMBOL`` …).  ``batch`` returns x
    ``(B, 2m)`` = BOS a_1 … a_m a_1 … a_{m−1} and y ``(B, 2m)`` = a_1 … a_m a_1 … a_m, so
    y[:, t] = x[:, t + 1].  Targets 0 … m−1 are random (no model can beat ln(n_symbols) nats there);
    targets m … 2m−1 repeat the first half: position t ≥ m must copy x[:, t − m + 1].
    """

    def __init__(self, n_symbols: int, half_len: int):
        check_positive(n_symbols=n_symbols, half_len=half_len)
        self.n_symbols, self.half_len = n_symbols, half_len
        self.seq_len = 2 * half_len
        self.vocab_size = FIRST_SYMBOL + n_symbols

    def batch(self, batch_size: int, generator: torch.Generator | None = None):
        """x ``(B, 2m)`` and y ``(B, 2m)``, the sequence and its shift by one."""
        check_positive(batch_size=batch_size)
        a = FIRST_SYMBOL + torch.randint(self.n_symbols, (batch_size, self.half_len), generator=generator)
        seq = torch.cat([torch.full((batch_size, 1), BOS), a, a], dim=1)
        return seq[:, :-1], seq[:, 1:]


class TwoRelationTask(Task):
    """Each answer needs a fixed-offset relation and a content (key-matching) relation — chapter 4.

    A sequence is a dictionary of ``n_keys`` tokens "k=v" (every key once, in random order, each
    with a random value v < ``n_values``) followed by ``n_queries`` query tokens "k?" (random keys).
    The answer at query position t is the token "a=b" where
      a = the key of the token at t − 1 (relation 1: fixed offset −1), and
      b = the value that the dictionary gives to the key of "k?" at t (relation 2: content lookup).
    Ids: "k=v" is ``FIRST_SYMBOL + k·n_values + v``, "k?" is ``FIRST_SYMBOL + n_keys·n_values + k``.
    """

    def __init__(self, n_keys: int = 8, n_values: int = 4, n_queries: int = 8):
        if n_keys < 2 or n_values < 2 or n_queries < 1:
            raise ValueError(f"need n_keys >= 2, n_values >= 2, n_queries >= 1, "
                             f"got n_keys={n_keys}, n_values={n_values}, n_queries={n_queries}")
        self.n_keys, self.n_values, self.n_queries = n_keys, n_values, n_queries
        self.seq_len = n_keys + n_queries
        self.vocab_size = FIRST_SYMBOL + n_keys * n_values + n_keys

    def batch(self, batch_size: int, generator: torch.Generator | None = None):
        """x ``(B, T)`` tokens and y ``(B, T)`` answers, T = n_keys + n_queries; y is PAD on the dictionary."""
        check_positive(batch_size=batch_size)
        b, nk, nv = batch_size, self.n_keys, self.n_values
        keys = torch.argsort(torch.rand(b, nk, generator=generator), dim=1)      # a permutation per row
        values = torch.randint(nv, (b, nk), generator=generator)
        queries = torch.randint(nk, (b, self.n_queries), generator=generator)
        x = torch.cat([FIRST_SYMBOL + keys * nv + values, FIRST_SYMBOL + nk * nv + queries], dim=1)
        prev_key = torch.cat([keys[:, -1:], queries[:, :-1]], dim=1)              # relation 1
        slot = torch.argsort(keys, dim=1).gather(1, queries)                      # where each key sits
        looked_up = values.gather(1, slot)                                        # relation 2
        y = torch.full_like(x, PAD)
        y[:, nk:] = FIRST_SYMBOL + prev_key * nv + looked_up
        return x, y

    def split_answer(self, ids: torch.Tensor):
        """Answer ids "a=b" → (a, b): the offset part and the lookup part."""
        z = ids - FIRST_SYMBOL
        return z // self.n_values, z % self.n_values

    def relation_positions(self, x: torch.Tensor):
        """For each query position t: (t − 1, position of the dictionary entry with t's key), each ``(B, Q)``."""
        nk, nv = self.n_keys, self.n_values
        if x.dim() != 2 or x.shape[1] != self.seq_len:
            raise ValueError(f"x must be (B, {self.seq_len}), got shape {tuple(x.shape)}")
        keys = (x[:, :nk] - FIRST_SYMBOL) // nv
        queries = x[:, nk:] - FIRST_SYMBOL - nk * nv
        offset_pos = torch.arange(nk - 1, self.seq_len - 1).expand(len(x), -1)
        match_pos = torch.argsort(keys, dim=1).gather(1, queries)
        return offset_pos, match_pos


class LagTask(Task):
    """The task "output the token ``lag`` steps back" — chapter 5's position experiment.

    x ``(B, seq_len)`` holds uniform random symbols (ids ``FIRST_SYMBOL`` …); y ``(B, seq_len)`` is
    y[:, t] = x[:, t − lag] for t ≥ lag and PAD (ignored by the loss) for t < lag.  The answer is
    fixed by an offset alone, never by content, so a model needs positions to find it.
    Vocabulary size is ``FIRST_SYMBOL + n_symbols``.
    """

    def __init__(self, seq_len: int, lag: int, n_symbols: int = 10):
        check_positive(seq_len=seq_len, lag=lag, n_symbols=n_symbols)
        if lag >= seq_len:
            raise ValueError(f"lag must be < seq_len (else no position has a target), "
                             f"got lag={lag}, seq_len={seq_len}")
        self.seq_len, self.lag, self.n_symbols = seq_len, lag, n_symbols
        self.vocab_size = FIRST_SYMBOL + n_symbols

    def batch(self, batch_size: int, generator: torch.Generator | None = None):
        """x ``(B, seq_len)`` symbols and y ``(B, seq_len)``, x shifted right by ``lag`` (PAD before)."""
        check_positive(batch_size=batch_size)
        x = FIRST_SYMBOL + torch.randint(self.n_symbols, (batch_size, self.seq_len), generator=generator)
        y = torch.full_like(x, PAD)
        y[:, self.lag:] = x[:, :-self.lag]
        return x, y

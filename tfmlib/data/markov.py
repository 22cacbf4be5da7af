"""A random order-k Markov chain whose entropy rate is known: the data of the scaling-law runs — chapter 8.

A *source*, not a task: ``sample(batch_size, length, generator)`` draws sequences of any length, and
``entropy_rate()`` is the loss floor no model can beat.
"""
from __future__ import annotations

import torch

from .task import check_positive


class MarkovSource:
    """A random order-k Markov chain over ``vocab_size`` symbols whose entropy rate is known — chapter 8.

    Symbol x_t depends on the ``order`` symbols before it (its context c) through a fixed table
    ``probs[c, x] ∝ exp(sharpness · z_{c,x}) / (x + 1)^zipf``, z ~ N(0, 1) drawn once from ``seed``; the
    ``zipf`` factor makes low symbols common and high ones rare, as words are in text.  Contexts are
    numbered c = Σ_i x_{t−k+i} · V^(k−1−i).  Sequences start from the stationary distribution, so every
    position t ≥ order has the same expected loss under the true model: the entropy rate
    H = Σ_c π_c · H(probs[c]) in nats per token (eq. 8.5), the floor no language model can go below.
    Symbols are 0 … V−1 (no PAD/BOS/EOS: use a cross-entropy that ignores no id).
    """

    def __init__(self, vocab_size: int = 64, order: int = 1, sharpness: float = 2.0, zipf: float = 0.0,
                 seed: int = 0):
        if vocab_size < 2 or order < 1 or vocab_size ** order > 2 ** 20:
            raise ValueError(f"need vocab_size >= 2, order >= 1 and vocab_size**order <= 2**20, "
                             f"got vocab_size={vocab_size}, order={order}")
        g = torch.Generator().manual_seed(seed)
        self.vocab_size, self.order = vocab_size, order
        self.n_contexts = vocab_size ** order
        z = torch.randn(self.n_contexts, vocab_size, generator=g, dtype=torch.float64)
        rank = torch.arange(1, vocab_size + 1, dtype=torch.float64)
        self.probs = torch.softmax(sharpness * z - zipf * rank.log(), dim=-1)   # (V^k, V)
        self.stationary = self._stationary()                        # (V^k,)

    def _stationary(self, tol: float = 1e-15, max_iter: int = 100_000) -> torch.Tensor:
        """π over contexts with π = π M, M the context-to-context transition matrix, by power iteration."""
        v, rest = self.vocab_size, self.n_contexts // self.vocab_size
        pi = torch.full((self.n_contexts,), 1.0 / self.n_contexts, dtype=torch.float64)
        for _ in range(max_iter):
            # (x_{t-k}, rest) --x_t--> (rest, x_t): mass leaving c is π_c·probs[c], summed over x_{t-k}.
            new = (pi[:, None] * self.probs).view(v, rest, v).sum(0).reshape(-1)
            if (new - pi).abs().max() < tol:
                return new
            pi = new
        raise RuntimeError("the stationary distribution did not converge")

    def entropy_rate(self) -> float:
        """H = Σ_c π_c · (−Σ_x p(x|c) ln p(x|c)), in nats per token."""
        h_c = -(self.probs * self.probs.log()).sum(-1)
        return float((self.stationary * h_c).sum())

    def _context_ids(self, x: torch.Tensor) -> torch.Tensor:
        """x ``(B, T)`` → the context number ending at each position t ≥ order−1, ``(B, T − order + 1)``."""
        c = torch.zeros_like(x[:, self.order - 1:])
        for i in range(self.order):
            c = c * self.vocab_size + x[:, i: x.shape[1] - self.order + 1 + i]
        return c

    def sample(self, batch_size: int, length: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """``(batch_size, length)`` long symbols; the first ``order`` come from π, the rest from the chain."""
        check_positive(batch_size=batch_size)
        if length < self.order:
            raise ValueError(f"length must be >= order={self.order}, got {length}")
        c = torch.multinomial(self.stationary, batch_size, replacement=True, generator=generator)
        x = torch.empty(batch_size, length, dtype=torch.long)
        for i in range(self.order):                                 # decode c into its k symbols
            x[:, i] = (c // self.vocab_size ** (self.order - 1 - i)) % self.vocab_size
        for t in range(self.order, length):
            x[:, t] = torch.multinomial(self.probs[c], 1, generator=generator).squeeze(1)
            c = (c * self.vocab_size + x[:, t]) % self.n_contexts
        return x

    def nll(self, x: torch.Tensor) -> torch.Tensor:
        """−ln p(x_t | x_{t−k:t}) under the true chain for t ≥ order: x ``(B, T)`` → ``(B, T − order)``."""
        if x.dim() != 2 or x.shape[1] <= self.order:
            raise ValueError(f"x must be (B, T) with T > order={self.order}, got shape {tuple(x.shape)}")
        c = self._context_ids(x[:, :-1])
        return -self.probs[c, x[:, self.order:]].log()

"""The cost of attention and cheaper ways to compute it — chapter 7.

Sparse patterns of the notes as masks: ``sliding_window_mask``, ``global_mask``, ``random_mask``.
A truly banded computation, O(n·w): ``banded_attention``.  Exact attention in O(n) extra memory with an
online softmax: ``blockwise_attention``.  Measuring: ``time_fn`` and ``peak_memory``.
The fused attention path (``attention.fast_attention``) and the KV cache (``attention.KVCache``,
``DecoderLM.generate``) live in the modules they speed up.
Mask convention as everywhere in tfmlib: boolean, ``True`` = this query may attend to this key.
"""
from __future__ import annotations

import contextlib
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

from .utils import check_tensor


def _check_n(n):
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")


# --- the notes' sparse patterns, as masks (chapter 7, section "Sparse attention") -----------------------------

def sliding_window_mask(n: int, window: int, device=None) -> torch.Tensor:
    """``(n, n)`` bool, True where |i − j| ≤ window: each query sees its 2w+1 neighbours — eq. (7.2)."""
    _check_n(n)
    if not isinstance(window, int) or window < 0:
        raise ValueError(f"window must be an int >= 0, got {window!r}")
    i = torch.arange(n, device=device)
    return (i[:, None] - i[None, :]).abs() <= window


def global_mask(n: int, global_idx, device=None) -> torch.Tensor:
    """``(n, n)`` bool, True in every row and every column of the positions ``global_idx`` — eq. (7.3).

    A global position attends to all positions, and all positions attend to it.
    """
    _check_n(n)
    idx = torch.as_tensor(global_idx, dtype=torch.long, device=device).reshape(-1)
    if len(idx) and (idx.min() < 0 or idx.max() >= n):
        raise ValueError(f"global_idx must lie in [0, n={n}), got {idx.tolist()}")
    is_global = torch.zeros(n, dtype=torch.bool, device=device)
    is_global[idx] = True
    return is_global[:, None] | is_global[None, :]


def random_mask(n: int, n_random: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """``(n, n)`` bool: each row has exactly ``n_random`` True keys, drawn without replacement — eq. (7.4).

    The keys of each row are the first ``n_random`` entries of a random permutation drawn with ``generator``
    (a CPU ``torch.Generator``; None uses the global seed).  The mask lives on the CPU.
    """
    _check_n(n)
    if not isinstance(n_random, int) or not 0 <= n_random <= n:
        raise ValueError(f"n_random must be an int in [0, n={n}], got {n_random!r}")
    # argsort of i.i.d. uniforms is a uniformly random permutation of each row
    keys = torch.rand(n, n, generator=generator).argsort(dim=-1)[:, :n_random]
    mask = torch.zeros(n, n, dtype=torch.bool)
    return mask.scatter_(1, keys, True)


def allowed_pairs(mask: torch.Tensor) -> int:
    """Number of (query, key) pairs a mask allows: the work a sparse kernel would do, vs n² for dense."""
    return int(mask.sum())


# --- attention computed only on the band: O(n·w) time and memory ---------------------------------------------

def banded_attention(q, k, v, window: int, scale: float | None = None):
    """Attention of each query i to keys i−w … i+w only, computed without any (n, n) tensor — eq. (7.5).

    q, k ``(..., T, D)``, v ``(..., T, Dv)`` (self-attention: same T).  Keys and values are padded by w on
    both sides and ``unfold`` takes the 2w+1 neighbours of every position, so the scores are ``(..., T, 2w+1)``:
    time and memory O(T·w·D).  Equals ``scaled_dot_product_attention(q, k, v, sliding_window_mask(T, w))``.
    Returns out ``(..., T, Dv)``.
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, x, 2)
    if not (q.shape[:-1] == k.shape[:-1] == v.shape[:-1]) or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"banded_attention needs q, k (..., T, D) and v (..., T, Dv) with the same (..., T), "
                         f"got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if not isinstance(window, int) or window < 0:
        raise ValueError(f"window must be an int >= 0, got {window!r}")
    t, w = q.shape[-2], window
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    # (..., T + 2w, D) → view (..., T, D, 2w+1): column r of row i is key i − w + r
    k_win = F.pad(k, (0, 0, w, w)).unfold(-2, 2 * w + 1, 1)
    v_win = F.pad(v, (0, 0, w, w)).unfold(-2, 2 * w + 1, 1)
    scores = (q.unsqueeze(-2) @ k_win).squeeze(-2) * scale           # (..., T, 2w+1)
    j = torch.arange(t, device=q.device)[:, None] - w + torch.arange(2 * w + 1, device=q.device)
    scores = scores.masked_fill((j < 0) | (j >= t), float("-inf"))  # neighbours that fall off the ends
    weights = torch.softmax(scores, dim=-1)
    return (v_win @ weights.unsqueeze(-1)).squeeze(-1)               # (..., T, Dv)


# --- exact attention, keys in blocks, online softmax: O(n) extra memory -----------------------------------------

def blockwise_attention(q, k, v, block_size: int, scale: float | None = None):
    """softmax(q kᵀ / √D) v with the keys processed ``block_size`` at a time — eq. (7.6)–(7.8).

    q ``(..., Tq, D)``, k ``(..., Tk, D)``, v ``(..., Tk, Dv)``; leading dimensions broadcast.
    For each block the running row maximum m, the running denominator ℓ and the unnormalised output are
    rescaled by exp(m_old − m_new) (the online softmax, Milakov & Gimelshein 2018), so the result equals
    unmasked ``scaled_dot_product_attention`` up to rounding while the largest score tensor held is
    ``(..., Tq, block_size)``, never ``(..., Tq, Tk)`` — in the forward pass.  Under autograd every block's
    scores and exponentials are kept for the backward pass, O(Tq·Tk) memory again; FlashAttention's backward
    recomputes them instead (chapter 7).  Returns out ``(..., Tq, Dv)`` (no weights).
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, x, 2)
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(f"blockwise_attention needs q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv), "
                         f"got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size must be a positive int, got {block_size!r}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    rows = (*batch, q.shape[-2])
    m = torch.full((*rows, 1), float("-inf"), dtype=q.dtype, device=q.device)   # running max
    denom = torch.zeros((*rows, 1), dtype=q.dtype, device=q.device)             # running Σ exp
    acc = torch.zeros((*rows, v.shape[-1]), dtype=q.dtype, device=q.device)     # running Σ exp · v
    for start in range(0, k.shape[-2], block_size):
        k_blk, v_blk = k[..., start:start + block_size, :], v[..., start:start + block_size, :]
        s = (q @ k_blk.transpose(-2, -1)) * scale                           # (..., Tq, b)
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        p = torch.exp(s - m_new)
        correction = torch.exp(m - m_new)                                   # 0 on the first block
        denom = denom * correction + p.sum(dim=-1, keepdim=True)
        acc = acc * correction + p @ v_blk
        m = m_new
    return acc / denom


# --- measuring ---------------------------------------------------------------------------------------------------

def time_fn(fn, repeats: int = 5, warmup: int = 1) -> float:
    """Best (smallest) wall time of ``fn()`` in seconds over ``repeats`` runs, after ``warmup`` runs.

    The minimum is the run least disturbed by other programs on the machine.
    """
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return min(times)


@contextlib.contextmanager
def _quiet_stderr():
    """Silence file descriptor 2 for a moment: the profiler's C++ side logs its start and stop there."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def peak_memory(fn, device=None) -> int:
    """Peak bytes of tensors allocated while ``fn()`` runs, above what was allocated before.

    On CUDA: ``torch.cuda.max_memory_allocated``.  On the CPU, PyTorch keeps no such counter, so the
    profiler records every allocation and free (``profile_memory=True``) and we replay them in time order.
    Python's ``tracemalloc`` would not see tensor memory at all.
    """
    device = torch.device(device) if device is not None else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - base
    from torch.profiler import ProfilerActivity, profile
    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted(prof.events(), key=lambda e: e.time_range.start)
    live = peak = 0
    for e in events:  # allocations are booked on the op that made them, frees on "[memory]" events
        live += e.self_cpu_memory_usage
        peak = max(peak, live)
    return peak

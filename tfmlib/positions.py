"""Position representations — chapter 5.

Absolute: ``sinusoidal_positions`` (Vaswani et al., 2017) and ``LearnedPositions``.
Relative: Shaw et al. (2018), ``relative_position_index`` and ``RelativePositions`` (a^K and a^V).
Beyond the notes: rotary embeddings (``rope``, Su et al., 2021) and ``alibi_bias`` (Press et al., 2022).
Each relative scheme also has a ``MultiHeadAttention`` subclass that uses it.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .attention import MultiHeadAttention, causal_mask_offset, scaled_dot_product_attention
from .utils import check_tensor


def sinusoidal_positions(n: int, d: int) -> torch.Tensor:
    """``(n, d)`` table: PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(p / 10000^(2i/d)) — eq. (5.2)."""
    if n < 1 or d < 2 or d % 2:
        raise ValueError(f"sinusoidal_positions needs n >= 1 and an even d >= 2, got n={n}, d={d}")
    p = torch.arange(n, dtype=torch.float64)[:, None]
    freq = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    pe = torch.zeros(n, d, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(p * freq)
    pe[:, 1::2] = torch.cos(p * freq)
    return pe.float()


def sinusoidal_offset_matrix(k: int, d: int) -> torch.Tensor:
    """``(d, d)`` matrix M_k with PE[p + k] = M_k PE[p] for every p — chapter 5, eq. (5.3).

    Block diagonal: the pair (sin pω_i, cos pω_i), ω_i = 10000^(−2i/d), is turned by the angle kω_i,
    block [[cos kω_i, sin kω_i], [−sin kω_i, cos kω_i]].  M_k depends on the offset k, never on p.
    """
    if d < 2 or d % 2:
        raise ValueError(f"sinusoidal_offset_matrix needs an even d >= 2, got d={d}")
    angle = k * 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    m = torch.zeros(d, d, dtype=torch.float64)
    i = torch.arange(0, d, 2)
    m[i, i], m[i, i + 1] = angle.cos(), angle.sin()
    m[i + 1, i], m[i + 1, i + 1] = -angle.sin(), angle.cos()
    return m


class SinusoidalPositions(nn.Module):
    """Adds the fixed sinusoidal table to token embeddings: x ``(B, T, d)`` → ``(B, T, d)``.

    The T tokens take positions start … start+T−1 (``start`` > 0 after a KV cache, chapter 7).
    """

    def __init__(self, d_model: int, max_len: int = 4096):
        super().__init__()
        self.register_buffer("table", sinusoidal_positions(max_len, d_model), persistent=False)

    def forward(self, x, start: int = 0):
        end = start + x.shape[1]
        if end > self.table.shape[0]:
            raise ValueError(f"sequence length {end} exceeds max_len={self.table.shape[0]}")
        return x + self.table[start:end].to(x.dtype)


class LearnedPositions(nn.Module):
    """One trained vector per absolute position: x ``(B, T, d)`` → x + P[:T] — eq. (5.4).

    It has no vector for positions ≥ ``max_len``: longer inputs raise ValueError.  The T tokens take
    positions start … start+T−1 (``start`` > 0 after a KV cache, chapter 7).
    """

    def __init__(self, d_model: int, max_len: int):
        super().__init__()
        self.table = nn.Embedding(max_len, d_model)
        nn.init.normal_(self.table.weight, std=0.02)

    def forward(self, x, start: int = 0):
        end = start + x.shape[1]
        if end > self.table.num_embeddings:
            raise ValueError(f"sequence length {end} exceeds the {self.table.num_embeddings} learned positions")
        return x + self.table(torch.arange(start, end, device=x.device))


def relative_position_index(n: int, k: int, device=None, n_queries: int | None = None) -> torch.Tensor:
    """``(n, n)`` long: clip(j − i, −k, k) + k, the row of w^K / w^V that pair (i, j) uses — eq. (5.5).

    With ``n_queries`` only the rows of the last n_queries positions, ``(n_queries, n)`` (a KV cache).
    """
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    pos = torch.arange(n, device=device)
    rows = pos if n_queries is None else pos[n - n_queries:]
    return (pos[None, :] - rows[:, None]).clamp(-k, k) + k


class RelativePositions(nn.Module):
    """Shaw et al.'s tables w^K, w^V of shape ``(2k+1, d_head)``; ``forward(n)`` → (a^K, a^V), each ``(n, n, d_head)``
    (``(n_queries, n, d_head)`` for the last n_queries queries only)."""

    def __init__(self, d_head: int, k: int):
        super().__init__()
        self.k = k
        self.w_k = nn.Embedding(2 * k + 1, d_head)
        self.w_v = nn.Embedding(2 * k + 1, d_head)

    def forward(self, n: int, n_queries: int | None = None):
        idx = relative_position_index(n, self.k, device=self.w_k.weight.device, n_queries=n_queries)
        return self.w_k(idx), self.w_v(idx)


def relative_attention(q, k, v, a_k, a_v, mask=None):
    """Shaw et al.'s attention — eq. (5.6):
    e_ij = (q_i·k_j + q_i·a^K_ij) / √d,  z_i = Σ_j α_ij (v_j + a^V_ij).

    q ``(..., Tq, d)``, k, v ``(..., n, d)``; a_k, a_v ``(Tq, n, d)``; returns (z ``(..., Tq, d)``, α ``(..., Tq, n)``).
    """
    d = q.shape[-1]
    bias = torch.einsum("...id,ijd->...ij", q, a_k) / math.sqrt(d)
    out, weights = scaled_dot_product_attention(q, k, v, mask=mask, bias=bias)
    return out + torch.einsum("...ij,ijd->...id", weights, a_v), weights


def rope(x, base: float = 10000.0, offset: int = 0):
    """Rotary position embedding: rotate each feature pair (2i, 2i+1) of x ``(..., T, d)`` by angle
    p·θ_i, θ_i = base^(−2i/d), p = offset … offset+T−1 — Su et al. (2021).  Returns ``(..., T, d)``.

    After rotation, q_p·k_r depends on p and r only through r − p — chapter 5, eq. (5.7).
    """
    check_tensor("x", x, 2)
    t, d = x.shape[-2], x.shape[-1]
    if d % 2:
        raise ValueError(f"rope needs an even feature size, got x of shape {tuple(x.shape)}")
    theta = base ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float64) / d)
    angle = torch.arange(offset, offset + t, device=x.device, dtype=torch.float64)[:, None] * theta
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * cos - x2 * sin
    out[..., 1::2] = x1 * sin + x2 * cos
    return out


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """``(H,)`` slopes m_h of Press et al. (2022) — chapter 5, eq. (5.9).

    For H a power of two, head h (1-based) gets m_h = 2^(−8h/H): 8 heads get 1/2, 1/4, …, 1/256.
    Otherwise, as in the paper's code: the 2^a slopes of the largest power of two 2^a ≤ H, then the
    odd-numbered slopes 2^(−8h/2^(a+1)), h = 1, 3, 5, …, of the 2^(a+1)-head sequence until there are H.
    """
    if not isinstance(n_heads, int) or n_heads < 1:
        raise ValueError(f"n_heads must be a positive int, got {n_heads!r}")
    p = 1 << (n_heads.bit_length() - 1)  # the largest power of two <= n_heads
    slopes = 2.0 ** (-8.0 * torch.arange(1, p + 1) / p)
    extra = 2.0 ** (-8.0 * torch.arange(1, 2 * p, 2) / (2 * p))
    return torch.cat([slopes, extra[: n_heads - p]])


def alibi_bias(n_heads: int, n: int, device=None, n_queries: int | None = None) -> torch.Tensor:
    """``(H, n, n)`` additive score bias −slope_h · (i − j) for keys j ≤ i, and −slope_h·|i − j| above
    the diagonal (masked away in causal use) — chapter 5, eq. (5.8).

    With ``n_queries`` only the rows of the last n_queries positions, ``(H, n_queries, n)`` (a KV cache).
    """
    pos = torch.arange(n, device=device)
    rows = pos if n_queries is None else pos[n - n_queries:]
    dist = (rows[:, None] - pos[None, :]).abs().float()
    return -alibi_slopes(n_heads).to(device)[:, None, None] * dist


class RotaryMultiHeadAttention(MultiHeadAttention):
    """Multi-head attention whose queries and keys are rotated by ``rope`` in every head.

    The new tokens are rotated at their own positions start, start+1, … before they enter the KV cache,
    so cached keys never need rotating again; the fused kernel then sees ordinary q and k.
    """

    def rotate(self, q, k, start: int):
        if q.shape[-2] != k.shape[-2]:
            raise ValueError("rotary attention here is for self-attention: Tq must equal Tk, "
                             f"got q {tuple(q.shape)} and k {tuple(k.shape)}")
        return rope(q, offset=start), rope(k, offset=start)


class ALiBiMultiHeadAttention(MultiHeadAttention):
    """Multi-head attention with ALiBi's distance penalty added to each head's scores.

    Query i of Tq sits at position Tk − Tq + i (the last Tq of Tk tokens, as with a KV cache).  The bias
    goes to the fused kernel as an additive float mask.
    """

    def score_bias(self, t_q: int, t_k: int, device, dtype):
        if t_q > t_k:
            raise ValueError(f"ALiBi attention is for self-attention: Tq must be <= Tk, got Tq={t_q} and Tk={t_k}")
        return alibi_bias(self.n_heads, t_k, device=device, n_queries=t_q).to(dtype)


class RelativeMultiHeadAttention(MultiHeadAttention):
    """Multi-head attention with Shaw et al.'s relative positions (tables shared by all heads).

    a^V adds to the values a sum weighted by the attention weights, which the fused kernel does not
    return: this class always takes the teaching path.  Query i of Tq sits at position Tk − Tq + i.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True, max_rel: int = 16):
        super().__init__(d_model, n_heads, dropout, bias)
        self.rel = RelativePositions(self.d_head, max_rel)

    def attend(self, q, k, v, mask, causal, need_weights):
        t_q, t_k = q.shape[-2], k.shape[-2]
        if t_q > t_k:
            raise ValueError(f"relative attention is for self-attention: Tq must be <= Tk, got Tq={t_q} and Tk={t_k}")
        if causal:
            allowed = causal_mask_offset(t_q, t_k, q.device)
            mask = allowed if mask is None else mask & allowed
        a_k, a_v = self.rel(t_k, n_queries=t_q)
        return relative_attention(q, k, v, a_k.to(q.dtype), a_v.to(q.dtype), mask)

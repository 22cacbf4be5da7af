"""Scaled dot-product attention, masks and multi-head attention.

Chapter 3 (self-attention) derives ``scaled_dot_product_attention`` and the causal mask;
chapter 4 (multi-head attention) builds ``MultiHeadAttention`` from it; chapter 6 adds padding masks.
Mask convention everywhere in tfmlib: a boolean tensor, ``True`` = this query may attend to this key.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .utils import check_mask, check_tensor


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0, scale=None, bias=None):
    """softmax(q kᵀ · scale + bias, masked) v  — chapter 3, eq. (3.5).

    Shapes: q ``(..., Tq, Dk)``, k ``(..., Tk, Dk)``, v ``(..., Tk, Dv)``; the leading ``...``
    dimensions broadcast against each other.  ``mask`` is boolean and broadcasts to ``(..., Tq, Tk)``;
    ``True`` means "may attend".  ``bias`` (optional, float) is added to the scores before the mask
    (ALiBi and relative positions use it).  ``scale`` defaults to ``1 / sqrt(Dk)``.

    Returns ``(out, weights)``: out ``(..., Tq, Dv)``, weights ``(..., Tq, Tk)`` (before dropout).
    A query row with no allowed key gets zero weights and a zero output, never NaN.
    """
    check_tensor("q", q, 2)
    check_tensor("k", k, 2)
    check_tensor("v", v, 2)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share their last dimension Dk, got q {tuple(q.shape)} and k {tuple(k.shape)}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same number of keys Tk, got k {tuple(k.shape)} and v {tuple(v.shape)}")
    try:
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the batch dimensions of q {tuple(q.shape)}, k {tuple(k.shape)} and v {tuple(v.shape)} do not broadcast"
        ) from None
    scores_shape = (*batch, q.shape[-2], k.shape[-2])
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])

    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        check_mask(mask, scores_shape)
        scores = scores.masked_fill(~mask, float("-inf"))
        # A row with no allowed key would be softmax(-inf, ..., -inf) = NaN: give it finite scores,
        # then zero its weights below.
        scores = scores.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    attn = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    return torch.matmul(attn, v), weights


def causal_mask(n: int, device=None) -> torch.Tensor:
    """``(n, n)`` boolean mask, True where key j ≤ query i — chapter 3, eq. (3.8)."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


def padding_mask(lengths, max_len: int) -> torch.Tensor:
    """``(B, max_len)`` boolean mask, True on the real tokens (position < length) — chapter 6.

    ``lengths`` is a 1-D integer tensor (or list) of the B sequence lengths.
    """
    lengths = torch.as_tensor(lengths)
    if lengths.dim() != 1 or lengths.dtype.is_floating_point or lengths.dtype == torch.bool:
        raise ValueError(f"lengths must be a 1-D integer tensor, got shape {tuple(lengths.shape)} and {lengths.dtype}")
    if len(lengths) and (lengths.min() < 0 or lengths.max() > max_len):
        raise ValueError(f"lengths must lie in [0, max_len={max_len}], got {lengths.tolist()}")
    return torch.arange(max_len, device=lengths.device) < lengths[:, None]


def attention_mask(key_padding, causal: bool = False, q_len: int | None = None) -> torch.Tensor:
    """Combine a key padding mask (and optionally the causal mask) into ``(B, 1, Tq, Tk)``.

    ``key_padding`` ``(B, Tk)`` is True on real keys (see ``padding_mask``).  The result is True at
    ``[b, 0, i, j]`` when key j is real and, if ``causal``, j ≤ i.  The singleton dimension broadcasts
    over heads.  Equivalent to ``key_padding[:, None, None, :] & causal_mask(T)``.
    """
    check_tensor("key_padding", key_padding, 2)
    if key_padding.dtype != torch.bool or key_padding.dim() != 2:
        raise ValueError(f"key_padding must be a (B, Tk) bool tensor, got {tuple(key_padding.shape)} {key_padding.dtype}")
    t_k = key_padding.shape[1]
    q_len = t_k if q_len is None else q_len
    mask = key_padding[:, None, None, :].expand(-1, 1, q_len, t_k)
    if causal:
        if q_len != t_k:
            raise ValueError(f"a causal mask needs Tq == Tk, got q_len={q_len} and Tk={t_k}")
        mask = mask & causal_mask(t_k, device=key_padding.device)
    return mask


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """``(B, T, d)`` → ``(B, H, T, d/H)``; head h takes features h·d_h … (h+1)·d_h − 1 — chapter 4."""
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """``(B, H, T, d_h)`` → ``(B, T, H·d_h)``, the inverse of ``split_heads`` — chapter 4."""
    b, h, t, d_h = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d_h)


class MultiHeadAttention(nn.Module):
    """Multi-head attention, [head_1; …; head_h] W_O — chapter 4, eq. (4.2).

    ``forward(x, context=None, mask=None, need_weights=False)``:
    x ``(B, Tq, d_model)``; context ``(B, Tk, d_model)`` or None (then self-attention, context = x).
    mask: bool, True = may attend, broadcastable to ``(B, H, Tq, Tk)``: a 2-D mask is ``(Tq, Tk)``
    (e.g. ``causal_mask``), a 3-D mask ``(B, Tq, Tk)`` is shared by all heads, a 4-D one is used as is
    (e.g. ``attention_mask``).
    Returns out ``(B, Tq, d_model)``, and weights ``(B, H, Tq, Tk)`` too when ``need_weights``.
    Subclasses change how heads attend (positions, chapter 5) by overriding ``attend``.
    Set ``store_weights = True`` to keep the last weights in ``last_weights`` (for plots).
    """

    store_weights = False

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if n_heads < 1 or d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x, context=None, mask=None, need_weights=False):
        self._check(x, "x")
        context = x if context is None else context
        self._check(context, "context")
        if context.shape[0] != x.shape[0]:
            raise ValueError(f"x {tuple(x.shape)} and context {tuple(context.shape)} must share the batch size B")
        if mask is not None and isinstance(mask, torch.Tensor) and mask.dim() == 3:
            mask = mask.unsqueeze(1)  # (B, Tq, Tk) -> (B, 1, Tq, Tk): the same mask for every head
        q = split_heads(self.q_proj(x), self.n_heads)
        k = split_heads(self.k_proj(context), self.n_heads)
        v = split_heads(self.v_proj(context), self.n_heads)
        out, weights = self.attend(q, k, v, mask)
        if self.store_weights:
            self.last_weights = weights.detach()
        out = self.out_proj(merge_heads(out))
        return (out, weights) if need_weights else out

    def attend(self, q, k, v, mask):
        """Per-head attention: q ``(B, H, Tq, d_h)``, k, v ``(B, H, Tk, d_h)`` → (out, weights)."""
        p = self.dropout if self.training else 0.0
        return scaled_dot_product_attention(q, k, v, mask=mask, dropout_p=p)

    def _check(self, t, name):
        check_tensor(name, t, 3)
        if t.dim() != 3 or t.shape[-1] != self.d_model:
            raise ValueError(f"{name} must have shape (B, T, d_model={self.d_model}), got {tuple(t.shape)}")

"""Scaled dot-product attention, masks, multi-head attention and its key/value cache.

Chapter 3 (self-attention) derives ``scaled_dot_product_attention`` and the causal mask;
chapter 4 (multi-head attention) builds ``MultiHeadAttention`` from it; chapter 6 adds padding masks;
chapter 7 adds ``fast_attention`` (PyTorch's fused kernel, no weights kept) and the ``KVCache``.
Mask convention everywhere in tfmlib: a boolean tensor, ``True`` = this query may attend to this key.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .utils import check_mask, check_tensor


def check_attention_inputs(q, k, v, mask=None) -> tuple:
    """Raise ValueError unless q ``(..., Tq, Dk)``, k ``(..., Tk, Dk)``, v ``(..., Tk, Dv)`` and ``mask`` fit
    together; return the scores' shape ``(..., Tq, Tk)``."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(name, t, 2)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share their last dimension Dk, got q {tuple(q.shape)} and k {tuple(k.shape)}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same number of keys Tk, got k {tuple(k.shape)} and v {tuple(v.shape)}")
    batch = q.shape[:-2]
    if not batch == k.shape[:-2] == v.shape[:-2]:
        try:
            batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
        except RuntimeError:
            raise ValueError(f"the batch dimensions of q {tuple(q.shape)}, k {tuple(k.shape)} and v "
                             f"{tuple(v.shape)} do not broadcast") from None
    scores_shape = (*batch, q.shape[-2], k.shape[-2])
    if mask is not None:
        check_mask(mask, scores_shape)
    return scores_shape


def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0, scale=None, bias=None):
    """softmax(q kᵀ · scale + bias, masked) v  — chapter 3, eq. (3.5).

    Shapes: q ``(..., Tq, Dk)``, k ``(..., Tk, Dk)``, v ``(..., Tk, Dv)``; the leading ``...``
    dimensions broadcast against each other.  ``mask`` is boolean and broadcasts to ``(..., Tq, Tk)``;
    ``True`` means "may attend".  ``bias`` (optional, float) is added to the scores before the mask
    (ALiBi and relative positions use it).  ``scale`` defaults to ``1 / sqrt(Dk)``.

    Returns ``(out, weights)``: out ``(..., Tq, Dv)``, weights ``(..., Tq, Tk)`` (before dropout).
    A query row with no allowed key gets zero weights and a zero output, never NaN.
    """
    check_attention_inputs(q, k, v, mask)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])

    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
        # A row with no allowed key would be softmax(-inf, ..., -inf) = NaN: give it finite scores,
        # then zero its weights below.
        scores = scores.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    attn = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    return torch.matmul(attn, v), weights


def fast_attention(q, k, v, mask=None, bias=None, causal=False, dropout_p=0.0):
    """The same result as ``scaled_dot_product_attention`` from PyTorch's fused kernel — chapter 7.

    ``F.scaled_dot_product_attention`` never returns the ``(Tq, Tk)`` weights, only out ``(..., Tq, Dv)``.
    Whether it stores the scores depends on the backend PyTorch picks: the flash and memory-efficient
    kernels work block by block and never hold them; the "math" fallback forms the full ``(Tq, Tk)``
    scores and weights internally, and PyTorch uses it whenever no fused kernel accepts the inputs (float64
    on a GPU, masks or dtypes a kernel does not support).  An explicit ``mask`` or ``bias`` (a KV cache's
    offset causal mask, ALiBi) already rules out the GPU flash kernel.  ``causal`` adds the causal mask
    aligned to the last key: query i (of Tq) sits at position Tk − Tq + i, as when new tokens attend
    over a cache.  ``mask`` (bool) and ``bias`` (float) as in ``scaled_dot_product_attention``;
    rows with no allowed key give zeros.
    """
    check_attention_inputs(q, k, v, mask)
    t_q, t_k = q.shape[-2], k.shape[-2]
    if causal and mask is None and bias is None and t_q == t_k:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
    if causal and t_q > 1:  # (one new query at the end sees every key: nothing to mask)
        allowed = causal_mask_offset(t_q, t_k, q.device)
        mask = allowed if mask is None else mask & allowed
    scores_mask = mask
    if bias is not None:    # a float mask: the bias where allowed, −inf elsewhere
        scores_mask = bias.to(q.dtype) if mask is None else bias.to(q.dtype).masked_fill(~mask, float("-inf"))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=scores_mask, dropout_p=dropout_p)
    if mask is not None:    # rows with no allowed key: PyTorch's CPU kernel gives 0 too, not every backend does
        out = out.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    return out


def causal_mask(n: int, device=None) -> torch.Tensor:
    """``(n, n)`` boolean mask, True where key j ≤ query i — chapter 3, eq. (3.8)."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    return torch.ones(n, n, dtype=torch.bool, device=device).tril()


def causal_mask_offset(t_q: int, t_k: int, device=None) -> torch.Tensor:
    """``(Tq, Tk)`` bool: query i sits at position Tk − Tq + i and sees keys j ≤ that — chapter 7, eq. (7.9).

    With Tq = Tk this is ``causal_mask``; with a cache the Tq new tokens follow Tk − Tq cached ones.
    """
    if t_q > t_k:
        raise ValueError(f"a causal mask needs Tq <= Tk, got Tq={t_q} and Tk={t_k}")
    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(diagonal=t_k - t_q)


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
        raise ValueError(f"key_padding must be a (B, Tk) bool tensor, "
                         f"got {tuple(key_padding.shape)} {key_padding.dtype}")
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


class KVCache:
    """The keys and values one attention layer has seen so far — chapter 7, eq. (7.9).

    ``append(k, v)`` stores k, v ``(B, H, T_new, d_h)`` after the ``length`` cached ones and returns all
    ``(B, H, length, d_h)``.  Room for ``max_len`` tokens is allocated at the first append, so a step
    copies only the new token.  A model keeps one per layer (``DecoderLM.new_cache``); the next new
    token's position, the start position, is ``length``.
    """

    def __init__(self, max_len: int):
        if not isinstance(max_len, int) or max_len < 1:
            raise ValueError(f"max_len must be a positive int, got {max_len!r}")
        self.max_len, self.length = max_len, 0
        self.k = self.v = None

    def append(self, k, v):
        end = self.length + k.shape[-2]
        if end > self.max_len:
            raise ValueError(f"the cache holds max_len={self.max_len} tokens, {end} were asked for")
        if self.k is None:
            self.k = k.new_zeros(*k.shape[:-2], self.max_len, k.shape[-1])
            self.v = v.new_zeros(*v.shape[:-2], self.max_len, v.shape[-1])
        elif k.shape[:-2] != self.k.shape[:-2]:
            raise ValueError(f"k {tuple(k.shape)} does not match the cached keys {tuple(self.k.shape)}")
        self.k[..., self.length:end, :] = k
        self.v[..., self.length:end, :] = v
        self.length = end
        return self.k[..., :end, :], self.v[..., :end, :]


class MultiHeadAttention(nn.Module):
    """Multi-head attention, [head_1; …; head_h] W_O — chapter 4, eq. (4.2).

    ``forward(x, context=None, mask=None, need_weights=False, causal=False, cache=None)``:
    x ``(B, Tq, d_model)``; context ``(B, Tk, d_model)`` or None (then self-attention, context = x).
    mask: bool, True = may attend, broadcastable to ``(B, H, Tq, Tk)``: a 2-D mask is ``(Tq, Tk)``
    (e.g. ``causal_mask``), a 3-D mask ``(B, Tq, Tk)`` is shared by all heads, a 4-D one is used as is
    (e.g. ``attention_mask``).  ``causal=True`` adds the causal mask without building it.
    ``cache`` (a ``KVCache``, self-attention only): the new keys and values are appended to it and the
    queries, at positions ``cache.length`` …, attend to every cached key (chapter 7).
    Returns out ``(B, Tq, d_model)``, and weights ``(B, H, Tq, Tk)`` too when ``need_weights``.

    Two paths, equal up to rounding: when weights are wanted (``need_weights``, or ``store_weights = True``,
    which keeps the last ones in ``last_weights`` for plots) the teaching path ``scaled_dot_product_attention``;
    otherwise ``fast_attention``.  Subclasses change how heads attend (positions, chapter 5) by
    overriding ``rotate`` (q and k before the cache) and ``score_bias`` or ``attend``.
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

    def forward(self, x, context=None, mask=None, need_weights=False, causal=False, cache=None):
        context, mask = self._check(x, context, mask, cache)
        q, k, v = self.project(x, context)
        q, k = self.rotate(q, k, start=0 if cache is None else cache.length)
        if cache is not None:
            k, v = cache.append(k, v)          # (B, H, Tk, d_h): every token so far
        out, weights = self.attend(q, k, v, mask, causal, need_weights or self.store_weights)
        if self.store_weights:
            self.last_weights = weights.detach()
        out = self.out_proj(merge_heads(out))
        return (out, weights) if need_weights else out

    def project(self, x, context):
        """q = x W_Q, k = context W_K, v = context W_V, split into heads: ``(B, H, T, d_h)`` each.

        For self-attention the three products run as one matmul with [W_Q; W_K; W_V]: the same numbers up to
        rounding, and faster, since one large product keeps the processor busier than three small ones.
        """
        if context is not x:
            return (split_heads(proj(t), self.n_heads)
                    for proj, t in ((self.q_proj, x), (self.k_proj, context), (self.v_proj, context)))
        projs = (self.q_proj, self.k_proj, self.v_proj)
        w = torch.cat([p.weight for p in projs])
        b = None if self.q_proj.bias is None else torch.cat([p.bias for p in projs])
        return (split_heads(t, self.n_heads) for t in F.linear(x, w, b).chunk(3, dim=-1))

    def attend(self, q, k, v, mask, causal, need_weights):
        """Per-head attention: q ``(B, H, Tq, d_h)``, k, v ``(B, H, Tk, d_h)`` → (out, weights or None)."""
        p = self.dropout if self.training else 0.0
        bias = self.score_bias(q.shape[-2], k.shape[-2], q.device, q.dtype)
        if not need_weights:
            return fast_attention(q, k, v, mask, bias, causal, dropout_p=p), None
        if causal:
            allowed = causal_mask_offset(q.shape[-2], k.shape[-2], q.device)
            mask = allowed if mask is None else mask & allowed
        return scaled_dot_product_attention(q, k, v, mask=mask, dropout_p=p, bias=bias)

    def rotate(self, q, k, start: int):
        """Hook for rotary positions: q, k of the new tokens at positions start, start+1, …"""
        return q, k

    def score_bias(self, t_q: int, t_k: int, device, dtype):
        """Hook for additive score biases ``(H, Tq, Tk)`` (ALiBi); None for plain attention."""
        return None

    def _check(self, x, context, mask, cache):
        """Check the shapes; return (context, mask with a head dimension)."""
        for name, t in (("x", x), ("context", context)):
            if t is not None and (not isinstance(t, torch.Tensor) or t.dim() != 3 or t.shape[-1] != self.d_model):
                shape = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
                raise ValueError(f"{name} must have shape (B, T, d_model={self.d_model}), got {shape}")
        if context is not None and context.shape[0] != x.shape[0]:
            raise ValueError(f"x {tuple(x.shape)} and context {tuple(context.shape)} must share the batch size B")
        if cache is not None and context is not None:
            raise ValueError("a KV cache is for self-attention: pass context=None with cache")
        if isinstance(mask, torch.Tensor) and mask.dim() == 3:
            mask = mask.unsqueeze(1)  # (B, Tq, Tk) -> (B, 1, Tq, Tk): the same mask for every head
        return (x if context is None else context), mask

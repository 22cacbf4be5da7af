"""The pieces of a small modern GPT — chapter 9.

RMSNorm (Zhang & Sennrich, 2019), the SwiGLU MLP (Shazeer, 2020), rotary positions at any positions
(``apply_rope``, the pairing convention of chapter 5's ``rope``) and grouped-query attention with a KV cache
that holds only the key/value heads (Ainslie et al., 2023).  Each comes as a function (the teaching path,
weights multiplying from the right as in the notes) and as a module that ``DecoderLM`` builds from
(``norm="rms"``, ``activation="swiglu"``, ``pos="rope"``, ``n_kv_heads``); the tests check that the two agree.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from .attention import MultiHeadAttention, causal_mask_offset, merge_heads, scaled_dot_product_attention, split_heads
from .scaling import count_parameters
from .utils import check_tensor


def _check_matrix(name: str, w, rows: int | None = None, cols: int | None = None) -> None:
    """Raise ValueError unless ``w`` is a 2-D tensor with the given number of rows and columns."""
    check_tensor(name, w, 2)
    if w.dim() != 2 or (rows is not None and w.shape[0] != rows) or (cols is not None and w.shape[1] != cols):
        want = f"({'?' if rows is None else rows}, {'?' if cols is None else cols})"
        raise ValueError(f"{name} must have shape {want}, got {tuple(w.shape)}")


# ------------------------------------------------------------------------------------------------------
# RMSNorm — chapter 9, eq. (9.1)


def rms_norm(x, weight, eps: float = 1e-6):
    """RMSNorm (Zhang & Sennrich, 2019) over the last dimension — chapter 9, eq. (9.1):
    y = x / sqrt(mean(x²) + eps) · weight.

    x ``(..., d)``, weight ``(d,)`` → ``(..., d)``.  No mean is subtracted and no bias is added: that is
    all that separates it from LayerNorm (chapter 6).  The same numbers as ``torch.nn.functional.rms_norm``.
    """
    check_tensor("x", x, 1)
    check_tensor("weight", weight, 1)
    if weight.shape != x.shape[-1:]:
        raise ValueError(f"weight must have shape ({x.shape[-1]},) to match x {tuple(x.shape)}, "
                         f"got {tuple(weight.shape)}")
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


class RMSNorm(nn.Module):
    """``rms_norm`` with a learned gain (initially ones): x ``(..., d)`` → ``(..., d)``.

    The forward pass is PyTorch's fused ``F.rms_norm``, tested equal to ``rms_norm``.
    """

    def __init__(self, d_model: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x):
        if x.shape[-1:] != self.weight.shape:
            raise ValueError(f"x must end with d_model={self.weight.shape[0]}, got shape {tuple(x.shape)}")
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)


# ------------------------------------------------------------------------------------------------------
# SwiGLU — chapter 9, eq. (9.2)


def swiglu(x, W_gate, W_up, W_down):
    """The SwiGLU MLP (Shazeer, 2020) — chapter 9, eq. (9.2): (silu(x W_gate) ⊙ x W_up) W_down.

    x ``(..., d)``, W_gate and W_up ``(d, f)``, W_down ``(f, d_out)`` → ``(..., d_out)``; silu(z) = z·σ(z).
    One half of the hidden layer gates the other, feature by feature.
    """
    check_tensor("x", x, 1)
    d = x.shape[-1]
    _check_matrix("W_gate", W_gate, d)
    _check_matrix("W_up", W_up, d, W_gate.shape[1])
    _check_matrix("W_down", W_down, W_gate.shape[1])
    return (F.silu(x @ W_gate) * (x @ W_up)) @ W_down


class SwiGLU(nn.Module):
    """``swiglu`` with learned weights: x ``(B, T, d_model)`` → ``(B, T, d_model)``, hidden size ``d_ff``.

    Three matrices where chapter 3's FFN has two, so d_ff ≈ (2/3)·4·d_model keeps the parameter count.
    ``gate`` and ``up`` run as one matmul (their weights stacked), the same numbers as two.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        self.gate = nn.Linear(d_model, d_ff, bias=bias)
        self.up = nn.Linear(d_model, d_ff, bias=bias)
        self.down = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        w = torch.cat([self.gate.weight, self.up.weight])
        b = None if self.gate.bias is None else torch.cat([self.gate.bias, self.up.bias])
        gate, up = F.linear(x, w, b).chunk(2, dim=-1)
        return self.down(self.dropout(F.silu(gate) * up))


# ------------------------------------------------------------------------------------------------------
# Rotary positions at any positions — chapter 9, eq. (9.3) (chapter 5, eq. (5.7))


def apply_rope(x, positions, base: float = 10000.0):
    """Rotate feature pairs (2i, 2i+1) of x ``(..., T, d)`` by the angle p·base^(−2i/d), p = positions[t].

    positions ``(T,)`` (integers or floats) → ``(..., T, d)``.  The pairing convention is chapter 5's ``rope``:
    features 2i and 2i+1 (neighbours, as in Su et al.) form one pair, rotated counter-clockwise:
    (x_2i, x_2i+1) → (x_2i cos − x_2i+1 sin, x_2i sin + x_2i+1 cos).  ``rope(x, offset=s)`` is
    ``apply_rope(x, arange(s, s + T))``.  (Some code pairs feature i with i + d/2 instead: another
    convention, the same relative property, different numbers.)
    """
    check_tensor("x", x, 2)
    t, d = x.shape[-2], x.shape[-1]
    if d % 2:
        raise ValueError(f"apply_rope needs an even feature size d, got x of shape {tuple(x.shape)}")
    positions = torch.as_tensor(positions, device=x.device)
    if positions.shape != (t,):
        raise ValueError(f"positions must have shape (T,) = ({t},) for x {tuple(x.shape)}, "
                         f"got {tuple(positions.shape)}")
    theta = base ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float64) / d)
    angle = positions.to(torch.float64)[:, None] * theta                      # (T, d/2)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


def rope_angles(n: int, d: int, device=None, base: float = 10000.0):
    """``(n, d/2)`` float64 angles p·θ_i, θ_i = base^(−2i/d), for positions p = 0 … n−1 (eq. (9.3))."""
    theta = base ** (-torch.arange(0, d, 2, device=device, dtype=torch.float64) / d)
    return torch.arange(n, device=device, dtype=torch.float64)[:, None] * theta


def rotate_pairs(x, cos, sin):
    """Turn each pair (2i, 2i+1) of x ``(..., T, d)`` by the angles whose cos and sin are ``(T, d/2)``."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


# ------------------------------------------------------------------------------------------------------
# Grouped-query attention — chapter 9, eq. (9.4)


def repeat_kv(x, n_rep: int):
    """``(B, H_kv, T, d_h)`` → ``(B, H_kv·n_rep, T, d_h)``: query head h reads key/value head h // n_rep.

    The copies of one kv head sit next to each other (``repeat_interleave`` on the head axis), so query heads
    0 … n_rep−1 form group 0, and so on.
    """
    check_tensor("x", x, 4)
    return x if n_rep == 1 else x.repeat_interleave(n_rep, dim=1)


def _check_gqa(x, W_q, W_k, W_v, W_o, n_heads, n_kv_heads) -> int:
    """Check grouped_query_attention's arguments; return the head size d_h."""
    if not isinstance(x, torch.Tensor) or x.dim() != 3:
        raise ValueError(f"x must have shape (B, T, d), got {tuple(getattr(x, 'shape', ())) or type(x).__name__}")
    if not isinstance(n_heads, int) or not isinstance(n_kv_heads, int) or n_kv_heads < 1 or n_heads % n_kv_heads:
        raise ValueError(f"n_kv_heads must be a positive int dividing n_heads, got n_heads={n_heads!r}, "
                         f"n_kv_heads={n_kv_heads!r}")
    _check_matrix("W_q", W_q, x.shape[-1])
    if W_q.shape[1] % n_heads:
        raise ValueError(f"W_q's {W_q.shape[1]} columns do not split into n_heads={n_heads} heads")
    d_h = W_q.shape[1] // n_heads
    _check_matrix("W_k", W_k, x.shape[-1], n_kv_heads * d_h)
    _check_matrix("W_v", W_v, x.shape[-1], n_kv_heads * d_h)
    _check_matrix("W_o", W_o, n_heads * d_h)
    return d_h


def grouped_query_attention(x, W_q, W_k, W_v, W_o, n_heads: int, n_kv_heads: int, cache=None):
    """Causal grouped-query attention (Ainslie et al., 2023) — chapter 9, eq. (9.4).

    x ``(B, T, d)``; W_q ``(d, H·d_h)``; W_k, W_v ``(d, H_kv·d_h)``; W_o ``(H·d_h, d_out)`` → ``(B, T, d_out)``.
    Keys and values have ``n_kv_heads`` = H_kv heads, each shared by H / H_kv query heads (``repeat_kv``).
    H_kv = H is multi-head attention (chapter 4), H_kv = 1 multi-query attention (Shazeer, 2019).
    With ``cache`` (a ``KVCache``) this call's keys and values — H_kv heads only — are appended to it and the
    T queries, at positions ``cache.length`` …, attend to every cached key up to their own position.
    """
    _check_gqa(x, W_q, W_k, W_v, W_o, n_heads, n_kv_heads)
    q = split_heads(x @ W_q, n_heads)                       # (B, H, T, d_h)
    k = split_heads(x @ W_k, n_kv_heads)                    # (B, H_kv, T, d_h)
    v = split_heads(x @ W_v, n_kv_heads)
    if cache is not None:
        k, v = cache.append(k, v)                           # (B, H_kv, T_k, d_h): every token so far
    n_rep = n_heads // n_kv_heads
    mask = causal_mask_offset(q.shape[-2], k.shape[-2], x.device)
    out, _ = scaled_dot_product_attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), mask=mask)
    return merge_heads(out) @ W_o


class GroupedQueryAttention(MultiHeadAttention):
    """``MultiHeadAttention`` with ``n_kv_heads`` key/value heads, optionally rotary — chapter 9, eq. (9.4).

    k_proj and v_proj map d_model to n_kv_heads·d_h, so a ``KVCache`` stores (B, n_kv_heads, T, d_h): the cache
    shrinks by n_heads / n_kv_heads.  ``rotary=True`` rotates q and k with ``rope`` (chapter 5's convention) at
    their positions before they enter the cache.  Same ``forward`` as ``MultiHeadAttention``; self-attention
    only.  With n_kv_heads = n_heads (and ``rotary``) it computes what ``MultiHeadAttention``
    (``RotaryMultiHeadAttention``) computes with the same weights.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True,
                 n_kv_heads: int | None = None, rotary: bool = False):
        super().__init__(d_model, n_heads, dropout, bias)
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        if not isinstance(n_kv_heads, int) or n_kv_heads < 1 or n_heads % n_kv_heads:
            raise ValueError(f"n_kv_heads must be a positive int dividing n_heads={n_heads}, got {n_kv_heads!r}")
        self.n_kv_heads, self.rotary = n_kv_heads, rotary
        self.k_proj = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)
        self.v_proj = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)

    def project(self, x, context):
        """q ``(B, H, T, d_h)``; k, v ``(B, H_kv, T, d_h)``: one matmul with [W_Q; W_K; W_V]."""
        if context is not x:
            raise ValueError("GroupedQueryAttention is self-attention only: pass context=None")
        projs = (self.q_proj, self.k_proj, self.v_proj)
        w = torch.cat([p.weight for p in projs])
        b = None if self.q_proj.bias is None else torch.cat([p.bias for p in projs])
        kv = self.n_kv_heads * self.d_head
        q, k, v = F.linear(x, w, b).split([self.d_model, kv, kv], dim=-1)
        return split_heads(q, self.n_heads), split_heads(k, self.n_kv_heads), split_heads(v, self.n_kv_heads)

    def rotate(self, q, k, start: int):
        """``rope`` on q and k at positions start, start+1, …: the fast path, with the angles' cos and sin
        computed once per length and kept (tested equal to ``rope``)."""
        if not self.rotary:
            return q, k
        end = start + q.shape[-2]
        table = getattr(self, "_rope_table", None)
        if table is None or table[0].shape[0] < end or table[0].dtype != q.dtype or table[0].device != q.device:
            angle = rope_angles(1 << (end - 1).bit_length(), self.d_head, q.device)   # room to grow: a power of 2
            table = self._rope_table = (angle.cos().to(q.dtype), angle.sin().to(q.dtype))
        cos, sin = table[0][start:end], table[1][start:end]
        return rotate_pairs(q, cos, sin), rotate_pairs(k, cos, sin)

    def attend(self, q, k, v, mask, causal, need_weights):
        n_rep = self.n_heads // self.n_kv_heads
        return super().attend(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), mask, causal, need_weights)


def gqa_class(n_kv_heads: int, rotary: bool):
    """An attention class with ``MultiHeadAttention``'s constructor that builds ``GroupedQueryAttention``."""
    return functools.partial(GroupedQueryAttention, n_kv_heads=n_kv_heads, rotary=rotary)


# ------------------------------------------------------------------------------------------------------
# Sizes


def kv_cache_bytes_per_token(cache: list) -> float:
    """Bytes a filled cache (a list of ``KVCache``, one per layer) spends per cached token and sequence."""
    if not cache or cache[0].k is None:
        raise ValueError("the cache is empty: run the model on some tokens with it first")
    total = sum(c.k.nbytes + c.v.nbytes for c in cache)
    return total / (cache[0].max_len * cache[0].k.shape[0])


def d_ff_for_parameters(build, n_params: int, lo: int = 1, hi: int = 1 << 14) -> int:
    """The hidden size d_ff for which ``count_parameters(build(d_ff))`` is closest to ``n_params``.

    ``build(d_ff)`` returns a model; its parameter count must grow with d_ff (bisection).  Used to compare
    models of equal size whose MLPs or attention differ (chapter 9's ablation).
    """
    if count_parameters(build(lo)) > n_params:
        raise ValueError(f"even d_ff={lo} gives more than n_params={n_params} parameters")
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if count_parameters(build(mid)) <= n_params else (lo, mid)
    return min((lo, hi), key=lambda f: abs(count_parameters(build(f)) - n_params))

"""Correct answers written in other styles than the model solutions, for every graded function.

The grader must give each of these full marks and no flag: einsum, explicit loops, ``torch.where``, a
hand-written softmax, imports inside the function, helper functions, type hints, docstrings, comments and
blank lines.  ``STYLES[assignment][style] = {answer cell id: source}``; ``make_class`` writes one submission
per style, and the tests grade them on both grading paths.
"""

STYLES = {
    "01_rnn_limits": {
        "loops-hints": {
            "rnn_forward": '''from typing import Tuple

import torch
from torch import Tensor


def rnn_forward(x: Tensor, h0: Tensor, W_xh: Tensor, W_hh: Tensor, b_h: Tensor) -> Tuple[Tensor, Tensor]:
    """Vanilla RNN, one step at a time."""
    B, T, _ = x.shape

    H = torch.empty(B, T, h0.shape[-1], dtype=x.dtype)   # filled step by step
    h = h0
    for t in range(T):
        pre = torch.einsum("bi,ih->bh", x[:, t, :], W_xh) + torch.einsum("bj,jh->bh", h, W_hh)
        h = torch.tanh(pre + b_h)
        H[:, t] = h

    return H, h
''',
            "grad_norm": '''def grad_norm_by_distance(x, h0, W_xh, W_hh, b_h):
    import torch

    leaf = x.clone().detach()
    leaf.requires_grad_(True)
    _, last = rnn_forward(leaf, h0, W_xh, W_hh, b_h)
    last.sum().backward()
    g = leaf.grad                       # (B, T, d_in)
    return torch.linalg.vector_norm(g.transpose(0, 1).reshape(g.shape[1], -1), dim=1)
''',
        },
    },
    "02_attention": {
        "where-handmade-softmax": {
            "attention_step": '''import math
import torch


def _softmax(s, dim=-1):
    # a hand-written softmax: subtract the maximum for stability
    m = s.max(dim=dim, keepdim=True).values
    e = torch.exp(s - m)
    return e / e.sum(dim=dim, keepdim=True)


def attention_step(query, keys, values, mask=None):
    """Luong dot-product attention for one step."""
    scores = torch.einsum("bd,btd->bt", query, keys)

    if mask is None:
        weights = _softmax(scores)
    else:
        safe = torch.where(mask, scores, torch.full_like(scores, -math.inf))
        any_key = mask.any(dim=-1, keepdim=True)
        safe = torch.where(any_key, safe, torch.zeros_like(safe))
        weights = torch.where(mask, _softmax(safe), torch.zeros_like(safe))
    context = torch.einsum("bt,btv->bv", weights, values)
    return context, weights
''',
        },
    },
    "03_self_attention": {
        "einsum-where": {
            "sdpa": '''def scaled_dot_product_attention(q, k, v, mask=None):
    """Attention with einsum and torch.where."""
    import math
    import torch

    scale = 1 / math.sqrt(q.size(-1))
    scores = torch.einsum("...qd,...kd->...qk", q, k) * scale

    if mask is not None:
        neg_inf = torch.tensor(float("-inf"), dtype=scores.dtype)
        scores = torch.where(mask, scores, neg_inf)
        empty = ~mask.any(dim=-1, keepdim=True)
        scores = torch.where(empty, torch.zeros_like(scores), scores)

    weights = scores.softmax(dim=-1)
    if mask is not None:
        weights = torch.where(mask, weights, torch.zeros_like(weights))
    out = torch.einsum("...qk,...kv->...qv", weights, v)
    return out, weights
''',
            "causal": '''def causal_mask(n):
    # row i may see columns 0..i
    rows = torch.arange(n).unsqueeze(1)
    cols = torch.arange(n).unsqueeze(0)
    return cols <= rows
''',
            "self_attention": '''def self_attention(x, W_q, W_k, W_v, mask=None):
    Q = torch.matmul(x, W_q)
    K = torch.matmul(x, W_k)
    V = torch.matmul(x, W_v)

    return scaled_dot_product_attention(Q, K, V, mask=mask)
''',
        },
        "loops-handmade-softmax": {
            "sdpa": '''import math


def softmax_rows(s):
    """A softmax over the last dimension, written out."""
    shifted = s - s.amax(dim=-1, keepdim=True)
    e = shifted.exp()
    return e / e.sum(dim=-1, keepdim=True)


def scaled_dot_product_attention(q, k, v, mask=None):
    d_k = q.shape[-1]
    scores = (q @ k.mT) / math.sqrt(d_k)
    if mask is not None:
        mask = mask.expand(scores.shape)
        scores = scores.masked_fill(mask.logical_not(), -math.inf)
        dead = mask.sum(dim=-1, keepdim=True) == 0
        scores = scores.masked_fill(dead, 0.0)
    weights = softmax_rows(scores)
    if mask is not None:
        weights = weights * mask
    return weights @ v, weights
''',
            "causal": '''def causal_mask(n):
    m = torch.zeros((n, n), dtype=torch.bool)
    for i in range(n):
        for j in range(i + 1):
            m[i, j] = True
    return m
''',
            "self_attention": '''def self_attention(x, W_q, W_k, W_v, mask=None):
    q, k, v = (x @ w for w in (W_q, W_k, W_v))
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    return out, weights
''',
        },
        "future-annotations-typing": {
            "sdpa": '''from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
from torch import Tensor


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor,
                                 mask: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """Postponed annotations: at run time each one is a string."""
    scores: Tensor = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf)
        scores = scores.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)
    weights: Tensor = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights * mask
    return weights @ v, weights
''',
            "causal": '''def causal_mask(n: int) -> "torch.Tensor":
    """A string (forward-reference) annotation."""
    return torch.arange(n)[None, :] <= torch.arange(n)[:, None]
''',
            "self_attention": '''from typing import Literal, Union

import torch


def self_attention(x: torch.Tensor, W_q: torch.Tensor, W_k: torch.Tensor, W_v: torch.Tensor,
                   mask: Union[torch.Tensor, None] = None, how: Literal["matmul", "einsum"] = "matmul"):
    project = (lambda w: x @ w) if how == "matmul" else (lambda w: torch.einsum("...td,de->...te", x, w))
    return scaled_dot_product_attention(project(W_q), project(W_k), project(W_v), mask)
''',
        },
        "dataclass-helper-class": {
            "sdpa": '''import math
from dataclasses import dataclass, field

import torch


@dataclass
class Scores:
    """Attention scores and the mask that goes with them."""
    values: torch.Tensor
    mask: "torch.Tensor | None" = None
    notes: list = field(default_factory=list)

    def masked(self) -> "Scores":
        if self.mask is None:
            return self
        filled = self.values.masked_fill(~self.mask, -math.inf)
        filled = filled.masked_fill(~self.mask.any(dim=-1, keepdim=True), 0.0)
        return Scores(filled, self.mask, self.notes + ["masked"])


class Softmax:
    """A small helper class (not an nn.Module) with a method and a class attribute."""
    dim = -1

    def __call__(self, s: torch.Tensor) -> torch.Tensor:
        e = torch.exp(s - s.amax(dim=self.dim, keepdim=True))
        return e / e.sum(dim=self.dim, keepdim=True)


def scaled_dot_product_attention(q, k, v, mask=None):
    scores = Scores(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), mask).masked()
    weights = Softmax()(scores.values)
    if mask is not None:
        weights = torch.where(mask, weights, torch.zeros_like(weights))
    return weights @ v, weights
''',
            "causal": '''class _Masks:
    @staticmethod
    def causal(n):
        return torch.tril(torch.ones(n, n)).bool()


def causal_mask(n):
    return _Masks.causal(n)
''',
            "self_attention": '''from dataclasses import dataclass


@dataclass(frozen=True)
class Projections:
    W_q: "torch.Tensor"
    W_k: "torch.Tensor"
    W_v: "torch.Tensor"

    def apply(self, x):
        return x @ self.W_q, x @ self.W_k, x @ self.W_v


def self_attention(x, W_q, W_k, W_v, mask=None):
    q, k, v = Projections(W_q, W_k, W_v).apply(x)
    return scaled_dot_product_attention(q, k, v, mask)
''',
        },
    },
    "04_multi_head": {
        "reshape-permute": {
            "split_heads": '''def split_heads(x, n_heads):
    B, T, d = x.shape
    d_h = d // n_heads

    return x.reshape(B, T, n_heads, d_h).permute(0, 2, 1, 3)
''',
            "merge_heads": '''def merge_heads(x):
    B, H, T, d_h = x.shape
    return x.permute(0, 2, 1, 3).contiguous().view(B, T, H * d_h)
''',
            "multi_head_attention": '''import math
import torch


def _attend(q, k, v, mask):
    s = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = torch.where(mask, s, torch.tensor(-math.inf, dtype=s.dtype))
    return torch.softmax(s, dim=-1) @ v


def multi_head_attention(x, W_q, W_k, W_v, W_o, n_heads, mask=None):
    heads = _attend(split_heads(x @ W_q, n_heads), split_heads(x @ W_k, n_heads),
                    split_heads(x @ W_v, n_heads), mask)
    return merge_heads(heads) @ W_o
''',
        },
        "loop-over-heads": {
            "split_heads": '''def split_heads(x, n_heads):
    d_h = x.shape[-1] // n_heads
    return torch.stack([x[..., h * d_h:(h + 1) * d_h] for h in range(n_heads)], dim=1)
''',
            "merge_heads": '''def merge_heads(x):
    return torch.cat([x[:, h] for h in range(x.shape[1])], dim=-1)
''',
            "multi_head_attention": '''def multi_head_attention(x, W_q, W_k, W_v, W_o, n_heads, mask=None):
    q, k, v = split_heads(x @ W_q, n_heads), split_heads(x @ W_k, n_heads), split_heads(x @ W_v, n_heads)
    outs = []
    for h in range(n_heads):
        s = q[:, h] @ k[:, h].transpose(-1, -2) / q.shape[-1] ** 0.5
        if mask is not None:
            m = mask.expand(x.shape[0], n_heads, x.shape[1], x.shape[1])[:, h]
            s = s.masked_fill(~m, float("-inf"))
        outs.append(torch.softmax(s, dim=-1) @ v[:, h])
    return merge_heads(torch.stack(outs, dim=1)) @ W_o
''',
        },
    },
    "05_positions": {
        "loops-einsum": {
            "sinusoidal": '''import math


def sinusoidal_positions(n, d):
    """Filled entry by entry in float64, returned as float32."""
    pe = torch.zeros(n, d, dtype=torch.float64)
    for p in range(n):
        for i in range(d // 2):
            angle = p / 10000 ** (2 * i / d)
            pe[p, 2 * i] = math.sin(angle)
            pe[p, 2 * i + 1] = math.cos(angle)
    return pe.to(torch.float32)
''',
            "relative_index": '''def relative_position_index(n, k):
    idx = torch.empty(n, n, dtype=torch.long)
    for i in range(n):
        for j in range(n):
            idx[i, j] = min(max(j - i, -k), k) + k
    return idx
''',
            "relative_scores": '''def relative_attention_scores(q, k, a_k):
    d = q.shape[-1]
    content = torch.einsum("...id,...jd->...ij", q, k)
    position = torch.einsum("...id,ijd->...ij", q, a_k)
    return (content + position) / d ** 0.5
''',
        },
    },
    "06_encoder_decoder": {
        "where-manual": {
            "padding_mask": '''def padding_mask(lengths, max_len):
    positions = torch.arange(max_len).expand(len(lengths), max_len)
    return positions < lengths.unsqueeze(1)
''',
            "decoder_mask": '''def decoder_mask(lengths, max_len):
    i = torch.arange(max_len).view(max_len, 1)
    j = torch.arange(max_len).view(1, max_len)
    causal = j <= i                                   # (T, T)
    keys = padding_mask(lengths, max_len)             # (B, T)
    return torch.logical_and(causal[None, None], keys[:, None, None, :])
''',
            "layer_norm": '''def layer_norm(x, gamma, beta, eps=1e-5):
    """Normalise over the last dimension with the biased variance."""
    mu = x.mean(-1, keepdim=True)
    centred = x - mu
    var = centred.pow(2).mean(-1, keepdim=True)
    return centred * torch.rsqrt(var + eps) * gamma + beta
''',
            "decoder_block": '''def decoder_block(x, mask, self_attn, feed_forward, gamma1, beta1, gamma2, beta2, eps=1e-5):
    attended = self_attn(x, mask)
    h = layer_norm(x + attended, gamma1, beta1, eps=eps)

    ff = feed_forward(h)
    return layer_norm(h + ff, gamma2, beta2, eps=eps)
''',
        },
    },
    "07_efficiency": {
        "loops-where": {
            "sliding_window": '''def sliding_window_mask(n, window):
    m = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        lo, hi = max(0, i - window), min(n, i + window + 1)
        m[i, lo:hi] = True
    return m
''',
            "global_mask": '''def global_mask(n, global_idx):
    chosen = torch.zeros(n, dtype=torch.bool)
    for g in list(global_idx):
        chosen[int(g)] = True
    return chosen[:, None] | chosen[None, :]
''',
            "random_mask": '''def random_mask(n, n_random, generator):
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        picks = torch.randperm(n, generator=generator)[:n_random]
        mask[i, picks] = True
    return mask
''',
            "blockwise": '''import math
import torch


def blockwise_attention(q, k, v, block_size):
    """Online softmax over key blocks (running max m, running sum l, running output acc)."""
    scale = 1 / math.sqrt(q.shape[-1])
    m = None
    for start in range(0, k.shape[-2], block_size):
        kb = k[..., start:start + block_size, :]
        vb = v[..., start:start + block_size, :]
        s = torch.einsum("...qd,...kd->...qk", q, kb) * scale
        block_max = s.amax(dim=-1, keepdim=True)
        if m is None:
            m = block_max
            p = torch.exp(s - m)
            l = p.sum(dim=-1, keepdim=True)
            acc = p @ vb
            continue
        m_new = torch.where(block_max > m, block_max, m)
        alpha = torch.exp(m - m_new)
        p = torch.exp(s - m_new)
        l = alpha * l + p.sum(dim=-1, keepdim=True)
        acc = alpha * acc + p @ vb
        m = m_new
    return acc / l
''',
        },
    },
    "08_scaling_laws": {
        "numpy-math": {
            "chinchilla_loss": '''def chinchilla_loss(N, D, params=None):
    if params is None:
        params = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}
    E, A, B = params["E"], params["A"], params["B"]
    return E + A * N ** -params["alpha"] + B * D ** -params["beta"]
''',
            "compute_optimal": '''import math


def compute_optimal(C, params=None):
    """Set dL/dN = 0 along N * D = C / 6 and solve for N."""
    p = params or {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}
    a, b = p["alpha"], p["beta"]
    # a A N^-a = b B D^-b with D = C / (6 N)
    log_N = (math.log(a * p["A"] / (b * p["B"])) + b * math.log(C / 6)) / (a + b)
    N = math.exp(log_N)
    return N, C / (6 * N)
''',
            "fit_power_law": '''import numpy as np


def fit_power_law(x, y):
    lx = np.log(np.asarray(x, dtype=np.float64))
    ly = np.log(np.asarray(y, dtype=np.float64))
    c, log_k = np.polyfit(lx, ly, 1)
    return float(np.exp(log_k)), float(c)
''',
        },
    },
}

"""Chapter 3's mistakes (solutions/03_self_attention): scaled_dot_product_attention, causal_mask, self_attention."""
from __future__ import annotations

import torch

from .catalogue import _ones, _zeros, any_of, graded, mistake
from .families import MASK_SHAPES, MASKING, PROJECTIONS, SCALING, SOFTMAX_AXIS, attention, has_mask

SDPA_LINE = "scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)"
CAUSAL_LINE = "mask[i, j] = True where j <= i (the diagonal included)"
SELF_LINE = "Q = x @ W_q,  K = x @ W_k,  V = x @ W_v,  out = Attention(Q, K, V, mask)"


def triangle(n, *, diagonal=0, upper=False, dtype=torch.bool, additive=None):
    """The (n, n) causal mask as ``dtype``; with ``additive``, a float mask: 0 where allowed, ``additive`` elsewhere."""
    m = _ones(n, n, dtype=torch.bool)
    m = m.triu(diagonal) if upper else m.tril(diagonal)
    return m.to(dtype) if additive is None else _zeros(n, n, dtype=dtype).masked_fill(~m, additive)


def self_attn(x, W_q, W_k, W_v, mask=None, *, transpose_w=False, swap_qk=False, values_from_k=False, **flags):
    """``attention`` (with its flags) of the projections of x."""
    q, k, v = (x @ (W.T if transpose_w else W) for W in (W_q, W_k, W_k if values_from_k else W_v))
    return attention(k, q, v, mask, **flags) if swap_qk else attention(q, k, v, mask, **flags)


def square(W):
    return W.shape[0] == W.shape[1]


MISTAKES = {
    "scaled_dot_product_attention": graded(
        attention, SDPA_LINE,
        SCALING.no_scaling,
        SCALING.scaled_by_d,
        SOFTMAX_AXIS.softmax_over_queries,
        MASKING.mask_inverted,
        MASKING.mask_ignored,
        MASKING.mask_after_softmax,
        MASKING.masked_row_nan,
        MASKING.masked_row_uniform,
        mistake("scaled_by_d_v", "Your scores are divided by √d_v (the size of the values, v.shape[-1]) instead of "
                "√d_k (the size of the queries and keys, q.shape[-1]).",
                lambda q, k, v, mask=None: attention(q, k, v, mask, d=v.shape[-1])),
        mistake("multiplied_by_sqrt_d_k", "Your scores are multiplied by √d_k instead of divided by it.",
                multiply=True),
        mistake("scaled_by_number_of_keys", "Your scores are divided by the square root of the number of keys "
                "(k.shape[-2]); d_k is the feature size, k.shape[-1].",
                lambda q, k, v, mask=None: attention(q, k, v, mask, d=k.shape[-2])),
        mistake("returns_weights_first", "Your function returns (weights, out); it returns (out, weights).",
                line="return weights @ v, weights", weights_first=True),
        d="d_k", query="query", key="key"),
    "causal_mask": graded(
        triangle, CAUSAL_LINE,
        MASK_SHAPES.diagonal_excluded,
        mistake("upper_triangle", "Your mask is the upper triangle (j >= i, the future) instead of the lower one "
                "(j <= i, the past).", upper=True, diagonal=any_of(0, 1)),
        mistake("one_future_key", "Your mask also lets each token attend to the next one (j <= i + 1); it must stop "
                "at the token itself (j <= i).", diagonal=1),
        MASK_SHAPES.not_bool.but(dtype=any_of(torch.float32, torch.int64, torch.float64, torch.uint8)),
        mistake("additive_mask", "Your mask is an additive float mask (0 and -inf); the course's masks are booleans, "
                "True where a query may attend.", dtype=any_of(torch.float32, torch.float64),
                additive=any_of(float("-inf"), -1e9))),
    "self_attention": graded(
        self_attn, SELF_LINE,
        PROJECTIONS.weights_transposed.but(only_if=lambda W_q, W_v, **_: square(W_q) and square(W_v)),
        mistake("q_k_swapped", "You swapped the roles of queries and keys (K Qᵀ instead of Q Kᵀ), which transposes "
                "the score matrix.", swap_qk=True),
        mistake("values_from_W_k", "Your values use W_k instead of W_v.", values_from_k=True,
                only_if=lambda W_k, W_v, **_: W_k.shape == W_v.shape),
        mistake("mask_not_passed", "Your self_attention does not pass the mask on to scaled_dot_product_attention.",
                use_mask=False, only_if=has_mask),
        SCALING.no_scaling.but(line=SDPA_LINE),
        d="d_k"),
}

"""Mistakes several graded functions make, declared once, and the attention whose keyword flags make them.

A chapter lists the family entries each of its functions can make (``SCALING.no_scaling``), with its own words
for the sentences (``d="d_h"``: "Your scores are not divided by √d_h.") and, where a function says or computes
one differently, ``.but(...)``.  The builders of attention_step, scaled_dot_product_attention, self_attention
and multi_head_attention are built on ``attention`` and take its flags.
"""
from __future__ import annotations

import math

import torch

from .catalogue import Alternatives, Family, _matmul, _softmax, any_of, mistake

SOFTMAX_LINE = "weights = torch.softmax(scores, dim=-1)   (over the keys)"
MASK_LINE = 'scores = scores.masked_fill(~mask, float("-inf"))   (before the softmax)'
FULL_ROW_LINE = "a row with no allowed key: finite scores before the softmax, then weights = 0"

# How a query with no allowed key is treated: finite scores then zero weights (the course's), NaN weights (every
# score -inf), or equal weights (-1e9 instead of -inf).  A mistake that is not about those rows may come with any.
FULL_ROWS = any_of("zero", "nan", "uniform")


def attention(q, k, v, mask=None, *, scale=True, sqrt=True, multiply=False, d=None, dim=-1, invert=False,
              use_mask=True, mask_after=False, full_rows=FULL_ROWS, weights_first=False):
    """Scaled dot-product attention, (out, weights), with the mistakes as flags: the scores not scaled (``scale``
    False), divided by d (``sqrt`` False), multiplied by √d (``multiply``), or scaled by another size ``d`` than
    q.shape[-1]; the softmax over ``dim``; the mask inverted (``invert``), left out (``use_mask`` False) or
    applied to the weights after the softmax (``mask_after``); a query with no allowed key treated as
    ``full_rows`` says (one of FULL_ROWS; any_of them, the default: Alternatives, one per way); the result
    returned as (weights, out) (``weights_first``)."""
    d = q.shape[-1] if d is None else d
    scores = _matmul(q, k.transpose(-2, -1))
    if scale:
        root = math.sqrt(d) if sqrt else d
        scores = scores * root if multiply else scores / root
    m = None if mask is None or not use_mask else (~mask if invert else mask)

    def attend(rows):
        before = m is not None and not mask_after
        w = _softmax(_masked(scores, m, rows) if before else scores, dim=dim)
        if m is not None and (mask_after or rows == "zero"):
            w = w.masked_fill(~m, 0.0)
        out = _matmul(w, v)
        return (w, out) if weights_first else (out, w)

    if m is None or mask_after or not isinstance(full_rows, any_of):
        return attend(full_rows)
    return Alternatives(attend(rows) for rows in full_rows)


def _masked(scores, m, rows):
    if rows == "uniform":
        return scores.masked_fill(~m, -1e9)
    scores = scores.masked_fill(~m, float("-inf"))
    return scores.masked_fill(~m.any(dim=-1, keepdim=True), 0.0) if rows == "zero" else scores


def has_mask(mask=None, **_):
    return mask is not None


def has_full_row(mask=None, **_):
    """A mask with a query that may attend to no key."""
    return mask is not None and not bool(mask.any(dim=-1).all())


SCALING = Family(
    mistake("no_scaling", "Your scores are not divided by √$d.", scale=False),
    mistake("scaled_by_d", "Your scores are divided by $d instead of √$d.", sqrt=False),
)

SOFTMAX_AXIS = Family(
    mistake("softmax_over_queries", "Your softmax runs over the queries (dim=-2); it must run over the keys (dim=-1), "
            "so that each query's weights sum to 1.", line=SOFTMAX_LINE, dim=-2),
)

MASKING = Family(
    mistake("mask_inverted", "Your mask is inverted: you remove the ${key}s where mask is True (True means *may "
            "attend*).", line=MASK_LINE, only_if=has_mask, invert=True),
    mistake("mask_ignored", "Your weights ignore the mask: masked ${key}s still get weight.", line=MASK_LINE,
            only_if=has_mask, use_mask=False),
    mistake("mask_after_softmax", "You zero the masked weights after the softmax, so the remaining weights no longer "
            "sum to 1.", line=MASK_LINE, only_if=has_mask, mask_after=True),
    mistake("masked_row_nan", "A $query with no allowed $key gets NaN weights instead of zero weights.",
            line=FULL_ROW_LINE, only_if=has_full_row, full_rows="nan"),
    mistake("masked_row_uniform", "A $query with no allowed $key gets equal weights on every $key instead of zero "
            "weights.", line=FULL_ROW_LINE, only_if=has_full_row, full_rows="uniform"),
)

PROJECTIONS = Family(
    mistake("weights_transposed", "You multiply by the transposed weight matrices (x @ W.T); the weights multiply "
            "from the right: Q = x W_q.", transpose_w=True),
)

# The masks built from a triangle (causal_mask, decoder_mask) and the boolean masks (causal_mask, padding_mask).
MASK_SHAPES = Family(
    mistake("diagonal_excluded", "Your mask leaves out the diagonal: a token must be able to attend to itself "
            "(j <= i, not j < i).", diagonal=-1),
    mistake("not_bool", "Your mask holds numbers, not booleans (dtype torch.bool).",
            dtype=any_of(torch.float32, torch.int64, torch.float64)),
)

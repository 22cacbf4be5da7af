"""Chapter 2's mistakes (solutions/02_attention): attention_step, Luong's (unscaled) attention of one query."""
from __future__ import annotations

from .catalogue import _softmax, each, graded, mistake
from .families import MASKING, attention, has_mask

STEP_LINE = "e_j = s · h_j (no 1/√d),  α = softmax(e) over the T positions,  context = Σ_j α_j v_j"
STEP_MASK_LINE = "scores = scores.masked_fill(~mask, -inf)"
BEFORE_SOFTMAX = "   (before the softmax)"


def step(query, keys, values, mask=None, *, scale=False, **flags):
    """(context, weights) of one query per row: ``attention``, with its flags, unscaled unless ``scale``."""
    out = attention(query[:, None, :], keys, values, None if mask is None else mask[:, None, :], scale=scale, **flags)
    return each(out, lambda r: (r[0][:, 0], r[1][:, 0]))


def scores_of(query, keys):
    return (keys @ query[:, :, None])[..., 0]


def context(weights, values):
    return (weights[..., None] * values).sum(1), weights


MISTAKES = {
    "attention_step": graded(
        step, STEP_LINE,
        mistake("scaled", "Your scores are divided by √d, but this (Luong) attention is unscaled.", scale=True),
        mistake("softmax_over_batch", "Your softmax runs over the batch (dim=0) instead of over the T positions of "
                "each row (dim=-1).", lambda query, keys, values, mask=None: context(
                    _softmax(scores_of(query, keys), dim=0), values), only_if=lambda mask=None, **_: mask is None),
        MASKING.mask_inverted.but(line=STEP_MASK_LINE),
        MASKING.mask_ignored.but(line=STEP_MASK_LINE + BEFORE_SOFTMAX),
        MASKING.mask_after_softmax.but(line=STEP_MASK_LINE + BEFORE_SOFTMAX),
        MASKING.masked_row_nan.but(line="a row with no allowed key: finite scores, then weights = 0"),
        MASKING.masked_row_uniform.but(line="a row with no allowed key: weights = 0, context = 0"),
        mistake("masked_scores_zero", "Your masked positions get the score 0, so they still get weight after the "
                "softmax; their scores must be -inf.", lambda query, keys, values, mask: context(
                    _softmax(scores_of(query, keys).masked_fill(~mask, 0.0), dim=-1), values),
                line=STEP_MASK_LINE + BEFORE_SOFTMAX, only_if=has_mask),
        query="row", key="position"),
}

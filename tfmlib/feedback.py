"""Feedback that names the mistake: a catalogue of the common wrong answers of every graded function.

For each graded function of the exercises (``solutions/`` → ``notebooks/``), ``CATALOGUE`` lists named
mistakes.  Each mistake is a small *wrong variant*: trusted code that computes what that mistake would return
from the same inputs.  When a test cell's comparison fails, ``For(...).assert_close`` (and friends) runs the
variants on the test's own inputs and, when exactly one of them reproduces the learner's result, says which
mistake it is in one plain sentence, with the line of the formula involved, before the numbers.  When no
variant matches, the message says only what differs and guesses no cause.

The test cells use only the inputs they built and the results ``check.call`` returned:

    result = check.call(scaled_dot_product_attention, q, k, v, forbid=SHORTCUTS)
    out, weights = check.unpack("scaled_dot_product_attention(q, k, v)", result, 2)
    fb = feedback.For("scaled_dot_product_attention", result, q=q, k=k, v=v)
    fb.assert_close("weights", weights, expected_w, atol=1e-4)

so the diagnosis never calls a learner function: during grading the same cell runs again in a trusted process
where ``check.call`` replays the recorded results.  A diagnosis only changes the message of a failure that
``tfmlib.checking`` has already decided; it never turns a pass into a failure or back.

A test of a function that is built on another graded function (self_attention on scaled_dot_product_attention,
decoder_block on layer_norm, ...) also hands ``For(...).relies_on`` what the learner's own dependency returned
on the inputs a correct caller gives it, with the trusted result; a failure then names that dependency, "fix ...
first", only when it is wrong on those inputs, and says it is the only cause when the result is exactly what a
correct function built on it returns.

tests/test_feedback.py writes each catalogued mistake into the learner's notebook and checks that the first
failing test names it.  This module imports torch and the standard library only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

import tfmlib.checking as check

# The copies tfmlib.checking took when the setup cell imported it, before any learner code ran; the other
# operations are bound when a test cell first imports this module.  (When a notebook is graded, the verdicts
# are reached again in the grader's process, where no learner code runs: tfmlib/trace.py.)
_Tensor, _type = check._Tensor, check._type
_softmax, _matmul = check.ref.softmax, check.ref.matmul
_allclose, _isnan = check._allclose, check._isnan
_tanh = torch.tanh
_exp = torch.exp
_sqrt = torch.sqrt
_stack = torch.stack
_zeros = torch.zeros
_ones = torch.ones
_arange = torch.arange


@dataclass(frozen=True)
class Mistake:
    """One catalogued mistake of one graded function."""
    name: str          # short id, e.g. "no_scaling"
    sentence: str      # one plain sentence that says what the answer does
    line: str          # the line of the formula involved, as the exercise writes it
    compute: Callable  # inputs (keyword arguments) -> what this mistake returns (or a list of alternatives)


CATALOGUE: dict[str, list[Mistake]] = {}


def _mistake(function, name, sentence, line):
    def register(compute):
        CATALOGUE.setdefault(function, []).append(Mistake(name, sentence, line, compute))
        return compute
    return register


class Alternatives(list):
    """Several results one mistake can give (e.g. with or without a later, correct, step)."""


# ---------------------------------------------------------------------------------------------------------
# Shared trusted building blocks
# ---------------------------------------------------------------------------------------------------------
def _t(x):
    return x.transpose(-2, -1)


def _attention(q, k, v, mask=None, *, scale="sqrt", dim=-1, mask_mode="before", full_rows="zero", invert=False):
    """Scaled dot-product attention with switchable mistakes.  Returns (out, weights)."""
    d = q.shape[-1]
    scores = _matmul(q, _t(k))
    if scale == "sqrt":
        scores = scores / math.sqrt(d)
    elif scale == "d":
        scores = scores / d
    elif scale == "times_sqrt":
        scores = scores * math.sqrt(d)
    elif _type(scale) in (int, float):
        scores = scores / math.sqrt(scale)
    m = None if mask is None else (~mask if invert else mask)
    if m is not None and mask_mode == "before":
        if full_rows == "-1e9":
            scores = scores.masked_fill(~m, -1e9)
        else:
            scores = scores.masked_fill(~m, float("-inf"))
            if full_rows == "zero":
                scores = scores.masked_fill(~m.any(dim=-1, keepdim=True), 0.0)
    w = _softmax(scores, dim=dim)
    if m is not None and mask_mode == "before" and full_rows == "zero":
        w = w.masked_fill(~m, 0.0)
    if m is not None and mask_mode == "after":
        w = w.masked_fill(~m, 0.0)
    return _matmul(w, v), w


def _attention_variants(q, k, v, mask=None, **kw):
    """A masked mistake with the fully masked rows handled (zeros), left as NaN, or given -1e9."""
    if mask is None:
        return _attention(q, k, v, None, **kw)
    return Alternatives(_attention(q, k, v, mask, full_rows=f, **kw) for f in ("zero", "nan", "-1e9"))


# ---------------------------------------------------------------------------------------------------------
# 01 rnn_forward, grad_norm_by_distance
# ---------------------------------------------------------------------------------------------------------
RNN_LINE = "h_t = tanh(x_t W_xh + h_{t-1} W_hh + b_h)"


def _rnn(x, h0, W_xh, W_hh, b_h, *, use_h0=True, tanh=True, bias=True, transpose_hh=False, shift=False):
    h = h0 if use_h0 else torch.zeros_like(h0)
    states = []
    for t in range(x.shape[1]):
        if shift:
            states.append(h)
        pre = x[:, t] @ W_xh + h @ (W_hh.T if transpose_hh else W_hh) + (b_h if bias else 0)
        h = _tanh(pre) if tanh else pre
        if not shift:
            states.append(h)
    return _stack(states, dim=1), h


@_mistake("rnn_forward", "ignores_h0", "Your recurrence starts from zeros instead of the given h0.",
          "h_0 = h0, then " + RNN_LINE)
def _(x, h0, W_xh, W_hh, b_h):
    return _rnn(x, h0, W_xh, W_hh, b_h, use_h0=False)


@_mistake("rnn_forward", "no_tanh", "Your states are not passed through tanh.", RNN_LINE)
def _(x, h0, W_xh, W_hh, b_h):
    return _rnn(x, h0, W_xh, W_hh, b_h, tanh=False)


@_mistake("rnn_forward", "no_bias", "Your states leave out the bias b_h.", RNN_LINE)
def _(x, h0, W_xh, W_hh, b_h):
    return _rnn(x, h0, W_xh, W_hh, b_h, bias=False)


@_mistake("rnn_forward", "W_hh_transposed", "Your recurrence multiplies by W_hh transposed (h W_hhᵀ).",
          RNN_LINE + "   (h_{t-1} W_hh, weights from the right)")
def _(x, h0, W_xh, W_hh, b_h):
    return _rnn(x, h0, W_xh, W_hh, b_h, transpose_hh=True)


@_mistake("rnn_forward", "states_shifted", "Your H holds h_0 .. h_{T-1} (each state before its update) "
          "instead of h_1 .. h_T.", "H = (h_1, ..., h_T), " + RNN_LINE)
def _(x, h0, W_xh, W_hh, b_h):
    return _rnn(x, h0, W_xh, W_hh, b_h, shift=True)


def _grad_norms(x, h0, W_xh, W_hh, b_h, *, target="h_T", norm="l2", flip=False):
    with torch.enable_grad():
        xr = x.detach().clone().requires_grad_(True)
        H, h_T = _rnn(xr, h0, W_xh, W_hh, b_h)
        (g,) = torch.autograd.grad((h_T if target == "h_T" else H).sum(), xr)
    g = g.detach()
    if norm == "l2":
        out = g.pow(2).sum(dim=(0, 2)).sqrt()
    elif norm == "squared":
        out = g.pow(2).sum(dim=(0, 2))
    else:
        out = g.abs().sum(dim=(0, 2))
    return out.flip(0) if flip else out


GRAD_LINE = "entry t = ‖∂(h_T.sum()) / ∂x_t‖₂ over batch and features"


@_mistake("grad_norm_by_distance", "no_sqrt", "Your entries are squared norms: the square root is missing.", GRAD_LINE)
def _(x, h0, W_xh, W_hh, b_h):
    return _grad_norms(x, h0, W_xh, W_hh, b_h, norm="squared")


@_mistake("grad_norm_by_distance", "l1_norm", "Your entries are sums of absolute values (an L1 norm), not 2-norms.",
          GRAD_LINE)
def _(x, h0, W_xh, W_hh, b_h):
    return _grad_norms(x, h0, W_xh, W_hh, b_h, norm="l1")


@_mistake("grad_norm_by_distance", "gradient_of_all_states", "You differentiate H.sum() (every state) instead of "
          "h_T.sum() (the last state only).", GRAD_LINE)
def _(x, h0, W_xh, W_hh, b_h):
    return _grad_norms(x, h0, W_xh, W_hh, b_h, target="H")


@_mistake("grad_norm_by_distance", "reversed", "Your entries are in reverse order: entry t must belong to x_t.",
          GRAD_LINE)
def _(x, h0, W_xh, W_hh, b_h):
    return _grad_norms(x, h0, W_xh, W_hh, b_h, flip=True)


# ---------------------------------------------------------------------------------------------------------
# 02 attention_step (Luong: unscaled scores)
# ---------------------------------------------------------------------------------------------------------
def _step(query, keys, values, mask=None, *, scaled=False, dim=-1, invert=False, mask_mode="before", full_rows="zero"):
    q, k, v = query[:, None, :], keys, values
    m = None if mask is None else mask[:, None, :]
    out, w = _attention(q, k, v, m, scale="sqrt" if scaled else None, dim=dim, invert=invert,
                        mask_mode=mask_mode, full_rows=full_rows)
    return out[:, 0], w[:, 0]


def _step_variants(query, keys, values, mask=None, **kw):
    if mask is None:
        return _step(query, keys, values, None, **kw)
    return Alternatives(_step(query, keys, values, mask, full_rows=f, **kw) for f in ("zero", "nan", "-1e9"))


STEP_LINE = "e_j = s · h_j (no 1/√d),  α = softmax(e) over the T positions,  context = Σ_j α_j v_j"


@_mistake("attention_step", "scaled", "Your scores are divided by √d, but this (Luong) attention is unscaled.",
          STEP_LINE)
def _(query, keys, values, mask=None):
    return _step_variants(query, keys, values, mask, scaled=True)


@_mistake("attention_step", "softmax_over_batch", "Your softmax runs over the batch (dim=0) instead of over the T "
          "positions of each row (dim=-1).", STEP_LINE)
def _(query, keys, values, mask=None):
    if mask is not None:
        return Alternatives()
    scores = (keys @ query[:, :, None])[..., 0]
    w = _softmax(scores, dim=0)
    return (w[..., None] * values).sum(1), w


@_mistake("attention_step", "mask_inverted", "Your mask is inverted: you remove the positions where mask is True "
          "(True means *may attend*).", "scores = scores.masked_fill(~mask, -inf)")
def _(query, keys, values, mask=None):
    return Alternatives() if mask is None else _step_variants(query, keys, values, mask, invert=True)


@_mistake("attention_step", "mask_ignored", "Your weights ignore the mask: masked positions still get weight.",
          "scores = scores.masked_fill(~mask, -inf)   (before the softmax)")
def _(query, keys, values, mask=None):
    return Alternatives() if mask is None else _step(query, keys, values, None)


@_mistake("attention_step", "mask_after_softmax", "You zero the masked weights after the softmax, so the remaining "
          "weights no longer sum to 1.", "scores = scores.masked_fill(~mask, -inf)   (before the softmax)")
def _(query, keys, values, mask=None):
    return Alternatives() if mask is None else _step(query, keys, values, mask, mask_mode="after")


@_mistake("attention_step", "masked_row_nan", "A row with no allowed position gets NaN weights instead of zero "
          "weights.", "a row with no allowed key: finite scores, then weights = 0")
def _(query, keys, values, mask=None):
    if mask is None or bool(mask.any(dim=-1).all()):
        return Alternatives()
    return _step(query, keys, values, mask, full_rows="nan")


@_mistake("attention_step", "masked_row_uniform", "A row with no allowed position gets equal weights on every "
          "position instead of zero weights.", "a row with no allowed key: weights = 0, context = 0")
def _(query, keys, values, mask=None):
    if mask is None or bool(mask.any(dim=-1).all()):
        return Alternatives()
    return _step(query, keys, values, mask, full_rows="-1e9")


@_mistake("attention_step", "masked_scores_zero", "Your masked positions get the score 0, so they still get weight "
          "after the softmax; their scores must be -inf.", "scores = scores.masked_fill(~mask, -inf)   (before the softmax)")
def _(query, keys, values, mask=None):
    if mask is None:
        return Alternatives()
    scores = (keys @ query[:, :, None])[..., 0].masked_fill(~mask, 0.0)
    w = _softmax(scores, dim=-1)
    return (w[..., None] * values).sum(1), w


# ---------------------------------------------------------------------------------------------------------
# 03 scaled_dot_product_attention, causal_mask, self_attention
# ---------------------------------------------------------------------------------------------------------
SDPA_LINE = "scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)"
SOFTMAX_LINE = "weights = torch.softmax(scores, dim=-1)   (over the keys)"
MASK_LINE = 'scores = scores.masked_fill(~mask, float("-inf"))   (before the softmax)'
FULL_ROW_LINE = "a row with no allowed key: finite scores before the softmax, then weights = 0"


@_mistake("scaled_dot_product_attention", "no_scaling", "Your scores are not divided by √d_k.", SDPA_LINE)
def _(q, k, v, mask=None):
    return _attention_variants(q, k, v, mask, scale=None)


@_mistake("scaled_dot_product_attention", "scaled_by_d", "Your scores are divided by d_k instead of √d_k.", SDPA_LINE)
def _(q, k, v, mask=None):
    return _attention_variants(q, k, v, mask, scale="d")


@_mistake("scaled_dot_product_attention", "softmax_over_queries", "Your softmax runs over the queries (dim=-2); it "
          "must run over the keys (dim=-1), so that each query's weights sum to 1.", SOFTMAX_LINE)
def _(q, k, v, mask=None):
    return _attention_variants(q, k, v, mask, dim=-2)


@_mistake("scaled_dot_product_attention", "mask_inverted", "Your mask is inverted: you remove the keys where mask is "
          "True (True means *may attend*).", MASK_LINE)
def _(q, k, v, mask=None):
    return Alternatives() if mask is None else _attention_variants(q, k, v, mask, invert=True)


@_mistake("scaled_dot_product_attention", "mask_ignored", "Your weights ignore the mask: masked keys still get weight.",
          MASK_LINE)
def _(q, k, v, mask=None):
    return Alternatives() if mask is None else _attention(q, k, v, None)


@_mistake("scaled_dot_product_attention", "mask_after_softmax", "You zero the masked weights after the softmax, so "
          "the remaining weights no longer sum to 1.", MASK_LINE)
def _(q, k, v, mask=None):
    return Alternatives() if mask is None else _attention(q, k, v, mask, mask_mode="after")


@_mistake("scaled_dot_product_attention", "masked_row_nan", "A query with no allowed key gets NaN weights instead "
          "of zero weights.", FULL_ROW_LINE)
def _(q, k, v, mask=None):
    if mask is None or bool(mask.any(dim=-1).all()):
        return Alternatives()
    return _attention(q, k, v, mask, full_rows="nan")


@_mistake("scaled_dot_product_attention", "masked_row_uniform", "A query with no allowed key gets equal weights on "
          "every key instead of zero weights.", FULL_ROW_LINE)
def _(q, k, v, mask=None):
    if mask is None or bool(mask.any(dim=-1).all()):
        return Alternatives()
    return _attention(q, k, v, mask, full_rows="-1e9")


@_mistake("scaled_dot_product_attention", "scaled_by_d_v", "Your scores are divided by √d_v (the size of the values, "
          "v.shape[-1]) instead of √d_k (the size of the queries and keys, q.shape[-1]).", SDPA_LINE)
def _(q, k, v, mask=None):
    return _attention_variants(q, k, v, mask, scale=v.shape[-1])


@_mistake("scaled_dot_product_attention", "multiplied_by_sqrt_d_k", "Your scores are multiplied by √d_k instead of "
          "divided by it.", SDPA_LINE)
def _(q, k, v, mask=None):
    return _attention_variants(q, k, v, mask, scale="times_sqrt")


CAUSAL_LINE = "mask[i, j] = True where j <= i (the diagonal included)"


def _tri(n, upper, offset):
    m = _ones(n, n, dtype=torch.bool)
    return m.triu(offset) if upper else m.tril(offset)


@_mistake("causal_mask", "diagonal_excluded", "Your mask leaves out the diagonal: a token must be able to attend to "
          "itself (j <= i, not j < i).", CAUSAL_LINE)
def _(n):
    return _tri(n, False, -1)


@_mistake("causal_mask", "upper_triangle", "Your mask is the upper triangle (j >= i, the future) instead of the "
          "lower one (j <= i, the past).", CAUSAL_LINE)
def _(n):
    return Alternatives([_tri(n, True, 0), _tri(n, True, 1)])


@_mistake("causal_mask", "one_future_key", "Your mask also lets each token attend to the next one (j <= i + 1); "
          "it must stop at the token itself (j <= i).", CAUSAL_LINE)
def _(n):
    return _tri(n, False, 1)


@_mistake("causal_mask", "not_bool", "Your mask holds numbers, not booleans (dtype torch.bool).", CAUSAL_LINE)
def _(n):
    return Alternatives([_tri(n, False, 0).to(dt) for dt in (torch.float32, torch.int64, torch.float64, torch.uint8)])


SELF_LINE = "Q = x @ W_q,  K = x @ W_k,  V = x @ W_v,  out = Attention(Q, K, V, mask)"


@_mistake("self_attention", "weights_transposed", "You multiply by the transposed weight matrices (x @ W.T); the "
          "weights multiply from the right: Q = x W_q.", SELF_LINE)
def _(x, W_q, W_k, W_v, mask=None):
    if W_q.shape[0] != W_q.shape[1] or W_v.shape[0] != W_v.shape[1]:
        return Alternatives()
    return _attention_variants(x @ W_q.T, x @ W_k.T, x @ W_v.T, mask)


@_mistake("self_attention", "q_k_swapped", "You swapped the roles of queries and keys (K Qᵀ instead of Q Kᵀ), "
          "which transposes the score matrix.", SELF_LINE)
def _(x, W_q, W_k, W_v, mask=None):
    return _attention_variants(x @ W_k, x @ W_q, x @ W_v, mask)


@_mistake("self_attention", "values_from_W_k", "Your values use W_k instead of W_v.", SELF_LINE)
def _(x, W_q, W_k, W_v, mask=None):
    if W_k.shape != W_v.shape:
        return Alternatives()
    return _attention_variants(x @ W_q, x @ W_k, x @ W_k, mask)


@_mistake("self_attention", "mask_not_passed", "Your self_attention does not pass the mask on to "
          "scaled_dot_product_attention.", SELF_LINE)
def _(x, W_q, W_k, W_v, mask=None):
    return Alternatives() if mask is None else _attention(x @ W_q, x @ W_k, x @ W_v, None)


@_mistake("self_attention", "no_scaling", "Your scores are not divided by √d_k.", SDPA_LINE)
def _(x, W_q, W_k, W_v, mask=None):
    return _attention_variants(x @ W_q, x @ W_k, x @ W_v, mask, scale=None)


# ---------------------------------------------------------------------------------------------------------
# 04 split_heads, merge_heads, multi_head_attention
# ---------------------------------------------------------------------------------------------------------
SPLIT_LINE = "x.view(B, T, n_heads, d_h).transpose(1, 2)   (head h takes features h·d_h … (h+1)·d_h − 1)"
MERGE_LINE = "x.transpose(1, 2).reshape(B, T, H · d_h)"


def _split(x, n_heads, how="right"):
    b, t, d = x.shape
    dh = d // n_heads
    if how == "right":
        return x.reshape(b, t, n_heads, dh).transpose(1, 2)
    if how == "interleaved":
        return x.reshape(b, t, dh, n_heads).permute(0, 3, 1, 2)
    if how == "no_transpose":
        return x.reshape(b, t, n_heads, dh)
    if how == "reshape":
        return x.reshape(b, n_heads, t, dh)
    raise ValueError(how)


def _merge(x, how="right"):
    b, h, t, dh = x.shape
    if how == "right":
        return x.transpose(1, 2).reshape(b, t, h * dh)
    if how == "no_transpose":
        return x.reshape(b, t, h * dh)
    if how == "interleaved":
        return x.permute(0, 2, 3, 1).reshape(b, t, h * dh)
    raise ValueError(how)


@_mistake("split_heads", "interleaved", "Your heads take every n_heads-th feature (interleaved), but head h must take "
          "the contiguous block of features h·d_h … (h+1)·d_h − 1.", SPLIT_LINE)
def _(x, n_heads):
    return _split(x, n_heads, "interleaved")


@_mistake("split_heads", "no_transpose", "Your result is (B, T, n_heads, d_h): the head dimension must come before T.",
          SPLIT_LINE)
def _(x, n_heads):
    return _split(x, n_heads, "no_transpose")


@_mistake("split_heads", "reshape_without_transpose", "You reshape straight to (B, n_heads, T, d_h), which mixes "
          "positions and features; view as (B, T, n_heads, d_h) first, then transpose.", SPLIT_LINE)
def _(x, n_heads):
    return _split(x, n_heads, "reshape")


@_mistake("merge_heads", "no_transpose", "You reshape (B, H, T, d_h) straight to (B, T, H·d_h) without moving T "
          "before H first, which mixes positions and heads.", MERGE_LINE)
def _(x):
    return _merge(x, "no_transpose")


@_mistake("merge_heads", "interleaved", "Your merge interleaves the heads' features; head 0's d_h features must come "
          "first, then head 1's, and so on.", MERGE_LINE)
def _(x):
    return _merge(x, "interleaved")


MHA_LINE = "scores = q @ k.transpose(-2, -1) / math.sqrt(d_h),  d_h = d / n_heads"
MHA_OUT_LINE = "out = merge_heads(weights @ v) @ W_o"


def _mha(x, W_q, W_k, W_v, W_o, n_heads, mask=None, *, scale="sqrt", split="right", merge="right", out_proj=True,
         transpose_w=False, dim=-1, invert=False, full_rows="nan", mask_mode="before"):
    tw = (lambda w: w.T) if transpose_w else (lambda w: w)
    q, k, v = (_split(x @ tw(W), n_heads, split) for W in (W_q, W_k, W_v))
    out, _ = _attention(q, k, v, mask, scale=scale, dim=dim, invert=invert, full_rows=full_rows, mask_mode=mask_mode)
    out = _merge(out, merge)
    return out @ tw(W_o) if out_proj else out


def _as_list(result):
    return list(result) if isinstance(result, Alternatives) else [result]


def _mha_variants(*args, **kw):
    mask = args[6] if len(args) > 6 else None
    if mask is None:
        return _mha(*args, **kw)
    return Alternatives(_mha(*args, full_rows=f, **kw) for f in ("zero", "nan", "-1e9"))


@_mistake("multi_head_attention", "scaled_by_d_model", "Your scores are divided by √d (the model width) instead of "
          "√d_h (one head's width).", MHA_LINE)
def _(x, W_q, W_k, W_v, W_o, n_heads, mask=None):
    return _mha_variants(x, W_q, W_k, W_v, W_o, n_heads, mask, scale=x.shape[-1])


@_mistake("multi_head_attention", "scaled_by_d_h", "Your scores are divided by d_h instead of √d_h.", MHA_LINE)
def _(x, W_q, W_k, W_v, W_o, n_heads, mask=None):
    return _mha_variants(x, W_q, W_k, W_v, W_o, n_heads, mask, scale="d")


@_mistake("multi_head_attention", "scaled_by_sqrt_n_heads", "Your scores are divided by √n_heads (the number of "
          "heads) instead of √d_h (one head's width).", MHA_LINE)
def _(x, W_q, W_k, W_v, W_o, n_heads, mask=None):
    return _mha_variants(x, W_q, W_k, W_v, W_o, n_heads, mask, scale=n_heads)


@_mistake("multi_head_attention", "no_scaling", "Your scores are not divided by √d_h.", MHA_LINE)
def _(x, W_q, W_k, W_v, W_o, n_heads, mask=None):
    return _mha_variants(x, W_q, W_k, W_v, W_o, n_heads, mask, scale=None)


@_mistake("multi_head_attention", "interleaved_split", "Your heads take interleaved features; head h must take the "
          "contiguous block h·d_h … (h+1)·d_h − 1 of Q, K and V.", SPLIT_LINE)
def _(x, W_q, W_k, W_v, W_o, n_heads, mask=None):
    # merged back as the inverse of that split, or with the right merge
    return Alternatives(r for merge in ("interleaved", "right")
                        for r in _as_list(_mha_variants(x, W_q, W_k, W_v, W_o, n_heads, mask, split="interleaved",
                                                        merge=merge)))


@_mistake("multi_head_attention", "merge_without_transpose", "You merge the heads by reshaping (B, H, T, d_h) to "
          "(B, T, d) without transposing, which mixes positions and heads.", MERGE_LINE)
def _(x, W_q, W_k, W_v, W_o, n_heads, mask=None):
    return _mha_variants(x, W_q, W_k, W_v, W_o, n_heads, mask, merge="no_transpose")


@_mistake("multi_head_attention", "no_output_projection", "Your output skips the output projection W_o.", MHA_OUT_LINE)
def _(x, W_q, W_k, W_v, W_o, n_heads, mask=None):
    return _mha_variants(x, W_q, W_k, W_v, W_o, n_heads, mask, out_proj=False)


@_mistake("multi_head_attention", "weights_transposed", "You multiply by the transposed weight matrices (x @ W.T); "
          "the weights multiply from the right: Q = x W_q.", "Q = x @ W_q, K = x @ W_k, V = x @ W_v, out = … @ W_o")
def _(x, W_q, W_k, W_v, W_o, n_heads, mask=None):
    return _mha_variants(x, W_q, W_k, W_v, W_o, n_heads, mask, transpose_w=True)


@_mistake("multi_head_attention", "softmax_over_queries", "Your softmax runs over the queries (dim=-2) instead of "
          "over the keys (dim=-1).", SOFTMAX_LINE)
def _(x, W_q, W_k, W_v, W_o, n_heads, mask=None):
    return _mha_variants(x, W_q, W_k, W_v, W_o, n_heads, mask, dim=-2)


@_mistake("multi_head_attention", "mask_inverted", "Your mask is inverted: you remove the keys where mask is True "
          "(True means *may attend*).", MASK_LINE)
def _(x, W_q, W_k, W_v, W_o, n_heads, mask=None):
    return Alternatives() if mask is None else _mha_variants(x, W_q, W_k, W_v, W_o, n_heads, mask, invert=True)


@_mistake("multi_head_attention", "mask_ignored", "Your attention ignores the mask.", MASK_LINE)
def _(x, W_q, W_k, W_v, W_o, n_heads, mask=None):
    return Alternatives() if mask is None else _mha(x, W_q, W_k, W_v, W_o, n_heads, None)


@_mistake("multi_head_attention", "mask_after_softmax", "You zero the masked weights after the softmax, so the "
          "remaining weights no longer sum to 1.", MASK_LINE)
def _(x, W_q, W_k, W_v, W_o, n_heads, mask=None):
    return Alternatives() if mask is None else _mha(x, W_q, W_k, W_v, W_o, n_heads, mask, mask_mode="after")


# ---------------------------------------------------------------------------------------------------------
# 05 sinusoidal_positions, relative_position_index, relative_attention_scores
# ---------------------------------------------------------------------------------------------------------
SIN_LINE = "PE[p, 2i] = sin(p / 10000^(2i/d)),  PE[p, 2i+1] = cos(p / 10000^(2i/d))"


def _sinusoid(n, d, *, how="right", dtype=torch.float32):
    p = _arange(n, dtype=torch.float64)[:, None]
    i2 = _arange(0, d, 2, dtype=torch.float64)
    if how == "feature_index":
        i2 = 2 * i2
    freq = 10000.0 ** (-i2 / d)
    angle = p * freq if how != "multiplied" else p / freq
    pe = _zeros(n, d, dtype=torch.float64)
    if how == "swapped":
        pe[:, 0::2], pe[:, 1::2] = torch.cos(angle), torch.sin(angle)
    elif how == "halves":
        pe[:, :d // 2], pe[:, d // 2:] = torch.sin(angle), torch.cos(angle)
    else:
        pe[:, 0::2], pe[:, 1::2] = torch.sin(angle), torch.cos(angle)
    return pe.to(dtype)


@_mistake("sinusoidal_positions", "sin_cos_swapped", "Your even features hold the cosine and the odd ones the sine; it "
          "is the other way round.", SIN_LINE)
def _(n, d):
    return _sinusoid(n, d, how="swapped")


@_mistake("sinusoidal_positions", "halves", "You put all the sines in the first half of the features and the cosines "
          "in the second; they alternate (sin in even features 2i, cos in odd features 2i+1).", SIN_LINE)
def _(n, d):
    return _sinusoid(n, d, how="halves")


@_mistake("sinusoidal_positions", "exponent_feature_index", "Your exponent uses the feature index (2·(2i)/d) instead of "
          "the pair index (2i/d).", SIN_LINE)
def _(n, d):
    return _sinusoid(n, d, how="feature_index")


@_mistake("sinusoidal_positions", "multiplied", "You multiply p by 10000^(2i/d) instead of dividing by it.", SIN_LINE)
def _(n, d):
    return _sinusoid(n, d, how="multiplied")


@_mistake("sinusoidal_positions", "float64", "Your table is float64; the exercise asks for float32 (.float()).",
          "return pe.float()")
def _(n, d):
    return _sinusoid(n, d, dtype=torch.float64)


REL_LINE = "index[i, j] = clip(j − i, −k, k) + k   (row i the query, column j the key)"


def _rel(n, k, *, how="right"):
    pos = _arange(n)
    diff = pos[:, None] - pos[None, :] if how == "reversed" else pos[None, :] - pos[:, None]
    if how == "no_clip":
        return diff + k
    if how == "no_offset":
        return diff.clamp(-k, k)
    return diff.clamp(-k, k) + k


@_mistake("relative_position_index", "reversed", "Your index uses i − j; it is j − i (key minus query).", REL_LINE)
def _(n, k):
    return _rel(n, k, how="reversed")


@_mistake("relative_position_index", "no_clip", "Your index is not clipped to −k … k before adding k.", REL_LINE)
def _(n, k):
    return _rel(n, k, how="no_clip")


@_mistake("relative_position_index", "no_offset", "Your index is not shifted by +k, so it runs from −k to k instead of "
          "0 to 2k.", REL_LINE)
def _(n, k):
    return _rel(n, k, how="no_offset")


@_mistake("relative_position_index", "not_long", "Your index is not torch.long (integer indices).", REL_LINE)
def _(n, k):
    return Alternatives([_rel(n, k).to(dt) for dt in (torch.float32, torch.int32, torch.float64)])


RELS_LINE = "e_ij = (q_i · k_j + q_i · a_k[i, j]) / √d"


def _rel_scores(q, k, a_k, *, how="right"):
    d = q.shape[-1]
    content = q @ _t(k)
    a = a_k.transpose(0, 1) if how == "a_transposed" else a_k
    if how == "position_uses_k":
        position = (k.unsqueeze(-3) * a).sum(-1)
    else:
        position = (q.unsqueeze(-2) * a).sum(-1)
    if how == "no_position":
        return content / math.sqrt(d)
    if how == "no_scaling":
        return content + position
    if how == "scale_content_only":
        return content / math.sqrt(d) + position
    return (content + position) / math.sqrt(d)


@_mistake("relative_attention_scores", "no_scaling", "Your scores are not divided by √d.", RELS_LINE)
def _(q, k, a_k):
    return _rel_scores(q, k, a_k, how="no_scaling")


@_mistake("relative_attention_scores", "scale_content_only", "You divide only q_i · k_j by √d; the position term "
          "q_i · a_k[i, j] is divided too.", RELS_LINE)
def _(q, k, a_k):
    return _rel_scores(q, k, a_k, how="scale_content_only")


@_mistake("relative_attention_scores", "no_position_term", "Your scores leave out the position term q_i · a_k[i, j].",
          RELS_LINE)
def _(q, k, a_k):
    return _rel_scores(q, k, a_k, how="no_position")


@_mistake("relative_attention_scores", "a_k_transposed", "You use a_k[j, i] instead of a_k[i, j] (row i is the query).",
          RELS_LINE)
def _(q, k, a_k):
    return _rel_scores(q, k, a_k, how="a_transposed")


@_mistake("relative_attention_scores", "position_uses_key", "Your position term uses the key (k_j · a_k[i, j]); it "
          "uses the query: q_i · a_k[i, j].", RELS_LINE)
def _(q, k, a_k):
    return _rel_scores(q, k, a_k, how="position_uses_k")


# ---------------------------------------------------------------------------------------------------------
# 06 padding_mask, decoder_mask, layer_norm, decoder_block
# ---------------------------------------------------------------------------------------------------------
PAD_LINE = "mask[b, j] = True where j < lengths[b]"
DEC_LINE = "mask[b, 0, i, j] = (j <= i) and (j < lengths[b])   (padding on the keys j)"


def _pad(lengths, max_len, *, how="right"):
    j = _arange(max_len)[None, :]
    L = lengths[:, None]
    if how == "inverted":
        return j >= L
    if how == "le":
        return j <= L
    if how == "minus_one":
        return j < L - 1
    return j < L


@_mistake("padding_mask", "inverted", "Your mask is True on the padding and False on the tokens; True means a real "
          "token (may attend).", PAD_LINE)
def _(lengths, max_len):
    return _pad(lengths, max_len, how="inverted")


@_mistake("padding_mask", "off_by_one", "Your mask keeps one position too many (j <= length instead of j < length).",
          PAD_LINE)
def _(lengths, max_len):
    return _pad(lengths, max_len, how="le")


@_mistake("padding_mask", "one_too_few", "Your mask keeps one position too few (j < length − 1 instead of "
          "j < length).", PAD_LINE)
def _(lengths, max_len):
    return _pad(lengths, max_len, how="minus_one")


@_mistake("padding_mask", "ignores_lengths", "Your mask ignores the lengths: every position is True.", PAD_LINE)
def _(lengths, max_len):
    return _ones(len(lengths), max_len, dtype=torch.bool)


def _dec(lengths, max_len, *, causal=0, pad="keys", combine="and", heads=True, upper=False):
    c = _tri(max_len, upper, causal) if causal is not None else _ones(max_len, max_len, dtype=torch.bool)
    p = _pad(lengths, max_len)
    if pad == "keys":
        pm = p[:, None, :]
    elif pad == "queries":
        pm = p[:, :, None]
    else:
        pm = _ones(len(lengths), 1, 1, dtype=torch.bool)
    m = (pm & c) if combine == "and" else (pm | c)
    return m[:, None] if heads else m


@_mistake("decoder_mask", "padding_on_queries", "Your mask also hides the padded query rows (i ≥ length): a "
          "padded position must still attend to the real keys; only the padded keys (j ≥ length) are hidden.", DEC_LINE)
def _(lengths, max_len):
    return _dec(lengths, max_len, pad="queries")


@_mistake("decoder_mask", "diagonal_excluded", "Your causal part leaves out the diagonal: a token may attend to itself "
          "(j <= i, not j < i).", DEC_LINE)
def _(lengths, max_len):
    return _dec(lengths, max_len, causal=-1)


@_mistake("decoder_mask", "causal_upper_triangle", "Your causal part is the upper triangle (j >= i, the future) "
          "instead of the lower one (j <= i, the past).", DEC_LINE)
def _(lengths, max_len):
    return _dec(lengths, max_len, upper=True)


@_mistake("decoder_mask", "ignores_lengths", "Your mask is only causal: it ignores the padding (j < length).", DEC_LINE)
def _(lengths, max_len):
    return _dec(lengths, max_len, pad="none")


@_mistake("decoder_mask", "not_causal", "Your mask has only the padding: the causal part (j <= i) is missing.", DEC_LINE)
def _(lengths, max_len):
    return _dec(lengths, max_len, causal=None)


@_mistake("decoder_mask", "or_instead_of_and", "You combine the causal mask and the padding with `or`; a key must pass "
          "both (`&`).", DEC_LINE)
def _(lengths, max_len):
    return _dec(lengths, max_len, combine="or")


@_mistake("decoder_mask", "no_head_dimension", "Your mask is (B, T, T); it needs the head dimension: (B, 1, T, T).",
          DEC_LINE)
def _(lengths, max_len):
    return _dec(lengths, max_len, heads=False)


LN_LINE = "layer_norm(x) = gamma · (x − mean) / sqrt(var + eps) + beta,  var = mean((x − mean)²)  (biased)"


def _ln(x, gamma, beta, eps=1e-5, *, how="right"):
    dim = 0 if how == "wrong_dim" else -1
    mean = x.mean(dim=dim, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=dim, keepdim=True)
    if how == "unbiased":
        n = x.shape[dim]
        var = var * n / (n - 1) if n > 1 else var * math.nan
    if how == "eps_outside":
        xhat = (x - mean) / (_sqrt(var) + eps)
    elif how == "no_sqrt":
        xhat = (x - mean) / (var + eps)
    else:
        xhat = (x - mean) / _sqrt(var + eps)
    if how == "gamma_beta_swapped":
        return beta * xhat + gamma
    return gamma * xhat + beta


@_mistake("layer_norm", "unbiased_variance", "Your variance is the unbiased one (divided by d − 1); layer norm divides "
          "by d.", LN_LINE)
def _(x, gamma, beta, eps=1e-5):
    return _ln(x, gamma, beta, eps, how="unbiased")


@_mistake("layer_norm", "eps_outside_sqrt", "Your eps is added after the square root; it goes inside: sqrt(var + eps).",
          LN_LINE)
def _(x, gamma, beta, eps=1e-5):
    return _ln(x, gamma, beta, eps, how="eps_outside")


@_mistake("layer_norm", "no_sqrt", "You divide by the variance, not by its square root.", LN_LINE)
def _(x, gamma, beta, eps=1e-5):
    return _ln(x, gamma, beta, eps, how="no_sqrt")


@_mistake("layer_norm", "gamma_beta_swapped", "You swapped gamma and beta: the scale gamma multiplies, the shift beta "
          "is added.", LN_LINE)
def _(x, gamma, beta, eps=1e-5):
    return _ln(x, gamma, beta, eps, how="gamma_beta_swapped")


@_mistake("layer_norm", "wrong_dimension", "You normalise over the first dimension; layer norm works over the last "
          "(the features of each position).", LN_LINE)
def _(x, gamma, beta, eps=1e-5):
    if x.shape[0] != x.shape[-1] and x.dim() > 1 and gamma.shape[-1] == x.shape[-1]:
        return _ln(x, gamma, beta, eps, how="wrong_dim")
    return Alternatives()


BLOCK_LINE = "h = LN(x + self_attn(x, mask)),  out = LN(h + feed_forward(h))   (post-norm)"


def _block(x, mask, self_attn, feed_forward, g1, b1, g2, b2, eps=1e-5, *, how="right"):
    ln = lambda z, g, b: _ln(z, g, b, eps)  # noqa: E731
    if how == "pre_norm":
        h = x + self_attn(ln(x, g1, b1), mask)
        return h + feed_forward(ln(h, g2, b2))
    if how == "no_residual":
        h = ln(self_attn(x, mask), g1, b1)
        return ln(feed_forward(h), g2, b2)
    h = ln(x + self_attn(x, mask), g1, b1)
    if how == "ffn_on_x":
        return ln(h + feed_forward(x), g2, b2)
    if how == "same_norm":
        return ln(h + feed_forward(h), g1, b1)
    if how == "one_norm":
        return h + feed_forward(h)
    return ln(h + feed_forward(h), g2, b2)


def _block_variant(how):
    def compute(x, mask, self_attn, feed_forward, gamma1, beta1, gamma2, beta2, eps=1e-5):
        with torch.no_grad():
            return _block(x, mask, self_attn, feed_forward, gamma1, beta1, gamma2, beta2, eps, how=how)
    return compute


for _name, _how, _sentence in [
        ("pre_norm", "pre_norm", "Your block is pre-norm (x + self_attn(LN(x))); this one is post-norm: the layer "
                                 "norm comes after each residual sum."),
        ("no_residual", "no_residual", "Your block leaves out the residual connections (x + … and h + …)."),
        ("ffn_on_x", "ffn_on_x", "Your feed-forward network is applied to x instead of to h."),
        ("same_norm_twice", "same_norm", "Your second layer norm uses gamma1, beta1; it has its own gamma2, beta2."),
        ("missing_second_norm", "one_norm", "Your block leaves out the second layer norm (after h + feed_forward(h)).")]:
    _mistake("decoder_block", _name, _sentence, BLOCK_LINE)(_block_variant(_how))


# ---------------------------------------------------------------------------------------------------------
# 07 sliding_window_mask, global_mask, random_mask, blockwise_attention
# ---------------------------------------------------------------------------------------------------------
WIN_LINE = "mask[i, j] = True where |i − j| <= window"


@_mistake("sliding_window_mask", "strict", "Your window leaves out its edges (|i − j| < window); they are included "
          "(<=).", WIN_LINE)
def _(n, window):
    pos = _arange(n)
    return (pos[:, None] - pos[None, :]).abs() < window


@_mistake("sliding_window_mask", "one_sided", "Your window only looks back (0 <= i − j <= window); it reaches both "
          "ways: |i − j| <= window.", WIN_LINE)
def _(n, window):
    pos = _arange(n)
    diff = pos[:, None] - pos[None, :]
    return Alternatives([(diff >= 0) & (diff <= window), (diff <= 0) & (diff >= -window)])


@_mistake("sliding_window_mask", "no_abs", "Your condition has no absolute value (i − j <= window), so every later "
          "key passes.", WIN_LINE)
def _(n, window):
    pos = _arange(n)
    return Alternatives([(pos[:, None] - pos[None, :]) <= window, (pos[None, :] - pos[:, None]) <= window])


@_mistake("sliding_window_mask", "window_doubled", "Your window is twice as wide (|i − j| <= 2·window).", WIN_LINE)
def _(n, window):
    pos = _arange(n)
    return (pos[:, None] - pos[None, :]).abs() <= 2 * window


@_mistake("sliding_window_mask", "half_width", "Your window reaches only window // 2 positions each way "
          "(|i − j| <= window // 2); it reaches window positions each way.", WIN_LINE)
def _(n, window):
    pos = _arange(n)
    return (pos[:, None] - pos[None, :]).abs() <= window // 2


@_mistake("sliding_window_mask", "one_too_wide", "Your window reaches one position too far (|i − j| <= window + 1).",
          WIN_LINE)
def _(n, window):
    pos = _arange(n)
    return (pos[:, None] - pos[None, :]).abs() <= window + 1


GLOBAL_LINE = "mask[g, :] = True and mask[:, g] = True for every global position g"


def _global(n, idx, rows=True, cols=True):
    idx = torch.as_tensor(idx, dtype=torch.long)
    m = _zeros(n, n, dtype=torch.bool)
    if rows:
        m[idx, :] = True
    if cols:
        m[:, idx] = True
    return m


@_mistake("global_mask", "rows_only", "Your mask sets only the rows of the global positions (they attend to every "
          "key); their columns must be True too (every query attends to them).", GLOBAL_LINE)
def _(n, global_idx):
    return _global(n, global_idx, cols=False)


@_mistake("global_mask", "columns_only", "Your mask sets only the columns of the global positions; their rows must be "
          "True too (a global position attends to every key).", GLOBAL_LINE)
def _(n, global_idx):
    return _global(n, global_idx, rows=False)


@_mistake("global_mask", "diagonal_added", "Your mask also sets the diagonal; only the rows and columns of the global "
          "positions are True.", GLOBAL_LINE)
def _(n, global_idx):
    return _global(n, global_idx) | torch.eye(n, dtype=torch.bool)


BLOCK_ATTN_LINE = ("m_new = max(m, s.amax(-1));  p = exp(s − m_new);  correction = exp(m − m_new);  "
                   "l = l·correction + p.sum(-1);  acc = acc·correction + p @ v_block;  out = acc / l")


def _blockwise(q, k, v, block_size, *, scaled=True, rescale_l=True, rescale_acc=True, divide=True, inverted=False):
    scale = 1.0 / math.sqrt(q.shape[-1]) if scaled else 1.0
    m = torch.full((*q.shape[:-1], 1), float("-inf"), dtype=q.dtype)
    l = _zeros((*q.shape[:-1], 1), dtype=q.dtype)
    acc = _zeros((*q.shape[:-1], v.shape[-1]), dtype=q.dtype)
    for start in range(0, k.shape[-2], block_size):
        s = q @ _t(k[..., start:start + block_size, :]) * scale
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        p = _exp(s - m_new)
        correction = _exp(m_new - m).nan_to_num(posinf=0.0) if inverted else _exp(m - m_new)
        l = (l * correction if rescale_l else l) + p.sum(dim=-1, keepdim=True)
        acc = (acc * correction if rescale_acc else acc) + p @ v[..., start:start + block_size, :]
        m = m_new
    return acc / l if divide else acc


@_mistake("blockwise_attention", "no_rescale", "Your running sum and output are not rescaled by exp(m_old − m_new) "
          "when the running maximum grows.", BLOCK_ATTN_LINE)
def _(q, k, v, block_size):
    return _blockwise(q, k, v, block_size, rescale_l=False, rescale_acc=False)


@_mistake("blockwise_attention", "rescale_sum_only", "You rescale the running sum l but not the running output acc "
          "when the maximum grows.", BLOCK_ATTN_LINE)
def _(q, k, v, block_size):
    return _blockwise(q, k, v, block_size, rescale_acc=False)


@_mistake("blockwise_attention", "rescale_output_only", "You rescale the running output acc but not the running sum l "
          "when the maximum grows.", BLOCK_ATTN_LINE)
def _(q, k, v, block_size):
    return _blockwise(q, k, v, block_size, rescale_l=False)


@_mistake("blockwise_attention", "no_final_division", "Your result is not divided by the running sum l at the end.",
          BLOCK_ATTN_LINE)
def _(q, k, v, block_size):
    return _blockwise(q, k, v, block_size, divide=False)


@_mistake("blockwise_attention", "correction_inverted", "Your correction is exp(m_new − m_old), the inverse of "
          "exp(m_old − m_new).", BLOCK_ATTN_LINE)
def _(q, k, v, block_size):
    return _blockwise(q, k, v, block_size, inverted=True)


@_mistake("blockwise_attention", "no_scaling", "Your scores are not divided by √d.", "s = q @ k_blockᵀ / √d")
def _(q, k, v, block_size):
    return _blockwise(q, k, v, block_size, scaled=False)


# ---------------------------------------------------------------------------------------------------------
# 08 chinchilla_loss, compute_optimal, fit_power_law
# ---------------------------------------------------------------------------------------------------------
NOTES_PARAMS = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}
LOSS_LINE = "L(N, D) = E + A / N^alpha + B / D^beta"


def _loss(N, D, p, how="right"):
    E, A, B, a, b = p["E"], p["A"], p["B"], p["alpha"], p["beta"]
    if how == "swapped":
        return E + A / N ** b + B / D ** a
    if how == "A_B_swapped":
        return E + B / N ** a + A / D ** b
    if how == "no_E":
        return A / N ** a + B / D ** b
    if how == "multiplied":
        return E + A * N ** a + B * D ** b
    if how == "perplexity":
        L = E + A / N ** a + B / D ** b
        return torch.exp(L) if _type(L) is _Tensor else math.exp(L)
    return E + A / N ** a + B / D ** b


for _name, _how, _sentence in [
        ("exponents_swapped", "swapped", "Your exponents are swapped: N takes alpha and D takes beta."),
        ("A_B_swapped", "A_B_swapped", "Your constants A and B are swapped: N takes A (A / N^alpha) and D takes B "
                                       "(B / D^beta)."),
        ("no_E", "no_E", "Your loss leaves out the irreducible term E."),
        ("multiplied", "multiplied", "You multiply by N^alpha and D^beta instead of dividing by them."),
        ("perplexity", "perplexity", "Your function returns the perplexity e^L; it returns the loss L itself.")]:
    _mistake("chinchilla_loss", _name, _sentence, LOSS_LINE)(
        (lambda how: lambda N, D, params=None: _loss(N, D, NOTES_PARAMS if params is None else params, how))(_how))


@_mistake("chinchilla_loss", "ignores_params", "Your function ignores the params it is given and always uses the "
          "notes' constants.", "p = params if params is not None else the notes' constants")
def _(N, D, params=None):
    return Alternatives() if params is None else _loss(N, D, NOTES_PARAMS)


OPT_LINE = ("N_opt = G · (C/6)^(beta/(alpha+beta)),  G = (alpha·A / (beta·B))^(1/(alpha+beta)),  "
            "D_opt = C / (6 N_opt)")


def _opt(C, p, how="right"):
    a, b, A, B = p["alpha"], p["beta"], p["A"], p["B"]
    if how == "twenty":
        N = (C / 120) ** 0.5
        return N, 20 * N
    G = (a * A / (b * B)) ** (1 / (a + b))
    if how == "G_inverted":
        G = 1 / G
    e = a / (a + b) if how == "exponent_swapped" else b / (a + b)
    N = G * ((C if how == "no_six" else C / 6) ** e)
    D = C / (6 * N)
    return (D, N) if how == "swapped_result" else (N, D)


for _name, _how, _sentence in [
        ("twenty_tokens_per_parameter", "twenty", "Your N and D follow the 20-tokens-per-parameter rule of thumb; with "
                                                  "these constants the optimum comes from the closed form."),
        ("exponent_swapped", "exponent_swapped", "Your exponent of C/6 is alpha/(alpha+beta); it is beta/(alpha+beta)."),
        ("G_inverted", "G_inverted", "Your G is inverted: G = (alpha·A / (beta·B))^(1/(alpha+beta))."),
        ("C_not_divided_by_6", "no_six", "Your N_opt uses C instead of C/6."),
        ("returns_D_N", "swapped_result", "Your function returns (D, N); it returns (N, D).")]:
    _mistake("compute_optimal", _name, _sentence, OPT_LINE)(
        (lambda how: lambda C, params=None: _opt(C, NOTES_PARAMS if params is None else params, how))(_how))


FIT_LINE = "c, log k = slope and intercept of the least-squares line of log y against log x;  k = exp(log k)"


def _fit(x, y, how="right"):
    u = torch.log(torch.as_tensor(x, dtype=torch.float64))
    w = torch.log(torch.as_tensor(y, dtype=torch.float64))
    if how in ("log10", "ln_then_10"):
        u, w = (u / math.log(10), w / math.log(10)) if how == "log10" else (u, w)
    if how == "x_on_y":
        u, w = w, u
    c = ((u - u.mean()) * (w - w.mean())).sum() / ((u - u.mean()) ** 2).sum()
    logk = w.mean() - c * u.mean()
    k = 10 ** logk if how == "ln_then_10" else torch.exp(logk)
    if how == "log_k":
        return logk.item(), c.item()
    if how == "swapped":
        return c.item(), k.item()
    return k.item(), c.item()


for _name, _how, _sentence in [
        ("returns_log_k", "log_k", "Your k is the intercept log k; return k = exp(intercept)."),
        ("returns_c_k", "swapped", "Your function returns (c, k); it returns (k, c)."),
        ("log10_then_exp", "log10", "You fit with log10 but turn the intercept back with exp (or the other way round); "
                                    "use the same logarithm both ways."),
        ("regressed_x_on_y", "x_on_y", "You fit log x against log y; the line is log y against log x.")]:
    _mistake("fit_power_law", _name, _sentence, FIT_LINE)(
        (lambda how: lambda x, y: Alternatives([_fit(x, y, "log10"), _fit(x, y, "ln_then_10")]) if how == "log10"
         else _fit(x, y, how))(_how))


# ---------------------------------------------------------------------------------------------------------
# More mistakes, one per function where learners often go wrong in yet another way
# ---------------------------------------------------------------------------------------------------------
@_mistake("rnn_forward", "H_includes_h0", "Your H starts with h0: it holds T + 1 states, but H is h_1 .. h_T.",
          "H = (h_1, ..., h_T), " + RNN_LINE)
def _(x, h0, W_xh, W_hh, b_h):
    H, h = _rnn(x, h0, W_xh, W_hh, b_h)
    return torch.cat([h0[:, None], H], dim=1), h


@_mistake("rnn_forward", "returns_first_state", "Your h_T is the first state h_1, not the last one.",
          "h_T = the state after the last step (H[:, -1])")
def _(x, h0, W_xh, W_hh, b_h):
    H, _h = _rnn(x, h0, W_xh, W_hh, b_h)
    return H, H[:, 0]


@_mistake("grad_norm_by_distance", "sum_of_norms", "Your entries add up one norm per sequence of the batch; entry t is "
          "a single 2-norm over the batch and the features together.", GRAD_LINE)
def _(x, h0, W_xh, W_hh, b_h):
    with torch.enable_grad():
        xr = x.detach().clone().requires_grad_(True)
        _H, h_T = _rnn(xr, h0, W_xh, W_hh, b_h)
        (g,) = torch.autograd.grad(h_T.sum(), xr)
    return g.detach().pow(2).sum(dim=2).sqrt().sum(dim=0)


@_mistake("scaled_dot_product_attention", "scaled_by_number_of_keys", "Your scores are divided by the square root of "
          "the number of keys (k.shape[-2]); d_k is the feature size, k.shape[-1].", SDPA_LINE)
def _(q, k, v, mask=None):
    return _attention_variants(q, k, v, mask, scale=k.shape[-2])


@_mistake("scaled_dot_product_attention", "returns_weights_first", "Your function returns (weights, out); it returns "
          "(out, weights).", "return weights @ v, weights")
def _(q, k, v, mask=None):
    r = _attention_variants(q, k, v, mask)
    return Alternatives((w, o) for o, w in _as_list(r))


@_mistake("causal_mask", "additive_mask", "Your mask is an additive float mask (0 and -inf); the course's masks are "
          "booleans, True where a query may attend.", CAUSAL_LINE)
def _(n):
    allowed = _tri(n, False, 0)
    return Alternatives([_zeros(n, n, dtype=dt).masked_fill(~allowed, v) for dt in (torch.float32, torch.float64)
                         for v in (float("-inf"), -1e9)])


@_mistake("multi_head_attention", "single_head", "Your attention runs as one head over the full width d; the "
          "features must be split into n_heads heads of width d_h = d / n_heads.",
          "q = split_heads(x @ W_q, n_heads)   (the same for k and v)")
def _(x, W_q, W_k, W_v, W_o, n_heads, mask=None):
    if n_heads == 1:
        return Alternatives()
    d = x.shape[-1]
    return Alternatives(r for scale in (d, d // n_heads) for r in _as_list(
        _mha_variants(x, W_q, W_k, W_v, W_o, 1, mask, scale=scale)))


@_mistake("sinusoidal_positions", "exponent_halved", "Your exponent is i/d; with i the pair index it is 2i/d.", SIN_LINE)
def _(n, d):
    p = _arange(n, dtype=torch.float64)[:, None]
    freq = 10000.0 ** (-_arange(0, d // 2, dtype=torch.float64) / d)
    pe = _zeros(n, d, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(p * freq), torch.cos(p * freq)
    return pe.float()


@_mistake("padding_mask", "not_bool", "Your mask holds numbers, not booleans (dtype torch.bool).", PAD_LINE)
def _(lengths, max_len):
    return Alternatives([_pad(lengths, max_len).to(dt) for dt in (torch.float32, torch.int64, torch.float64)])


@_mistake("layer_norm", "no_eps", "Your layer norm leaves out eps, so a row with zero variance divides 0 by 0.",
          LN_LINE)
def _(x, gamma, beta, eps=1e-5):
    return _ln(x, gamma, beta, 0.0)


@_mistake("layer_norm", "no_gamma_beta", "Your layer norm leaves out the scale gamma and the shift beta.", LN_LINE)
def _(x, gamma, beta, eps=1e-5):
    return _ln(x, torch.ones_like(gamma), torch.zeros_like(beta), eps)


@_mistake("layer_norm", "no_beta", "Your layer norm leaves out the shift beta (+ beta).", LN_LINE)
def _(x, gamma, beta, eps=1e-5):
    return _ln(x, gamma, torch.zeros_like(beta), eps)


@_mistake("layer_norm", "no_gamma", "Your layer norm leaves out the scale gamma (gamma ·).", LN_LINE)
def _(x, gamma, beta, eps=1e-5):
    return _ln(x, torch.ones_like(gamma), beta, eps)


@_mistake("global_mask", "intersection_only", "Your mask is True only where a global row meets a global column; it "
          "is True in the whole row and the whole column of every global position.", GLOBAL_LINE)
def _(n, global_idx):
    idx = torch.as_tensor(global_idx, dtype=torch.long)
    m = _zeros(n, n, dtype=torch.bool)
    m[idx[:, None], idx[None, :]] = True
    return m


@_mistake("compute_optimal", "D_without_6", "Your D_opt is C / N; the budget is C = 6·N·D, so D_opt = C / (6 N_opt).",
          OPT_LINE)
def _(C, params=None):
    N, _D = _opt(C, NOTES_PARAMS if params is None else params)
    return N, C / N


# ---------------------------------------------------------------------------------------------------------
# Diagnosis
# ---------------------------------------------------------------------------------------------------------
def _same(got, expected):
    """True when ``got`` is what a variant returned: same structure, type, shape, dtype and values (NaN = NaN)."""
    if _type(expected) in (tuple, list):
        return (_type(got) in (tuple, list) and len(got) == len(expected)
                and all(_same(g, e) for g, e in zip(got, expected)))
    if _type(expected) is _Tensor:
        if _type(got) is not _Tensor or got.shape != expected.shape or got.dtype != expected.dtype:
            return False
        g, e = got.detach(), expected.detach()
        if not e.dtype.is_floating_point:
            return bool(torch.equal(g, e))
        if e.numel() == 0:
            return True
        tol = 1e-10 if e.dtype == torch.float64 else 1e-5
        return bool(_allclose(g, e, rtol=1e-4, atol=tol, equal_nan=True))
    if _type(expected) in (int, float):
        try:
            value = float(got.item()) if _type(got) is _Tensor and got.numel() == 1 else float(got)
        except (TypeError, ValueError):
            return False
        if math.isnan(expected):
            return math.isnan(value)
        return math.isclose(value, float(expected), rel_tol=1e-6, abs_tol=1e-12)
    return False


def _distance(got, expected):
    """The largest absolute difference between two results that ``_same`` matched (NaN against NaN counts 0)."""
    if _type(expected) in (tuple, list):
        return max((_distance(g, e) for g, e in zip(got, expected)), default=0.0)
    if _type(expected) is _Tensor:
        if expected.numel() == 0 or not expected.dtype.is_floating_point:
            return 0.0
        diff = (got.detach().double() - expected.detach().double()).abs()
        return float(diff.nan_to_num(nan=0.0).max())
    value = float(got.item()) if _type(got) is _Tensor else float(got)
    return 0.0 if math.isnan(value) and math.isnan(expected) else abs(value - float(expected))


def _signature(value):
    """A short summary of one input, enough to tell a test's inputs from another test's."""
    if _type(value) is _Tensor:
        v = value.detach().double()
        return ("tensor", tuple(value.shape), str(value.dtype), float(v.nan_to_num().sum()),
                float((v.nan_to_num() ** 2).sum()))
    return (_type(value).__name__, repr(value))


# The earlier calls of each graded function in this notebook: function -> {inputs' signature: (inputs, result)}.
# A re-run of a test replaces its own entry.  ``owner`` is tfmlib.checking's mode when they were recorded: a
# new grading replay (a new mode) starts a new history, so one notebook's calls never meet another's.
_HISTORY = {"owner": None, "calls": {}}


def reset_history():
    """Forget the recorded calls (a new notebook starts)."""
    _HISTORY["owner"], _HISTORY["calls"] = check._MODE, {}


def _remember(function, result, inputs):
    if _HISTORY["owner"] is not check._MODE:
        reset_history()
    key = tuple(sorted((name, _signature(value)) for name, value in inputs.items()))
    kept = {k: (v.detach().clone() if _type(v) is _Tensor else v) for k, v in inputs.items()}
    _HISTORY["calls"].setdefault(function, {})[key] = (kept, result)
    return key


def _variants(mistake, inputs):
    """What ``mistake`` returns from ``inputs``: a list of alternatives (empty: invisible on these inputs)."""
    with torch.no_grad():
        wrong = mistake.compute(**{k: (v.detach() if _type(v) is _Tensor else v) for k, v in inputs.items()})
    return list(wrong) if isinstance(wrong, Alternatives) else [wrong]


def _consistent(mistake, function, current):
    """False when an earlier call of ``function`` in this notebook returned something this mistake would not
    have returned: the learner's code cannot have that mistake (a coincidence on the failing test's inputs)."""
    for key, (inputs, result) in _HISTORY["calls"].get(function, {}).items():
        if key == current:
            continue
        try:
            candidates = _variants(mistake, inputs)
        except Exception:  # a variant that cannot run on those inputs tells nothing
            continue
        if candidates and not any(_same(result, c) for c in candidates):
            return False
    return True


def diagnose(function, result, current=None, **inputs):
    """The catalogued mistake of ``function`` whose variant reproduces ``result`` from ``inputs``, else None.

    A mistake is named only when it is the one explanation: its variant reproduces the result and agrees with
    every earlier call of the function in this notebook (``current`` is this call's key in that history), and
    it is at least ten times closer than any other such mistake (two exact matches: None, the message must not
    guess between them).  A mistake that an earlier call rules out is no candidate, so it forces no tie."""
    matches = []
    for mistake in CATALOGUE.get(function, []):
        try:
            distances = [_distance(result, c) for c in _variants(mistake, inputs) if _same(result, c)]
        except Exception:  # a variant that cannot run on these inputs does not match
            continue
        if distances and _consistent(mistake, function, current):
            matches.append((min(distances), mistake))
    if not matches:
        return None
    matches.sort(key=lambda m: m[0])
    if len(matches) == 1 or matches[0][0] < 0.1 * matches[1][0]:
        return matches[0][1]
    return None


class For:
    """The checks of one result of a graded function, with a diagnosis on failure.

    ``For("scaled_dot_product_attention", result, q=q, k=k, v=v)``: ``result`` is what ``check.call``
    returned, the keyword arguments are the inputs of that call (the names of the contract).  The methods
    are ``tfmlib.checking``'s comparisons; when one fails, its message starts with the mistake the
    catalogue recognises, if any.
    """

    def __init__(self, function, result, **inputs):
        self.function, self.result, self.inputs = function, result, inputs
        self.key = _remember(function, result, inputs)
        self.dependencies, self.composed = {}, None

    def relies_on(self, checks, composed=None):
        """Declare the learner's own functions this one is built on, checked on this test's inputs.

        ``checks``: {function name: (what the learner's function returned on the inputs a correct caller hands
        it, or None when it raised; the trusted result for those inputs)}.  ``composed``: what a correct
        implementation of this function returns when built on the learner's own functions (None: unknown).
        A later failure names a dependency that is wrong on these inputs and says to fix it first
        (``fix_first``).  Returns self."""
        self.dependencies, self.composed = dict(checks), composed
        return self

    def _run(self, comparison, name, *args, **kwargs):
        __tracebackhide__ = True
        try:
            comparison(name, *args, **kwargs)
        except check.CheckFailure as failure:
            wrong = [f for f, (got, expected) in self.dependencies.items() if not _agrees(got, expected)]
            cause = ("unknown" if self.composed is None
                     else "only" if _agrees(self.result, self.composed, exact=True) else "also")
            if wrong and cause == "only":
                raise fix_first(failure, name, self.function, wrong, cause) from None
            explained = explain(failure, name, diagnose(self.function, self.result, self.key, **self.inputs))
            raise (fix_first(explained, name, self.function, wrong, cause) if wrong else explained) from None

    def assert_close(self, name, got, expected, atol=None, rtol=None):
        __tracebackhide__ = True
        self._run(check.assert_close, name, got, expected, atol=atol, rtol=rtol)

    def assert_equal(self, name, got, expected):
        __tracebackhide__ = True
        self._run(check.assert_equal, name, got, expected)

    def assert_tensor(self, name, got, shape=None, dtype=None):
        __tracebackhide__ = True
        self._run(check.assert_tensor, name, got, shape, dtype)

    def assert_number(self, name, got, expected, rel=1e-6, abs_=0.0):
        __tracebackhide__ = True
        self._run(check.assert_number, name, got, expected, rel=rel, abs_=abs_)

    def assert_true(self, name, condition, message):
        __tracebackhide__ = True
        self._run(check.assert_true, name, condition, message)


def explain(failure, name, mistake):
    """A CheckFailure whose message names ``mistake`` (a Mistake or None) before the numbers of ``failure``."""
    text = str(failure)
    prefix = f"{name}: "
    numbers = text[len(prefix):] if text.startswith(prefix) else text
    if mistake is None:
        new = check.CheckFailure(text)
    else:
        new = check.CheckFailure(f"{name}: {mistake.sentence}\n  The line involved:  {mistake.line}\n  {numbers}")
    new.mistake = None if mistake is None else mistake.name
    return new


# ---------------------------------------------------------------------------------------------------------
# Fix first: a failure caused by another of the learner's functions (``For.relies_on``)
# ---------------------------------------------------------------------------------------------------------
def _agrees(got, expected, exact=False):
    """True when ``got`` passes the tests' comparison with ``expected`` (tuples and lists item by item, numbers
    by value).  Not ``exact``: a float32 result may differ by 1e-4, so a rounding difference never counts as a
    wrong dependency."""
    if _type(expected) in (tuple, list):
        return (_type(got) in (tuple, list) and len(got) == len(expected)
                and all(_agrees(g, e, exact) for g, e in zip(got, expected)))
    if _type(expected) is not _Tensor:
        return _same(got, expected)
    loose = not exact and expected.dtype == torch.float32
    try:
        check.assert_close("dependency", got, expected, atol=1e-4 if loose else None, rtol=1e-3 if loose else None)
    except check.CheckFailure:
        return False
    return True


def fix_first(failure, name, function, wrong, cause="unknown"):
    """A CheckFailure that names the learner's functions ``wrong`` (wrong on this test's inputs) to fix first.

    ``cause``: "only" when ``function`` returned exactly what a correct ``function`` returns on top of them (they
    are the whole cause); "also" when it did not (``function`` has a mistake of its own too, which ``failure``
    names if it is known); "unknown" when the test cannot tell."""
    names = " and ".join(wrong)
    verb, it = ("are", "them") if len(wrong) > 1 else ("is", "it")
    text = str(failure)
    rest = text[len(name) + 2:] if text.startswith(f"{name}: ") else text
    if cause == "only":
        sentence = (f"{function} gives a wrong result only because your {names} {verb} wrong on these inputs: "
                    f"fix {names} first.")
    elif cause == "also":
        sentence = (f"your {names} {verb} wrong on these inputs too, and {function} is built on {it}: "
                    f"fix {names} first, then {function}.")
    else:
        sentence = f"your {names} {verb} wrong on these inputs, and {function} is built on {it}: fix {names} first."
    new = check.CheckFailure(f"{name}: {sentence}\n  {rest}")
    new.mistake = None if cause == "only" else getattr(failure, "mistake", None)
    new.fix_first = list(wrong)
    return new


# ---------------------------------------------------------------------------------------------------------
# Tracebacks in the learner's kernel: the test cell's line, not tfmlib's internals
# ---------------------------------------------------------------------------------------------------------
_INTERNAL_FILES = {check.__file__, __file__}


def _without_internals(tb):
    """``tb`` with the frames of tfmlib/checking.py and tfmlib/feedback.py left out (relinks tb_next)."""
    frames = []
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    kept = [t for t in frames if t.tb_frame.f_code.co_filename not in _INTERNAL_FILES] or frames[:1]
    for a, b in zip(kept, kept[1:]):
        a.tb_next = b
    kept[-1].tb_next = None
    return kept[0]


def _show_without_internals(shell, etype, value, tb, tb_offset=None):
    """IPython custom exception handler.  IPython always shows the frame that raised, even one marked
    ``__tracebackhide__``; a check's failure is raised inside tfmlib, so those frames are cut out here.
    Everything else IPython does with an error (the error output, the failed execute reply) is unchanged."""
    shell.showtraceback((etype, value, _without_internals(tb)), tb_offset=tb_offset)


def _install_in_ipython():
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None and not shell.custom_exceptions:
        shell.set_custom_exc((Exception,), _show_without_internals)


_install_in_ipython()

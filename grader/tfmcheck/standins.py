"""Each graded function scores on its own: while a test calls a function built on another graded function (``DEPENDS``:
``self_attention`` on ``scaled_dot_product_attention`` ...), the learner's own dependency is replaced, for that one
call, by a trusted stand-in.  A wrong ``scaled_dot_product_attention`` then costs its own tests' points, not
``self_attention``'s too; the test cells still check the dependency on the same inputs (``feedback.For.relies_on``),
so a failure of the dependent function still says which function to fix first.

``check.call`` (``checking.py``) enters ``standing_in(fn)`` around the learner's call.  It binds a fresh stand-in to
every name of the learner's namespace that holds the learner's dependency (its own name and any alias; its own name
only when the learner has none, e.g. a cell the scan withheld), and puts every binding back when the call returns or
raises.

What the graded kernel holds must be worth nothing to steal (issue 31: the expected values come from a replay
outside the learner's process, ``tfmgrader/verify.py``).  A stand-in is therefore made for one call only and works
only during it: its on/off switch is a closure cell, which an answer cannot name (the scan refuses ``__closure__``,
frames and reflection), and once the call is over it raises, so one kept by the learner's code computes nothing.
Its code is written here with basic tensor operations (no tfmlib, no forbidden shortcut), and the tests' shortcut
guard admits only that code (``allowed``).  It is never bound while the dependency's own tests run: no stand-in
is made when the function under test is the learner's dependency itself (under any name).  The stand-ins follow
COURSE_PLAN.md's contracts, as the solutions in ``solutions/`` implement them.
"""
from __future__ import annotations

import builtins
import contextlib
import math
import types

import torch

_type, _FunctionType, _range, _tuple = builtins.type, types.FunctionType, builtins.range, builtins.tuple
_dict, _str = builtins.dict, builtins.str
_dict_get, _dict_items, _dict_set, _dict_pop = dict.get, dict.items, dict.__setitem__, dict.pop
_MISSING = object()
_sqrt, _inf = math.sqrt, math.inf
_softmax, _tanh, _stack, _arange, _ones = torch.softmax, torch.tanh, torch.stack, torch.arange, torch.ones
_float64, _bool = torch.float64, torch.bool

#: dependent graded function -> the graded functions it is built on (exercises 1-9; COURSE_PLAN.md, solutions/).
DEPENDS = {
    "grad_norm_by_distance": ("rnn_forward",),                      # exercise 1
    "self_attention": ("scaled_dot_product_attention",),            # exercise 3
    "multi_head_attention": ("split_heads", "merge_heads"),         # exercise 4
    "decoder_mask": ("padding_mask",),                              # exercise 6
    "decoder_block": ("layer_norm",),                               # exercise 6
    "grouped_query_attention": ("apply_rope",),                     # exercise 9
}

#: When a notebook is graded, which function each test cell tests, by the cell's grade id (from the gradebook, never
#: the learner's notebook): a stand-in is made only while one of these cells calls the function it tests, bound under
#: that function's name.  Which call is a dependent's is never inferred from the learner's names there: an alias
#: (``self_attention = multi_head_attention``) or a name deleted at the right moment would otherwise hand another
#: exercise's function, or the dependency's own tests, a correct implementation (red-team round 7).
TESTED_BY = {
    "test_grad_norm": "grad_norm_by_distance",
    "test_self_attention": "self_attention",
    "test_mha_values": "multi_head_attention", "test_mha_mask": "multi_head_attention",
    "test_decoder_mask": "decoder_mask",
    "test_decoder_block": "decoder_block",
    "test_gqa_heads": "grouped_query_attention", "test_gqa_cache": "grouped_query_attention",
}
assert set(TESTED_BY.values()) == set(DEPENDS)

_OFF = ("{name}: the tests' stand-in for your {name} works only while a test calls the function built on it")


def _rnn_forward(on):
    def rnn_forward(x, h0, W_xh, W_hh, b_h):
        if not on[0]:
            raise RuntimeError(_OFF.format(name="rnn_forward"))
        h, states = h0, []
        for t in _range(x.shape[1]):
            h = _tanh(x[:, t] @ W_xh + h @ W_hh + b_h)
            states.append(h)
        return _stack(states, dim=1), h
    return rnn_forward


def _scaled_dot_product_attention(on):
    def scaled_dot_product_attention(q, k, v, mask=None):
        if not on[0]:
            raise RuntimeError(_OFF.format(name="scaled_dot_product_attention"))
        scores = q @ k.transpose(-2, -1) / _sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, -_inf)
            scores = scores.masked_fill(~mask.any(dim=-1, keepdim=True), 0.0)   # a row with no allowed key
        weights = _softmax(scores, dim=-1)
        if mask is not None:
            weights = weights.masked_fill(~mask, 0.0)
        return weights @ v, weights
    return scaled_dot_product_attention


def _split_heads(on):
    def split_heads(x, n_heads):
        if not on[0]:
            raise RuntimeError(_OFF.format(name="split_heads"))
        b, t, d = x.shape
        return x.reshape(b, t, n_heads, d // n_heads).transpose(1, 2)
    return split_heads


def _merge_heads(on):
    def merge_heads(x):
        if not on[0]:
            raise RuntimeError(_OFF.format(name="merge_heads"))
        b, h, t, d_h = x.shape
        return x.transpose(1, 2).reshape(b, t, h * d_h)
    return merge_heads


def _padding_mask(on):
    def padding_mask(lengths, max_len):
        if not on[0]:
            raise RuntimeError(_OFF.format(name="padding_mask"))
        return _arange(max_len)[None, :] < lengths[:, None]
    return padding_mask


def _layer_norm(on):
    def layer_norm(x, gamma, beta, eps=1e-5):
        if not on[0]:
            raise RuntimeError(_OFF.format(name="layer_norm"))
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
        return gamma * (x - mean) / (var + eps).sqrt() + beta
    return layer_norm


def _apply_rope(on):
    def apply_rope(x, positions, base=10000.0):
        if not on[0]:
            raise RuntimeError(_OFF.format(name="apply_rope"))
        d = x.shape[-1]
        theta = base ** (-_arange(0, d, 2, dtype=_float64) / d)
        angle = positions.to(_float64)[:, None] * theta
        cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return _stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)
    return apply_rope


#: dependency -> the factory of its stand-in: ``STAND_INS[name](on)`` works while ``on[0]`` is true.  (An answer cannot
#: reach this module: the scan admits no import of the course's packages.)
STAND_INS = {"rnn_forward": _rnn_forward, "scaled_dot_product_attention": _scaled_dot_product_attention,
           "split_heads": _split_heads, "merge_heads": _merge_heads, "padding_mask": _padding_mask,
           "layer_norm": _layer_norm, "apply_rope": _apply_rope}
assert set(STAND_INS) == {d for deps in DEPENDS.values() for d in deps}


def _dependent(fn, names):
    """The dependent graded function ``fn`` is (bound under its name in its namespace ``names``), or None."""
    for dependent in DEPENDS:
        if _dict_get(names, dependent) is fn:
            return dependent
    return None


@contextlib.contextmanager
def standing_in(fn, absent=None, test=None):
    """While the block runs, every name of ``fn``'s namespace bound to a dependency of ``fn`` (``DEPENDS``) holds a
    trusted stand-in, switched on; yields the stand-ins (for the shortcut guard's ``allow``).  Afterwards every
    binding is as it was and the stand-ins raise; a dependency the learner had not defined is then bound to
    ``absent(name)`` (``checking._absent``: raises NameError), so that a test cell that also calls it through
    ``check.call`` records that call in the kernel as the replay makes it.  Nothing is replaced when ``fn`` is not a
    plain function bound under a dependent's name, or when it is itself one of its dependencies.  ``test``: the grade id
    of the test cell the grader runs now (``checking.begin_test``; None in self-study): when graded, only the function
    that cell tests (``TESTED_BY``) gets stand-ins."""
    # Only the dict's own methods touch the namespace, and only its string keys: no learner code runs here, outside
    # the shortcut guard (a dict subclass, a key with its own __hash__ or __eq__ is left alone).
    names = fn.__globals__ if _type(fn) is _FunctionType else None
    names = names if _type(names) is _dict else None
    if names is None:
        dependent = None
    elif test is None:                  # self-study, Validate, make check: the learner's own kernel, nothing to guard
        dependent = _dependent(fn, names)
    else:                               # graded: the trusted test cell says which function it tests
        dependent = _dict_get(TESTED_BY, test) if _type(test) is _str else None
        dependent = dependent if dependent is not None and _dict_get(names, dependent) is fn else None
    originals = [_dict_get(names, d, _MISSING) for d in DEPENDS[dependent]] if dependent else []
    if dependent is None or any(o is fn for o in originals):
        yield ()
        return
    on, made, replaced, added = [True], [], [], []
    for name, original in zip(DEPENDS[dependent], originals):
        stand_in = STAND_INS[name](on)
        made.append(stand_in)
        if original is _MISSING:     # never defined, or its cell withheld by the scan: the dependent still scores
            added.append((name, stand_in))
            _dict_set(names, name, stand_in)
            continue
        for key in [k for k, value in _dict_items(names) if value is original and _type(k) is _str]:  # and aliases
            replaced.append((key, original))
            _dict_set(names, key, stand_in)
    try:
        yield _tuple(made)
    finally:
        on[0] = False
        for key, original in replaced:
            _dict_set(names, key, original)
        for key, stand_in in added:
            if _dict_get(names, key) is stand_in:
                if absent is None:
                    _dict_pop(names, key)
                else:
                    _dict_set(names, key, absent(key))

"""Trusted checks for the graded exercises (the nbgrader test cells in ``solutions/`` and ``notebooks/``).

The first, read-only cell of every exercise notebook runs ``import tfmlib.checking as check`` before any
learner code, and this module captures at import time the functions it compares with and the reference
implementations the hidden tests use.  So a learner cell that later redefines ``torch.allclose``,
``torch.nn.functional.scaled_dot_product_attention`` or a ``Tensor`` method changes neither the comparisons
nor the references.

- ``assert_close(name, got, expected)`` / ``assert_equal``: exact type (``type(got) is torch.Tensor``), shape,
  dtype, then values; a failure says what was expected and what came back, with a small example and a hint.
- ``call(fn, *args, forbid=(...))`` runs the learner's function inside ``forbid_shortcuts(...)``: calling one
  of the listed shortcuts (tfmlib's own implementations, ``torch.nn.functional.scaled_dot_product_attention``,
  ``torch.nn.MultiheadAttention``, layer norm, PyTorch's RNNs, ...) raises ``ShortcutError`` ("write your own").
- ``ref`` holds trusted references (PyTorch's own implementations) for the hidden tests.
- ``peak_numel(fn, ...)`` reports the largest tensor a function creates (blockwise attention must never
  build the full ``(Tq, Tk)`` score matrix).

- When a notebook is graded, ``call`` and ``peak_numel`` also record each result (in the learner's kernel) and the
  grader replays the test cells on those records in its own process (``tfmlib.trace``, ``_begin_test``,
  ``_replay``): the verdict that counts is reached where no learner code runs.

This module must stay importable without matplotlib; it imports torch and the standard library only.
The instructor guide (book/appendix/instructors.md) describes what it defends against and what it does not.
"""
from __future__ import annotations

import builtins
import contextlib
import math
import os
import sys
import types
import zlib

import torch
import torch.nn.functional as F
from torch import nn

from tfmlib import trace as _trace
from tfmlib.utils import seed_everything

# ---------------------------------------------------------------------------------------------------------
# Trusted copies, bound when the setup cell imports this module (before any learner code runs).
# ---------------------------------------------------------------------------------------------------------
_Tensor = torch.Tensor
_type = builtins.type
_isinstance = builtins.isinstance
_len = builtins.len
_float = builtins.float
_tuple = builtins.tuple
_max, _range = builtins.max, builtins.range
_allclose = torch.allclose
_equal = torch.equal
_isnan = torch.isnan
_tabs = torch.abs
_detach = torch.Tensor.detach
_reshape = torch.Tensor.reshape
_tolist = torch.Tensor.tolist
_to = torch.Tensor.to
_numel = torch.Tensor.numel
_any = torch.Tensor.any
_shape_of = torch._C.TensorBase.__dict__["shape"].__get__
_dtype_of = torch._C.TensorBase.__dict__["dtype"].__get__
_getprofile, _setprofile = sys.getprofile, sys.setprofile
_fn_modes = torch._C._len_torch_function_stack
_dispatch_modes = torch._C._len_torch_dispatch_stack
_TorchFunctionMode = torch.overrides.TorchFunctionMode

_THIS_FILE = os.path.abspath(__file__)
_TFMLIB_DIR = os.path.dirname(_THIS_FILE) + os.sep

#: Trusted reference implementations (PyTorch's own) for the hidden tests.
ref = types.SimpleNamespace(
    scaled_dot_product_attention=F.scaled_dot_product_attention,
    layer_norm=F.layer_norm,
    softmax=torch.softmax,
    RNN=nn.RNN,
    MultiheadAttention=nn.MultiheadAttention,
    autograd_grad=torch.autograd.grad,
    tril=torch.tril,
    matmul=torch.matmul,
    randn=torch.randn,
    rand=torch.rand,
    randint=torch.randint,
)


class CheckFailure(AssertionError):
    """A graded check failed; the message says what was expected, what came back, and a hint."""


class ShortcutError(RuntimeError):
    """The learner's function called an implementation it is meant to write itself."""


# ---------------------------------------------------------------------------------------------------------
# Comparisons
# ---------------------------------------------------------------------------------------------------------
def _fail(name, message, hint=None):
    __tracebackhide__ = True  # IPython shows the test cell's line, not this frame
    text = f"{name}: {message}"
    if hint:
        text += f"\nHint: {hint}"
    raise CheckFailure(text)


def _no_modes(name):
    __tracebackhide__ = True
    if _fn_modes() or _dispatch_modes():
        _fail(name, "a torch function/dispatch mode is active while checking; the checks need plain PyTorch. "
                    "Remove any TorchFunctionMode / TorchDispatchMode your code enters.")


def _preview(t, n=6, around=None):
    """n values of a tensor (flattened), as a short string: the first n, or with ``around`` (a flat index) a window
    that starts two values before it, marked "…," / ", …" where values before / after it are left out."""
    flat = _tolist(_reshape(_detach(t), (-1,)))
    fmt = lambda v: f"{v:.4g}" if _isinstance(v, _float) else str(v)  # noqa: E731
    if around is None:
        return "[" + ", ".join(fmt(v) for v in flat[:n]) + (", …]" if _len(flat) > n else "]")
    start = _max(0, around - 2)
    start = start if start + n <= _len(flat) else _max(0, _len(flat) - n)
    end = start + n if start + n < _len(flat) else _len(flat)
    return ("[" + ("…, " if start > 0 else "") + ", ".join(fmt(v) for v in flat[start:end])
            + (", …]" if end < _len(flat) else "]"))


def assert_tensor(name, got, shape=None, dtype=None, hint=None):
    """``got`` is exactly a ``torch.Tensor`` (not a subclass), with the given shape and dtype if given."""
    __tracebackhide__ = True
    _no_modes(name)
    if _type(got) is not _Tensor:
        _fail(name, f"expected a torch.Tensor, got {_type(got).__module__}.{_type(got).__qualname__}", hint)
    if shape is not None and _tuple(_shape_of(got)) != _tuple(shape):
        _fail(name, f"expected shape {_tuple(shape)}, got shape {_tuple(_shape_of(got))}", hint)
    if dtype is not None and _dtype_of(got) != dtype:
        _fail(name, f"expected dtype {dtype}, got dtype {_dtype_of(got)}", hint)


def assert_close(name, got, expected, atol=None, rtol=None, hint=None):
    """``got`` matches the trusted ``expected`` tensor: same exact type, shape, dtype, and values.

    Tolerances default to 1e-5 (float32) / 1e-10 (float64).  NaN never matches.
    """
    __tracebackhide__ = True
    if _type(expected) is not _Tensor:
        raise TypeError(f"the expected value of {name} must be a torch.Tensor (test bug)")
    assert_tensor(name, got, _shape_of(expected), _dtype_of(expected), hint)
    g, e = _detach(got), _detach(expected)
    if _dtype_of(e).is_floating_point:
        double = _dtype_of(e) == torch.float64
        atol = atol if atol is not None else (1e-10 if double else 1e-5)
        rtol = rtol if rtol is not None else (1e-8 if double else 1e-4)
        if bool(_any(_isnan(g))):
            _fail(name, f"the result contains NaN: got {_preview(g)}; expected {_preview(e)}", hint)
        ok = _allclose(g, e, rtol=rtol, atol=atol, equal_nan=False)
    else:
        ok = _equal(g, e)
    if not ok:
        diffs = _tolist(_reshape(_tabs(_to(g, torch.float64) - _to(e, torch.float64)), (-1,)))
        worst = _max(_range(_len(diffs)), key=lambda i: diffs[i] if diffs[i] == diffs[i] else math.inf)
        index, rest = [], worst
        for size in reversed(_tuple(_shape_of(e))):
            index.append(rest % size)
            rest //= size
        g_w, e_w = _tolist(_reshape(g, (-1,)))[worst], _tolist(_reshape(e, (-1,)))[worst]
        _fail(name, f"values differ (largest difference at index {_tuple(reversed(index))}: "
                    f"expected {e_w!r}, got {g_w!r}).\n  expected {_preview(e, around=worst)}\n"
                    f"  got      {_preview(g, around=worst)}", hint)


def assert_equal(name, got, expected, hint=None):
    """Exact equality (masks, indices): same exact type, shape, dtype and every element."""
    __tracebackhide__ = True
    assert_close(name, got, expected, hint=hint)


def assert_number(name, got, expected, rel=1e-6, abs_=0.0, hint=None):
    """``got`` is a real number (int, float, or a 0-d tensor) within ``rel``/``abs_`` of ``expected``."""
    __tracebackhide__ = True
    _no_modes(name)
    if _type(got) is _Tensor and _len(_shape_of(got)) == 0:
        value = _tolist(_detach(got))
    elif _type(got) in (int, _float) or _type(got).__module__ == "numpy":
        value = _float(got)
    else:
        _fail(name, f"expected a number (float or 0-d tensor), got {_type(got).__qualname__}", hint)
    value, expected = _float(value), _float(expected)
    if not math.isclose(value, expected, rel_tol=rel, abs_tol=abs_):
        _fail(name, f"expected {expected:.6g}, got {value:.6g}", hint)


def assert_true(name, condition, message, hint=None):
    """Fail with ``message`` unless ``condition`` is exactly ``True`` (a bool or a one-element bool tensor)."""
    __tracebackhide__ = True
    if _type(condition) is _Tensor:
        condition = _tolist(condition)
    if condition is not True:
        _fail(name, message, hint)


def seed(value=0):
    """Seed Python's, NumPy's and PyTorch's generators (``tfmlib.utils.seed_everything``); returns a seeded
    torch.Generator."""
    return seed_everything(value)


# ---------------------------------------------------------------------------------------------------------
# Forbidden shortcuts
# ---------------------------------------------------------------------------------------------------------
def _code(f):
    f = getattr(f, "__func__", f)
    return getattr(f, "__code__", None)


#: group name -> (builtin names that must not be called, Python functions whose code must not run).
#: Builtins are matched by name (``torch.layer_norm``, ``torch._C._nn.scaled_dot_product_attention``
#: and aten ops called through ``torch.ops`` alike); Python functions by their code object.
SHORTCUTS = {
    "sdpa": ({"scaled_dot_product_attention", "_scaled_dot_product_attention_math",
              "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_for_cpu",
              "_scaled_dot_product_efficient_attention", "_native_multi_head_attention",
              "_transformer_encoder_layer_fwd"},
             [F.multi_head_attention_forward, nn.MultiheadAttention.forward, nn.MultiheadAttention.__init__]),
    "layer_norm": ({"layer_norm", "native_layer_norm", "group_norm", "native_group_norm", "batch_norm",
                    "native_batch_norm", "_batch_norm_impl_index", "instance_norm"},
                   [F.layer_norm, nn.LayerNorm.forward, F.group_norm, F.batch_norm, F.instance_norm]),
    "rnn": ({"rnn_tanh", "rnn_tanh_cell", "rnn_relu", "rnn_relu_cell", "gru", "gru_cell", "lstm", "lstm_cell"},
            [nn.RNN.forward, nn.RNNCell.forward, nn.GRU.forward, nn.LSTM.forward, nn.GRUCell.forward,
             nn.LSTMCell.forward]),
    "transformer": (set(), [nn.TransformerEncoderLayer.forward, nn.TransformerDecoderLayer.forward,
                            nn.Transformer.generate_square_subsequent_mask]),
    # every function defined in the tfmlib package (except this module)
    "tfmlib": (set(), []),
}

_LABELS = {}
for _group, (_names, _funcs) in SHORTCUTS.items():
    for _f in _funcs:
        _LABELS[_code(_f)] = f"{_f.__module__}.{_f.__qualname__}"
_OP_CALL_CODES = set()
for _cls_name in ("OpOverload", "OpOverloadPacket"):
    _cls = getattr(torch._ops, _cls_name, None)
    if _cls is not None and _code(getattr(_cls, "__call__", None)) is not None:
        _OP_CALL_CODES.add(_code(_cls.__call__))


class forbid_shortcuts(contextlib.ContextDecorator):
    """While active, calling a shortcut of the named groups raises ``ShortcutError("... write your own")``.

    ``with forbid_shortcuts("sdpa", "tfmlib"): out = learner_fn(q, k, v)``.  Groups: see ``SHORTCUTS``
    (``"tfmlib"`` forbids every function of the course library).  ``allow`` lists functions that stay
    allowed even in a forbidden group (e.g. a tfmlib module handed to the learner's function).
    The check uses a profile hook, so it also catches a shortcut bound to another name before the test.
    A violation is remembered: catching the error inside the function does not hide it.
    """

    def __init__(self, *groups, allow=()):
        unknown = [g for g in groups if g not in SHORTCUTS]
        if unknown:
            raise ValueError(f"unknown shortcut groups {unknown}; known: {sorted(SHORTCUTS)}")
        self.groups = groups
        self.names = set().union(*(SHORTCUTS[g][0] for g in groups)) if groups else set()
        self.codes = {_code(f) for g in groups for f in SHORTCUTS[g][1]}
        self.tfmlib = "tfmlib" in groups
        self.allowed = {_code(f) for f in allow}
        self.violation = None

    def _hook(self, frame, event, arg):
        label = None
        if event == "call":
            code = frame.f_code
            if code in self.allowed:
                return
            if code in self.codes:
                label = _LABELS.get(code, code.co_name)
            elif self.tfmlib and code.co_filename.startswith(_TFMLIB_DIR) and code.co_filename != _THIS_FILE:
                label = f"tfmlib's {code.co_name} ({os.path.basename(code.co_filename)})"
            elif code in _OP_CALL_CODES:
                op = str(frame.f_locals.get("self", ""))
                if any(n in op for n in self.names):
                    label = f"torch.ops.{op}"
        elif event == "c_call":
            name = getattr(arg, "__name__", "")
            if name in self.names and not _isinstance(getattr(arg, "__self__", None), _Tensor):
                label = f"torch's built-in {name}"
        if label is not None:
            self.violation = label
            raise ShortcutError(f"your function called {label}. This exercise asks you to write your own; "
                                f"use basic tensor operations (matmul, softmax, sum, ...).")

    def __enter__(self):
        self.violation = None
        self._previous = _getprofile()
        self._installed = self._hook
        _setprofile(self._installed)
        return self

    def __exit__(self, exc_type, exc, tb):
        current = _getprofile()
        _setprofile(self._previous)
        if self.violation is not None:
            if exc_type is ShortcutError:
                return False
            raise ShortcutError(f"your function called {self.violation} (and caught the error). "
                                f"This exercise asks you to write your own.")
        if current is not self._installed:
            raise ShortcutError("your function changed the profiler (sys.setprofile) that the tests use "
                                "to check for shortcuts; remove that call.")
        return False


def call(fn, *args, forbid=("tfmlib",), allow=(), **kwargs):
    """Run the learner's ``fn(*args, **kwargs)`` with the ``forbid`` shortcut groups disabled.

    While a notebook is graded, the result is also recorded (learner's kernel) or replayed (grader's
    process); see ``tfmlib.trace``."""
    if _MODE is not None and _MODE.replaying:
        return _MODE.record(((args, kwargs)))
    if not callable(fn):
        raise CheckFailure(f"{fn!r} is not a function; run the cell that defines it first")

    def run():
        with forbid_shortcuts(*forbid, allow=allow):
            return fn(*args, **kwargs)
    return run() if _MODE is None else _MODE.record((args, kwargs), run)


class _PeakNumel(_TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.peak, self.where = 0, None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in (out if _isinstance(out, (tuple, list)) else (out,)):
            if _isinstance(t, _Tensor) and _numel(t) > self.peak:
                self.peak, self.where = _numel(t), (getattr(func, "__name__", str(func)), _tuple(_shape_of(t)))
        return out


def peak_numel(fn, *args, forbid=("tfmlib",), **kwargs):
    """Run ``fn`` like ``call`` and also return the largest number of elements of any tensor a torch
    operation returned while it ran: ``(result, peak, (op name, shape))``."""
    if _MODE is not None and _MODE.replaying:
        return _MODE.record(((args, kwargs), "peak_numel"))

    def run():
        mode = _PeakNumel()
        with mode:
            with forbid_shortcuts(*forbid):
                result = fn(*args, **kwargs)
        return result, mode.peak, mode.where
    if not callable(fn):
        raise CheckFailure(f"{fn!r} is not a function; run the cell that defines it first")
    return run() if _MODE is None else _MODE.record(((args, kwargs), "peak_numel"), run)


def unpack(name, result, n):
    """Check that the learner returned a tuple/list of ``n`` items and return it."""
    __tracebackhide__ = True
    if _type(result) not in (tuple, list) or _len(result) != n:
        _fail(name, f"expected a tuple of {n} items, got {_type(result).__qualname__}"
                    + (f" of length {_len(result)}" if _type(result) in (tuple, list) else ""))
    return result


# ---------------------------------------------------------------------------------------------------------
# Grading: record in the learner's kernel, replay in the grader (tfmlib.trace)
# ---------------------------------------------------------------------------------------------------------
def _begin_test(cell_id):
    """Called by the grader before each test cell: names the cell for the trace and reseeds the global
    generators, so that the cell builds the same inputs whatever the learner's code did before it."""
    if _MODE is not None:
        _MODE.begin(cell_id)
    seed(zlib.crc32(str(cell_id).encode()))


def _replay(records):
    """Context manager of the grader: ``call`` and ``peak_numel`` serve ``records`` instead of running code."""
    global _MODE
    previous, _MODE = _MODE, _trace.Replayer(records)
    try:
        yield _MODE
    finally:
        _MODE = previous


_replay = contextlib.contextmanager(_replay)
_MODE = None
if os.environ.get(_trace.TRACE_ENV):
    _MODE = _trace.Recorder(os.environ[_trace.TRACE_ENV])
